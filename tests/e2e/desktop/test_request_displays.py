"""`desktop request --display N` of a connected desktop without display N is refused at request
time, naming the displays it has; the displays it has are asked for as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import CoordinatorProcess, WorkerProcess, Xvfb


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    return module_coordinator


def test_a_display_the_desktop_does_not_have_is_refused_at_request(
    coordinator: CoordinatorProcess, xvfb: Xvfb, tmp_path: Path
) -> None:
    worker = WorkerProcess(
        coordinator, "displays-desk", display_env=xvfb.env, home=tmp_path, browser=False
    )
    try:
        row = worker.start().wait_online(60)
        assert {c["name"]: c["available"] for c in row["capabilities"]}["computer_use"], row
        done = coordinator.cli(
            "desktop", "request", "--worker", "displays-desk", "--action", "screenshot",
            "--display", "2", "--reason", "a display it lacks", check=False,
        )  # fmt: skip
        assert (done.returncode, done.stdout) == (1, "")
        assert done.stderr == (
            f"deskfleet: worker displays-desk ({worker.worker_id}) has no display 2"
            " (it has 1: display 0)\n"
        )
        requested = coordinator.cli_json(
            "desktop", "request", "--worker", "displays-desk", "--action", "screenshot",
            "--display", "0", "--reason", "the display it has",
        )  # fmt: skip
        assert requested["status"] == "WAITING_FOR_AUTHORITY", requested
    finally:
        worker.stop()
