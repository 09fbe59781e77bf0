"""`deskfleet top`: a real coordinator with real workers (one on an X display), read as a
frame (`--once`), as a document (`--json`), and live in a terminal until Ctrl-C."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import (
    BIN,
    CoordinatorProcess,
    WorkerProcess,
    Xvfb,
    base_env,
    prepared,
    submit,
    wait_until,
    write_plan,
)


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    """One coordinator for the module's tests that read their own runs and users (no worker
    is ever enrolled on it); the fleet-wide frame has its own coordinator and workers."""
    return module_coordinator


@pytest.fixture
def own_workers(
    own_coordinator: CoordinatorProcess, tmp_path: Path
) -> Iterator[Callable[..., WorkerProcess]]:
    """Enrolled, running workers of the test's own coordinator."""
    started: list[WorkerProcess] = []

    def make(name: str, *, display_env: dict[str, str] | None = None) -> WorkerProcess:
        worker = WorkerProcess(
            own_coordinator, name, display_env=display_env, home=tmp_path / "workers"
        )
        started.append(worker)
        return worker.start()

    yield make
    for worker in started:
        worker.stop()


def _row(text: str, worker_id: str) -> str:
    # The worker table's row starts with the id (the approvals table names it later on).
    [line] = [line for line in text.splitlines() if line.startswith(f"│ {worker_id}")]
    return line


# The whole fleet's counts are what it checks: its own coordinator, with only its workers.
@pytest.mark.slow
def test_top_once_shows_the_fleet_its_actions_runs_approvals_and_kill_switch(
    own_coordinator: CoordinatorProcess,
    own_workers: Callable[..., WorkerProcess],
    xvfb: Xvfb,
    tmp_path: Path,
) -> None:
    coordinator = own_coordinator
    plain = own_workers("plain")
    desk = own_workers("desk", display_env=xvfb.env)
    plain.wait_online()
    desk.wait_online()
    status = coordinator.status()
    assert (status["headlessOnline"], status["computerUseOnline"]) == (2, 1)

    # A long action on the plain worker, a run that cannot be routed, an approval waiting.
    plan = write_plan(
        tmp_path / "sleep.json",
        [
            {
                "kind": "diag.sleep",
                "args": {"seconds": 30},
                "route": {"worker": plain.worker_id},
                "idempotent": True,
            }
        ],
    )
    sleeping = submit(coordinator, plan)
    stuck = submit(
        coordinator,
        write_plan(
            tmp_path / "stuck.json",
            [{"kind": "diag.echo", "args": {}, "route": {"labels": {"zone": "nowhere"}}}],
        ),
    )
    desktop = coordinator.cli_json(
        "desktop", "request", "--worker", desk.worker_id, "--action", "screenshot"
    )

    def sleeping_started() -> dict[str, Any] | None:
        doc: dict[str, Any] = coordinator.cli_json("top")
        [row] = [w for w in doc["workers"] if w["id"] == plain.worker_id]
        current = row["currentAction"]
        return doc if current and current["status"] == "STARTED" else None

    doc = wait_until(sleeping_started, 30, 0.2, "the sleep to start")
    assert (doc["headlessOnline"], doc["computerUseOnline"], doc["workersOnline"]) == (2, 1, 2)
    rows = {w["id"]: w for w in doc["workers"]}
    assert set(rows) == {plain.worker_id, desk.worker_id}
    current = rows[plain.worker_id]["currentAction"]
    assert (current["runId"], current["kind"], current["attempt"]) == (
        sleeping["id"],
        "diag.sleep",
        1,
    )
    assert rows[desk.worker_id]["currentAction"] is None
    assert {w["replica"] for w in rows.values()} == {coordinator.replica}
    assert "computer_use" in rows[desk.worker_id]["capabilities"]
    by_state = doc["runsByState"]
    assert (by_state["RUNNING"], by_state["WAITING_FOR_ENVIRONMENT"]) == (1, 1)
    assert (by_state["WAITING_FOR_AUTHORITY"], by_state["SUCCEEDED"]) == (1, 0)
    assert doc["fleetWide"] is True
    assert doc["approvalsWaiting"] == 1 and doc["approvals"][0]["runId"] == desktop["id"]
    assert doc["killSwitchEngaged"] is False

    # The frame says the same to a person.
    text = coordinator.cli("top", "--once").stdout
    assert "headless online: 2" in text and "computer use online: 1" in text
    assert "workers online: 2 of 2" in text
    assert re.search(r"diag\.sleep #0 attempt 1 STARTED, [\d.]+ s in " + sleeping["id"], text)
    assert "idle" in _row(text, desk.worker_id)
    assert re.search(r"WAITING_FOR_ENVIRONMENT\D+1\b", text)
    assert "approvals waiting: 1" in text and desktop["id"] in text
    assert "kill switch: released" in text
    assert stuck["status"] == "WAITING_FOR_ENVIRONMENT"

    coordinator.cli("kill", "engage", "--reason", "maintenance window")
    text = coordinator.cli("top", "--once").stdout
    assert "kill switch: ENGAGED: fleet" in text and "maintenance window" in text
    assert coordinator.cli_json("top")["killSwitchEngaged"] is True
    coordinator.cli("kill", "release", "--fleet")
    assert coordinator.cli_json("top")["killSwitchEngaged"] is False
    coordinator.cli("runs", "cancel", sleeping["id"])


