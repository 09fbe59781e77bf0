"""One `deskfleet-worker run` per state directory: a second one exits at once, naming the first.

Two processes on one identity used to supersede each other's stream at the coordinator several
times a second, forever (30.18).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.harness import BIN, CoordinatorProcess, WorkerProcess, tail


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    return module_coordinator


def test_a_second_process_on_a_state_directory_exits_at_once_naming_the_first(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    first = WorkerProcess(coordinator, "locked", home=tmp_path, browser=False).start()
    second: subprocess.Popen[str] | None = None
    try:
        first.wait_online()
        assert first.proc is not None
        started = time.monotonic()
        second = subprocess.Popen(
            [BIN / "deskfleet-worker", "run", "--state-dir", first.state_dir, "--no-headless"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=first.env(),
        )
        try:
            out, err = second.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("the second worker process kept running on the same state directory")
        took = time.monotonic() - started
        assert second.returncode == 1 and out == ""
        lines = err.strip().splitlines()
        assert len(lines) == 1, err  # one line, no traceback
        assert lines[0].startswith(f"deskfleet-worker: the state directory {first.state_dir}")
        assert f"in use by process {first.proc.pid}" in lines[0]
        assert took < 15, took  # at once: it neither measured nor connected
        # The first one never lost its stream: still online on its one and only connect.
        after = first.row()
        assert after is not None and after["online"]
        assert first.proc.poll() is None
        log = tail(first.log, 200)
        assert log.count("connected to ") == 1 and "lost" not in log, log
    finally:
        if second is not None and second.poll() is None:
            second.kill()
            second.communicate()
        first.stop()
    # The lock goes with its process: the directory can be run again at once.
    again = WorkerProcess(coordinator, "locked", home=tmp_path, browser=False)
    again.worker_id = first.worker_id
    try:
        again.start().wait_online()
    finally:
        again.stop()
