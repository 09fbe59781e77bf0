"""`deskfleet runs watch` when its coordinator goes away: it reconnects by itself and goes on
after the last event it printed (nothing twice, nothing skipped), saying so on stderr; a
coordinator that stays away past the window ends the watch with exit 5 and the command that
resumes it. Real coordinators, killed and restarted on the same store and port."""

from __future__ import annotations

import queue
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

from tests.harness import CoordinatorProcess, journal, wait_until, write_plan
from tests.harness.processes import BIN, base_env

EVENT = re.compile(r"^\s*(\d+)  ")


def _watch(coordinator: CoordinatorProcess, *args: str) -> subprocess.Popen[str]:
    env = base_env(coordinator.workdir) | {
        "DESKFLEET_COORDINATOR": coordinator.address,
        "DESKFLEET_TOKEN_FILE": str(coordinator.admin_token_file),
    }
    return subprocess.Popen(
        [str(BIN / "deskfleet"), "runs", "watch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _end(watch: subprocess.Popen[str]) -> None:
    if watch.poll() is None:
        watch.kill()
    watch.wait()
    for stream in (watch.stdout, watch.stderr):
        if stream is not None:
            stream.close()


def _lines(stream: IO[str]) -> queue.Queue[str]:
    found: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:
            found.put(line)

    threading.Thread(target=read, daemon=True).start()
    return found


def _seqs(lines: list[str]) -> list[int]:
    return [int(m.group(1)) for m in (EVENT.match(line) for line in lines) if m]


def _waiting_run(coordinator: CoordinatorProcess, tmp_path: Path) -> str:
    # Routed to a worker that does not exist: the run stays active, adding nothing.
    plan = write_plan(tmp_path / "p.json", [{"kind": "diag.echo", "route": {"worker": "none"}}])
    run_id: str = coordinator.cli_json("runs", "submit", str(plan))["id"]
    return run_id


def _take(found: queue.Queue[str], until: int, timeout: float) -> list[str]:
    """Lines up to the one of event `until`."""
    taken: list[str] = []
    deadline = time.monotonic() + timeout
    while not _seqs(taken) or _seqs(taken)[-1] < until:
        taken.append(found.get(timeout=max(0.1, deadline - time.monotonic())))
    return taken


def test_a_watch_rides_out_a_coordinator_restart_and_goes_on_where_it_was(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    run_id = _waiting_run(coordinator, tmp_path)
    before = journal(coordinator, run_id)[-1]["seq"]
    watch = _watch(coordinator, run_id)
    try:
        assert watch.stdout is not None and watch.stderr is not None
        out, err = _lines(watch.stdout), _lines(watch.stderr)
        printed = _take(out, before, 30)
        port = coordinator.port
        coordinator.kill()
        note = err.get(timeout=15)
        assert "reconnecting for up to 60 s" in note and f"after #{before}" in note, note
        time.sleep(2)  # a restart takes a while; the watch keeps trying meanwhile
        coordinator.start(port=port)
        coordinator.cli("runs", "cancel", run_id)
        assert watch.wait(30) == 0, list(err.queue)
        printed += list(out.queue)
        assert f"watching run {run_id} again, after #{before}" in err.get(timeout=5)
    finally:
        _end(watch)
    seqs = _seqs(printed)
    assert seqs == list(range(1, seqs[-1] + 1))  # nothing twice, nothing skipped
    assert seqs[-1] == journal(coordinator, run_id)[-1]["seq"] > before


def test_a_coordinator_that_stays_away_ends_the_watch_naming_the_command_that_resumes(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    run_id = _waiting_run(coordinator, tmp_path)
    before = journal(coordinator, run_id)[-1]["seq"]
    watch = _watch(coordinator, run_id, "--reconnect-for", "2")
    try:
        assert watch.stdout is not None
        out = _lines(watch.stdout)
        printed = _take(out, before, 30)
        port = coordinator.port
        coordinator.kill()
        code = watch.wait(30)
        assert watch.stderr is not None
        stderr = watch.stderr.read()
    finally:
        _end(watch)
    assert code == 5, stderr
    assert "Traceback" not in stderr
    notes = stderr.strip().splitlines()
    assert len(notes) == 2, stderr  # the note while reconnecting, then the one-line error
    assert "reconnecting for up to 2 s" in notes[0]
    last = _seqs(printed)[-1]
    assert last == before
    assert notes[1].startswith(f"deskfleet: cannot reach the coordinator at 127.0.0.1:{port}")
    resume = f"deskfleet runs watch {run_id} --after-seq {last}"
    assert notes[1].endswith(f"(for 2 s, watching run {run_id}); resume with: {resume}")
    # The command as printed goes on from there once the coordinator is back.
    coordinator.start(port=port)
    coordinator.cli("runs", "cancel", run_id)
    wait_until(lambda: journal(coordinator, run_id)[-1]["seq"] > last, 30, 0.2, "the cancel")
    again = coordinator.cli(*resume.split()[1:], "--no-follow")
    assert _seqs(again.stdout.splitlines()) == list(
        range(last + 1, journal(coordinator, run_id)[-1]["seq"] + 1)
    )
