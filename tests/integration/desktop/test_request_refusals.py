"""`desktop request --worker W` of a connected worker that offers no Computer Use is refused at
request time, in one line naming what the worker lacks; it was approved and failed only at the
first action with `no_display`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.advertisement import Advertisement, Capability
from tests.harness import CoordinatorProcess, WorkerProcess, wait_until
from tests.harness.raw_worker import RawWorker


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    return module_coordinator


@pytest.fixture
def started() -> Iterator[list[WorkerProcess]]:
    workers: list[WorkerProcess] = []
    yield workers
    for worker in workers:
        worker.stop()


def _online(
    coordinator: CoordinatorProcess,
    tmp_path: Path,
    started: list[WorkerProcess],
    name: str,
    *args: str,
) -> WorkerProcess:
    worker = WorkerProcess(coordinator, name, home=tmp_path, browser=False, extra_args=args)
    started.append(worker)
    worker.start().wait_online(60)
    return worker


def _request(coordinator: CoordinatorProcess, worker: str) -> tuple[int, str, str]:
    done = coordinator.cli(
        "desktop", "request", "--worker", worker, "--action", "screenshot",
        "--reason", "refused at request", check=False,
    )  # fmt: skip
    return done.returncode, done.stdout, done.stderr


def test_a_worker_without_a_display_is_refused_at_request(
    coordinator: CoordinatorProcess, tmp_path: Path, started: list[WorkerProcess]
) -> None:
    worker = _online(coordinator, tmp_path, started, "refuse-no-display")  # no DISPLAY at all
    before = coordinator.cli_json("approvals", "list")["approvals"]
    code, out, err = _request(coordinator, "refuse-no-display")
    assert (code, out) == (1, "")
    assert err == (
        f"deskfleet: worker refuse-no-display ({worker.worker_id}) offers no Computer Use:"
        " no display: DISPLAY is not set\n"
    )
    # Nothing was left waiting for a person to approve.
    assert coordinator.cli_json("approvals", "list")["approvals"] == before


def test_a_worker_run_with_no_computer_use_is_refused_at_request(
    coordinator: CoordinatorProcess, tmp_path: Path, started: list[WorkerProcess]
) -> None:
    worker = _online(coordinator, tmp_path, started, "refuse-headless", "--no-computer-use")
    code, out, err = _request(coordinator, worker.worker_id)
    assert (code, out) == (1, "")
    assert err == (
        f"deskfleet: worker refuse-headless ({worker.worker_id}) offers no Computer Use:"
        " disabled by local policy (--no-computer-use)\n"
    )


def test_an_offline_worker_is_asked_as_before(
    coordinator: CoordinatorProcess, tmp_path: Path, started: list[WorkerProcess]
) -> None:
    """Its last advertisement may be stale (it may come back with its display): the request
    waits for approval, as a request of a worker that never connected does."""
    worker = _online(coordinator, tmp_path, started, "refuse-offline")
    worker.stop()
    wait_until(lambda: not (worker.row() or {}).get("online"), 30, 0.2, "the worker offline")
    requested = coordinator.cli_json(
        "desktop", "request", "--worker", worker.worker_id, "--action", "screenshot",
        "--reason", "offline",
    )  # fmt: skip
    assert requested["status"] == "WAITING_FOR_AUTHORITY", requested


def test_a_hostile_workers_reason_is_spelled_out_and_cut(coordinator: CoordinatorProcess) -> None:
    """The worker writes its own computer_use reason: an escape sequence in it reached the
    owner's terminal raw in the refusal (retitling it, clearing the screen), and a reason of
    the 1 KiB a hello may hold made a 1 KiB error line."""
    hostile = RawWorker(coordinator, "refuse-hostile")
    try:
        reason = "\x1b]0;owned\x07\x1b[2J\u202egone\r"
        hostile.connect(
            Advertisement(hostname="raw", capabilities=(Capability("computer_use", False, reason),))
        )
        code, out, err = _request(coordinator, hostile.worker_id)
        assert (code, out) == (1, "")
        assert err == (
            f"deskfleet: worker refuse-hostile ({hostile.worker_id}) offers no Computer Use:"
            " \\x1b]0;owned\\x07\\x1b[2J\\u202egone\n"
        )
        hostile.close()
        hostile.reconnect(
            [], Advertisement(capabilities=(Capability("computer_use", False, "x" * 1000),))
        )
        code, out, err = _request(coordinator, hostile.worker_id)
        assert (code, out) == (1, "")
        assert err.endswith(" offers no Computer Use: " + "x" * 197 + "...\n"), err
    finally:
        hostile.close()
