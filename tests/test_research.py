"""Browser actions through runs: real coordinator, real worker, real Chromium, the local site."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scripts.local_site.server import FACTS, start
from tests.harness import CoordinatorProcess, WorkerProcess, journal, submit, write_plan

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    server, url = start()
    yield url
    server.shutdown()
    server.server_close()


def _receipts(coordinator: CoordinatorProcess, run_id: str) -> list[dict]:
    return [e["data"] for e in journal(coordinator, run_id) if e["kind"] == "receipt"]


def test_a_run_fetches_pages_through_a_worker(
    coordinator: CoordinatorProcess,
    workers: Callable[..., WorkerProcess],
    tmp_path: Path,
    site: str,
) -> None:
    workers("w").wait_online()
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {
                "kind": "browser.fetch",
                "args": {"url": f"{site}{path}"},
                "idempotent": True,
                "route": {"capability": "headless"},
            }
            for path in ("/varn/north-light.html", "/files/report.pdf")
        ],
    )
    run = submit(coordinator, plan, wait=True)
    assert run["status"] == "SUCCEEDED", run["stopReason"]
    page, pdf = (r["result"] for r in _receipts(coordinator, run["id"]))
    assert page["outcome"] == "ok" and FACTS["/varn/north-light.html"] in page["text"]
    assert (pdf["outcome"], pdf["content_type"], pdf["text"]) == (
        "unsupported_content",
        "application/pdf",
        "",
    )


def test_the_coordinator_decides_whether_private_networks_are_reachable(
    tmp_path: Path, site: str
) -> None:
    coordinator = CoordinatorProcess(tmp_path / "closed", allow_private_networks=False).start()
    worker = WorkerProcess(coordinator, "w")
    try:
        worker.start().wait_online()
        plan = write_plan(
            tmp_path / "plan.json",
            [
                {
                    "kind": "browser.fetch",
                    "idempotent": True,
                    "args": {"url": f"{site}/varn/lens.html", "policy": {"allow_private": True}},
                }
            ],
        )
        run = submit(coordinator, plan, wait=True)
        [receipt] = _receipts(coordinator, run["id"])
        assert receipt["result"]["outcome"] == "refused"
        assert "loopback or private address" in receipt["result"]["reason"]
    finally:
        worker.stop()
        coordinator.stop()