def test_an_owner_sees_only_their_own_runs(coordinator: CoordinatorProcess, tmp_path: Path) -> None:
    # Earlier tests' runs count in the fleet-wide view: this test's is one more.
    waiting = coordinator.cli_json("top")["runsByState"].get("WAITING_FOR_ENVIRONMENT", 0)
    route = {"labels": {"zone": f"nowhere-{uuid.uuid4().hex[:8]}"}}
    plan = write_plan(tmp_path / "p.json", [{"kind": "diag.echo", "args": {}, "route": route}])
    submit(coordinator, plan)  # the admin's run: it waits, no worker has the label
    token = coordinator.cli_json("users", "create", f"olga-{uuid.uuid4().hex[:8]}")["token"]
    token_file = tmp_path / "olga.token"
    token_file.write_text(token)
    doc = coordinator.cli_json("top", token_file=token_file)
    assert doc["fleetWide"] is False
    assert sum(doc["runsByState"].values()) == 0
    assert coordinator.cli_json("top")["runsByState"]["WAITING_FOR_ENVIRONMENT"] == waiting + 1


def _offline_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`deskfleet ARGS` against an address where nothing listens."""
    token_file = tmp_path / "admin.token"
    token_file.write_text("dfu_x.not-checked-before-the-call\n")
    return subprocess.run(
        [BIN / "deskfleet", *args, "--coordinator", "127.0.0.1:1", "--token-file", str(token_file)],
        capture_output=True,
        text=True,
        env=base_env(tmp_path),
        timeout=30,
    )


def test_a_bad_interval_is_a_usage_error(tmp_path: Path) -> None:
    done = _offline_cli(tmp_path, "top", "--interval", "0")
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        "deskfleet: --interval must be a positive number of seconds\n",
    )
    helped = subprocess.run([BIN / "deskfleet", "--help"], capture_output=True, text=True)
    assert re.search(r"^\s+top\s+a live view of the fleet", helped.stdout, re.M)


# gRPC's C core logs to stderr on its own, in this form. Its event engine's poller can log
# "epoll_wait error: Bad file descriptor" while the process exits (seen once in CI after a clean
# Ctrl-C, exit status 0): gRPC's, not top's. The test asks that top itself says nothing.
_GRPC_CORE_LOG = re.compile(rb"^[EWID]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\] .*\n?", re.M)


def _ours(stderr: bytes) -> bytes:
    return _GRPC_CORE_LOG.sub(b"", stderr)


def _read_until(fd: int, wanted: bytes, timeout: float) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{wanted!r} never appeared; saw {seen[-2000:]!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:
                break
    return seen


def test_in_a_terminal_top_refreshes_until_ctrl_c_and_exits_quietly(
    coordinator: CoordinatorProcess,
) -> None:
    env = base_env(coordinator.workdir)
    env.update(
        DESKFLEET_COORDINATOR=coordinator.address,
        DESKFLEET_TOKEN_FILE=str(coordinator.admin_token_file),
        COLUMNS="200",
        LINES="60",
        TERM="xterm",
    )
    leader, follower = pty.openpty()
    # Started with SIGINT ignored, as a child of a process that ignores it would be (it is
    # inherited through exec): Ctrl-C must still leave the live view.
    proc = subprocess.Popen(
        # A generous deadline per call: on a saturated machine the first answer can be slow,
        # and this test is about the live view, not latency.
        prepared(
            [str(BIN / "deskfleet"), "top", "--interval", "0.2", "--timeout", "30"],
            ignore_sigint=True,
        ),
        stdin=follower,
        stdout=follower,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(follower)
    try:
        # The footer is the end of a frame; a read can stop anywhere inside one.
        seen = _read_until(leader, b"Ctrl-C to quit", 30)
        if proc.poll() is not None:  # the terminal closed: top left, and says why on stderr
            assert proc.stderr is not None
            raise AssertionError(f"top exited {proc.returncode}: {proc.stderr.read()!r}")
        assert b"headless online: 0" in seen
        # Frames keep coming: the clock in the header moves on (it shows whole seconds).
        deadline = time.monotonic() + 15
        while len(set(re.findall(rb"\d\d:\d\d:\d\d\+00:00", seen))) < 2:
            assert time.monotonic() < deadline, f"no second frame: {seen[-2000:]!r}"
            seen += _drain(leader)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == 0
        assert proc.stderr is not None
        assert _ours(proc.stderr.read()) == b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
        os.close(leader)


def _drain(fd: int) -> bytes:
    out = b""
    while select.select([fd], [], [], 0.05)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out


def test_unreachable_coordinator_is_one_line_and_exit_5(tmp_path: Path) -> None:
    done = _offline_cli(tmp_path, "top", "--once", "--timeout", "3")
    assert done.returncode == 5 and done.stdout == ""
    assert done.stderr.startswith("deskfleet: cannot reach the coordinator at 127.0.0.1:1")
    assert len(done.stderr.splitlines()) == 1
