"""A worker measures only what its enrollment token granted: with a computer_use-only token it
launches no Chromium (it logged `headless: yes` and launched one to measure it), logs headless
as not offered, and doctor names the worker by its enrolled name, the hostname as the host."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require
from tests.harness import BIN, CoordinatorProcess, WorkerProcess, Xvfb, wait_until
from worker_agent.capabilities import DEFAULT_CHROMIUM

NOT_LAUNCHED = "not granted by the enrollment token (Chromium is installed, not launched)"


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    return module_coordinator


def _descendants(pid: int) -> set[str]:
    """The command lines of the processes below `pid` now (from /proc)."""
    parents: dict[int, int] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[str] = set()
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in parents.items():
            if ppid == parent:
                try:
                    found.add(
                        Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                    )
                except OSError:
                    continue
                frontier.append(child)
    return found


def _capabilities(row: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in row["capabilities"]}


def test_a_computer_use_only_worker_launches_no_chromium_and_logs_headless_not_offered(
    coordinator: CoordinatorProcess, xvfb: Xvfb, tmp_path: Path
) -> None:
    require(os.path.exists(DEFAULT_CHROMIUM), f"no Chromium at {DEFAULT_CHROMIUM}")
    worker = WorkerProcess(coordinator, "grant-desk", display_env=xvfb.env, home=tmp_path)
    token = coordinator.create_token("--capability", "computer_use")
    assert worker.enroll(token).returncode == 0
    seen: set[str] = set()
    try:
        worker.start()
        assert worker.proc is not None
        pid = worker.proc.pid

        def online() -> dict[str, Any] | None:
            seen.update(_descendants(pid))
            row = worker.row()
            return row if row and row["online"] else None

        row = wait_until(online, 60, 0.02, "the worker online")
        connected = wait_until(
            lambda: [
                line for line in worker.log.read_text().splitlines() if "connected to" in line
            ],
            10,
            what="the connected line",
        )
        seen.update(_descendants(pid))
    finally:
        worker.stop()
    assert not [c for c in seen if "chrom" in c.lower()], seen
    assert f"headless: no ({NOT_LAUNCHED})" in connected[0], connected
    assert "computer_use: yes" in connected[0], connected
    caps = _capabilities(row)
    assert caps["headless"] == {"name": "headless", "available": False, "reason": NOT_LAUNCHED}
    assert caps["computer_use"]["available"] is True

    done = subprocess.run(
        [str(BIN / "deskfleet-worker"), "doctor", "--state-dir", str(worker.state_dir)],
        capture_output=True,
        text=True,
        env=worker.env(),
        timeout=60,
    )
    first = done.stdout.splitlines()[0]
    assert first == (
        f"deskfleet-worker doctor: worker grant-desk ({worker.worker_id}) on host"
        f" {platform.node()}, state {worker.state_dir}"
    )
    browser = next(line for line in done.stdout.splitlines() if line.startswith("browser"))
    assert "the enrollment token did not grant headless" in browser


def test_a_headless_only_worker_does_not_offer_computer_use(
    coordinator: CoordinatorProcess, xvfb: Xvfb, tmp_path: Path
) -> None:
    worker = WorkerProcess(
        coordinator, "grant-headless", display_env=xvfb.env, home=tmp_path, browser=False
    )
    assert worker.enroll(coordinator.create_token("--capability", "headless")).returncode == 0
    try:
        row = worker.start().wait_online(60)
        connected = wait_until(
            lambda: [
                line for line in worker.log.read_text().splitlines() if "connected to" in line
            ],
            10,
            what="the connected line",
        )
    finally:
        worker.stop()
    assert "computer_use: no (not granted by the enrollment token)" in connected[0], connected
    assert _capabilities(row)["computer_use"] == {
        "name": "computer_use",
        "available": False,
        "reason": "not granted by the enrollment token",
    }
