"""Workers as real subprocesses: come online, advertise capabilities, go offline, get revoked."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.harness import CoordinatorProcess, WorkerProcess, Xvfb, wait_until

pytestmark = pytest.mark.slow

# These read the list of every enrolled worker, or restart the coordinator: each has a
# coordinator of its own. The others share the module's, one test's workers at a time.
OWN_COORDINATOR = {
    "test_revoked_worker_is_cut_off_at_once_and_refused_afterwards",
    "test_drained_worker_stays_connected_but_takes_no_new_work",
    "test_worker_reconnects_after_the_coordinator_restarts",
}


@pytest.fixture
def coordinator(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CoordinatorProcess]:
    """The module's coordinator once no worker of an earlier test is online there (the
    counts each test checks are the whole fleet's), or a new one for OWN_COORDINATOR."""
    if request.node.originalname in OWN_COORDINATOR:
        proc = CoordinatorProcess(tmp_path / "coord").start()
        yield proc
        proc.stop()
        return
    shared: CoordinatorProcess = request.getfixturevalue("module_coordinator")

    def idle() -> bool:
        status = shared.status()
        return not (status["online"] or status["headlessOnline"] or status["computerUseOnline"])

    wait_until(idle, shared.lease + 10, 0.1, "no worker of an earlier test online")
    yield shared


def _capability(row: dict, name: str) -> dict:
    return next(c for c in row["capabilities"] if c["name"] == name)


def test_worker_without_display_is_online_as_headless_only(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess]
) -> None:
    started = time.monotonic()
    worker = workers("plain")
    row = worker.wait_online()
    print(f"worker run -> online in status: {time.monotonic() - started:.2f} s")
    status = coordinator.status()
    assert (status["headlessOnline"], status["computerUseOnline"]) == (1, 0)
    assert _capability(row, "headless")["available"] is True
    cu = _capability(row, "computer_use")
    assert cu["available"] is False and "DISPLAY is not set" in cu["reason"]
    assert row["displays"] == [] and row["replica"] == "r1" and row["lastHeartbeat"]
    assert row["versions"]["chromium"] and row["versions"]["deskfleet"]
    shown = coordinator.cli("workers", "show", worker.worker_id).stdout
    assert "computer_use: absent: no display: DISPLAY is not set" in shown


def test_worker_under_xvfb_counts_for_computer_use_and_headless(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], xvfb: Xvfb
) -> None:
    desk = workers("desk", display_env=xvfb.env)
    plain = workers("plain")
    desk_row = desk.wait_online()
    plain.wait_online()
    status = coordinator.status()
    assert (status["headlessOnline"], status["computerUseOnline"]) == (2, 1)
    assert _capability(desk_row, "computer_use")["available"] is True
    assert desk_row["displays"] == [{"index": 0, "left": 0, "top": 0, "width": 1280, "height": 800}]


def test_missing_browser_is_an_absent_capability_with_its_reason(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess]
) -> None:
    worker = workers("nobrowser", extra_args=("--chromium", "/nonexistent/chromium"))
    row = worker.wait_online()
    headless = _capability(row, "headless")
    assert headless["available"] is False
    assert "no browser at /nonexistent/chromium" in headless["reason"]
    assert coordinator.status()["headlessOnline"] == 0


def test_local_policy_can_refuse_computer_use(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], xvfb: Xvfb
) -> None:
    # No browser: what is checked is the display capability alone.
    nocu = workers("nocu", display_env=xvfb.env, extra_args=("--no-computer-use",), browser=False)
    row = nocu.wait_online()
    assert "disabled by local policy" in _capability(row, "computer_use")["reason"]
    assert coordinator.status()["computerUseOnline"] == 0


def test_token_capabilities_limit_what_a_worker_may_offer(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], xvfb: Xvfb
) -> None:
    worker = workers("limited", display_env=xvfb.env, start=False)
    assert worker.enroll(coordinator.create_token("--capability", "headless")).returncode == 0
    row = worker.start().wait_online()
    assert _capability(row, "computer_use")["reason"] == "not granted by the enrollment token"
    assert row["allowedCapabilities"] == ["headless"]
    status = coordinator.status()
    assert (status["headlessOnline"], status["computerUseOnline"]) == (1, 0)


def test_killed_worker_goes_offline(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess]
) -> None:
    worker = workers("victim")
    worker.wait_online()
    worker.signal(signal.SIGKILL)
    wait_until(lambda: not worker.row()["online"], coordinator.lease + 5, what="offline")
    assert coordinator.status()["headlessOnline"] == 0


def test_silent_worker_goes_offline_after_its_lease_and_comes_back(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess]
) -> None:
    worker = workers("sleepy", browser=False)
    worker.wait_online()
    # A stopped process keeps its TCP connection open: only the lease can tell it is gone.
    worker.signal(signal.SIGSTOP)
    stopped = time.monotonic()
    # The core's ping ack timeout is at least 5 s (server.server_options).
    wait_until(lambda: not worker.row()["online"], coordinator.lease + 10, what="lease lapse")
    assert time.monotonic() - stopped >= coordinator.lease - coordinator.heartbeat - 0.1
    worker.signal(signal.SIGCONT)
    worker.wait_online(timeout=20)


def test_revoked_worker_is_cut_off_at_once_and_refused_afterwards(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess]
) -> None:
    worker = workers("revokee", browser=False)
    worker.wait_online()
    revoked_at = time.monotonic()
    out = coordinator.cli("workers", "revoke", worker.worker_id).stdout
    assert "revoked" in out
    assert worker.proc is not None
    assert worker.proc.wait(10) == 3
    assert time.monotonic() - revoked_at < 5
    assert "has been revoked" in worker.log.read_text()
    assert coordinator.status()["workers"] == []
    listed = coordinator.cli_json("workers", "list", "--all")["workers"]
    assert [(w["id"], w["state"], w["online"]) for w in listed] == [
        (worker.worker_id, "revoked", False)
    ]
    # Its credential is refused on every later connect.
    worker.start()
    assert worker.proc.wait(30) == 3
    assert "refused this worker" in worker.log.read_text().splitlines()[-1]


def test_drained_worker_stays_connected_but_takes_no_new_work(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess]
) -> None:
    worker = workers("drainee")
    worker.wait_online()
    coordinator.cli("workers", "drain", worker.worker_id)
    status = coordinator.status()
    assert status["headlessOnline"] == 0
    assert [(w["state"], w["online"]) for w in status["workers"]] == [("draining", True)]
    coordinator.cli("workers", "undrain", worker.worker_id)
    assert coordinator.status()["headlessOnline"] == 1


def test_worker_reconnects_after_the_coordinator_restarts(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess]
) -> None:
    worker = workers("faithful", browser=False)
    worker.wait_online()
    port = coordinator.port
    coordinator.kill()
    coordinator.start(port=port)
    worker.wait_online(timeout=40)
    assert "retrying in" in worker.log.read_text()
