"""The research fallback counts a desktop's installed Chromium (HEADLESS_NOT_GRANTED) as a
browser it can show, and still only on a desktop whose token granted Computer Use: a hostile
worker granted headless only that advertises Computer Use and the reason is not asked for."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.advertisement import HEADLESS_NOT_GRANTED, Advertisement, Capability, Display
from tests.harness import CoordinatorProcess, wait_run, wait_until
from tests.harness.raw_worker import RawWorker

DESK = Advertisement(
    hostname="raw",
    displays=(Display(0, 0, 0, 1280, 800),),
    capabilities=(
        Capability("computer_use", True),
        Capability("headless", False, HEADLESS_NOT_GRANTED),
    ),
)


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    return module_coordinator


@pytest.fixture
def raws() -> Iterator[list[RawWorker]]:
    made: list[RawWorker] = []
    yield made
    for worker in made:
        worker.close()


def _approvals(coordinator: CoordinatorProcess, run_id: str) -> list[dict[str, str]]:
    found = coordinator.cli_json("approvals", "list")["approvals"]
    return [a for a in found if a["runId"] == run_id]


def test_a_headless_only_worker_claiming_a_desktop_is_not_the_fallback(
    coordinator: CoordinatorProcess, raws: list[RawWorker]
) -> None:
    liar = RawWorker(coordinator, "fallback-liar", capabilities=("headless",))
    raws.append(liar)
    liar.connect(DESK)
    run = coordinator.cli_json("research", "lens", "--url", "http://127.0.0.1:9/lens.html")
    waiting = wait_run(coordinator, run["id"], lambda r: bool(r.get("waiting")), 20)
    assert waiting["waiting"]["code"] == "no_eligible_worker", waiting
    assert _approvals(coordinator, run["id"]) == []
    # A desktop granted Computer Use only, Chromium installed: the fallback asks for it.
    desk = RawWorker(coordinator, "fallback-desk", capabilities=("computer_use",))
    raws.append(desk)
    desk.connect(DESK)
    wait_until(lambda: _approvals(coordinator, run["id"]), 20, 0.2, "the fallback's approval")
    [approval] = _approvals(coordinator, run["id"])
    assert (approval["kind"], approval["workerId"]) == ("research", desk.worker_id)
    coordinator.cli("runs", "cancel", run["id"], check=False)
