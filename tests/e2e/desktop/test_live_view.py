"""Live view, takeover and recording end to end: a real coordinator, a real worker on a real X
display, and a real xterm whose shell writes what is typed into it to a file.

What is checked is what the desktop did (the file the xterm's shell writes, the frames the
worker sent) and what the coordinator kept (the run's journal and state, its recorded frames,
the audit log); the page side (Chromium) is tests/e2e/console/.
"""

from __future__ import annotations

import io
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from PIL import Image

from shared.gen.deskfleet.v1 import desktop_pb2, desktop_pb2_grpc, runs_pb2, runs_pb2_grpc
from tests.harness import CoordinatorProcess, WorkerProcess, Xvfb, journal, wait_until
from tests.harness.desktop_goals import new_owner

pytestmark = pytest.mark.slow

XTERM_AT = (120, 90)  # inside the xterm's window (placed by its geometry; no window manager)


@pytest.fixture(scope="module")
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    return module_coordinator


@pytest.fixture(scope="module")
def typed(xvfb: Xvfb, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The file the xterm's shell writes each line typed into it to."""
    if shutil.which("xterm") is None:
        pytest.skip("xterm is not installed (scripts/setup.sh installs it)")
    out = tmp_path_factory.mktemp("xterm") / "typed.txt"
    out.write_text("")
    proc = subprocess.Popen(
        ["xterm", "-geometry", "60x12+0+0", "-e", "sh", "-c", f"stdbuf -oL cat >> {out}"],
        env=xvfb.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)
    assert proc.poll() is None, "xterm did not start"
    yield out
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def desk(
    module_workers: Any, xvfb: Xvfb, typed: Path, coordinator: CoordinatorProcess
) -> WorkerProcess:
    worker: WorkerProcess = module_workers(
        "live-desk", display_env=xvfb.env, extra_args=("--allow-owner-takeover",), browser=False
    )
    worker.wait_online()
    return worker


def _stubs(c: CoordinatorProcess) -> tuple[Any, Any]:
    channel = c.channel()
    assert channel is not None
    return desktop_pb2_grpc.DesktopServiceStub(channel), runs_pb2_grpc.RunServiceStub(channel)


def _md(c: CoordinatorProcess, token: Path | None = None) -> tuple[tuple[str, str], ...]:
    return c.admin_metadata(token)


def _held_run(c: CoordinatorProcess, worker: WorkerProcess, owner: Path) -> str:
    """A desktop run of `owner`'s, approved, holding the worker's desktop."""
    run = c.cli_json(
        "desktop",
        "request",
        "--worker",
        worker.worker_id,
        "--reason",
        "type into the terminal",
        "--action=type",
        "--action=key",
        "--action=screenshot",
        "--action=left_click",
        token_file=owner,
    )
    pending = c.cli_json("approvals", "list")["approvals"]
    [mine] = [a for a in pending if a["runId"] == run["id"]]
    c.cli_json("approvals", "approve", mine["id"])
    run_id: str = run["id"]
    return run_id


def _type_xdotool(xvfb: Xvfb, text: str) -> None:
    subprocess.run(
        ["xdotool", "mousemove", *map(str, XTERM_AT), "type", "--delay", "5", text],
        env=xvfb.env,
        check=True,
    )


def _frames(stub: Any, md: Any, **target: str) -> Any:
    return stub.WatchScreen(desktop_pb2.WatchScreenRequest(**target), metadata=md, timeout=60)


def _cancel_runs(c: CoordinatorProcess, owner: Path, *run_ids: str) -> None:
    _, runs = _stubs(c)
    for run_id in run_ids:
        runs.CancelRun(runs_pb2.RunRef(id=run_id), metadata=_md(c, owner), timeout=30)


def test_a_watcher_sees_typing_in_the_xterm_within_a_second_and_another_owner_cannot_look(
    coordinator: CoordinatorProcess, desk: WorkerProcess, xvfb: Xvfb, typed: Path
) -> None:
    stub, _ = _stubs(coordinator)
    ann = new_owner(coordinator, "ann-live")
    bob = new_owner(coordinator, "bob-live")
    run_id = _held_run(coordinator, desk, ann)
    try:
        stream = _frames(stub, _md(coordinator), worker=desk.worker_id)
        first = next(stream)
        assert first.seq == 1 and first.media_type == "image/jpeg"
        with Image.open(io.BytesIO(first.data)) as image:
            assert image.size == (first.width, first.height)
        typed_at = time.monotonic()
        _type_xdotool(xvfb, "watched")
        changed = next(f for f in stream if f.seq)  # keepalives (seq 0) are not frames
        seen_after = time.monotonic() - typed_at
        stream.cancel()
        assert changed.seq == 2 and changed.data != first.data
        assert seen_after < 1.0, f"the change was seen {seen_after:.2f} s after the typing"

        # The owner watches through her run; another owner neither through it nor directly.
        mine = _frames(stub, _md(coordinator, ann), run=run_id)
        assert next(mine).seq >= 1
        mine.cancel()
        for target, code in (
            ({"run": run_id}, grpc.StatusCode.NOT_FOUND),
            ({"worker": desk.worker_id}, grpc.StatusCode.PERMISSION_DENIED),
        ):
            with pytest.raises(grpc.RpcError) as refused:
                next(_frames(stub, _md(coordinator, bob), **target))
            assert refused.value.code() == code, target
        audit = coordinator.cli_json("audit")
        watched = [e for e in audit["entries"] if e["action"].startswith("desktop.watch")]
        assert {e["action"] for e in watched} >= {"desktop.watch", "desktop.watch.end"}
        ended = [e for e in watched if e["action"] == "desktop.watch.end"]
        assert all("started_at" in e["detail"] and "ended_at" in e["detail"] for e in ended)
    finally:
        _cancel_runs(coordinator, ann, run_id)


def test_take_over_pauses_the_run_types_into_the_xterm_hands_back_and_a_kill_cuts_it(
    coordinator: CoordinatorProcess, desk: WorkerProcess, xvfb: Xvfb, typed: Path
) -> None:
    stub, runs = _stubs(coordinator)
    ann = new_owner(coordinator, "ann-takeover")
    run_id = _held_run(coordinator, desk, ann)
    try:
        took = coordinator.cli_json(
            "desktop", "takeover", run_id, "--no-url", "--reason", "fix it", token_file=ann
        )
        assert took["status"] == "active" and took["runId"] == run_id
        run = runs.GetRun(runs_pb2.RunRef(id=run_id), metadata=_md(coordinator, ann), timeout=30)
        assert run.waiting.code == "human_active", run
        # The agent is held off, and `desktop continue` cannot end a takeover.
        done = coordinator.cli(
            "desktop",
            "act",
            run_id,
            "type",
            "--text",
            "agent",
            json_out=True,
            check=False,
            token_file=ann,
        )
        assert done.returncode != 0 and "human_active" in done.stdout + done.stderr
        cont = coordinator.cli("desktop", "continue", run_id, check=False, token_file=ann)
        assert cont.returncode != 0 and "hand" in cont.stderr

        events = [
            desktop_pb2.HumanEvent(kind="click", x=XTERM_AT[0], y=XTERM_AT[1], button="left"),
            desktop_pb2.HumanEvent(kind="type", text="by a person"),
            desktop_pb2.HumanEvent(kind="key", key="Return"),
        ]
        sent = stub.SendInput(
            desktop_pb2.SendInputRequest(takeover=took["id"], events=events),
            metadata=_md(coordinator, ann),
            timeout=30,
        )
        assert sent.applied == 3
        wait_until(lambda: "by a person" in typed.read_text(), 10, 0.1, "the person's line")

        # Only the person who took over sends input, the admin included.
        with pytest.raises(grpc.RpcError) as other:
            stub.SendInput(
                desktop_pb2.SendInputRequest(takeover=took["id"], events=events[1:]),
                metadata=_md(coordinator),
                timeout=30,
            )
        assert other.value.code() == grpc.StatusCode.PERMISSION_DENIED

        back = coordinator.cli_json(
            "desktop", "handback", took["id"], "--note", "typed one line", token_file=ann
        )
        assert back["status"] == "handed_back" and back["events"] == 3
        run = runs.GetRun(runs_pb2.RunRef(id=run_id), metadata=_md(coordinator, ann), timeout=30)
        assert run.status == "RUNNING" and not run.waiting.code
        kinds = [e["kind"] for e in journal(coordinator, run_id, token_file=ann)]
        assert kinds.index("desktop.takeover") < kinds.index("desktop.handback")
        note = next(
            e
            for e in journal(coordinator, run_id, token_file=ann)
            if e["kind"] == "desktop.handback"
        )
        assert note["data"]["events"] == 3 and note["data"]["note"] == "typed one line"
        # The agent goes on, and the person's pointer moves are not taken for a person at
        # the desk.
        done = coordinator.cli(
            "desktop",
            "act",
            run_id,
            "type",
            "--text",
            "agent again\n",
            json_out=True,
            check=False,
            token_file=ann,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        wait_until(lambda: "agent again" in typed.read_text(), 10, 0.1, "the agent's line")

        # Taken over again, then the kill switch: the person's input stops too.
        again = coordinator.cli_json("desktop", "takeover", run_id, "--no-url", token_file=ann)
        coordinator.cli_json("kill", "engage", "--worker", desk.worker_id, "--reason", "stop")
        before = typed.read_text()
        with pytest.raises(grpc.RpcError) as cut:
            stub.SendInput(
                desktop_pb2.SendInputRequest(
                    takeover=again["id"],
                    events=[desktop_pb2.HumanEvent(kind="type", text="after the kill\n")],
                ),
                metadata=_md(coordinator, ann),
                timeout=30,
            )
        assert cut.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "kill switch" in (cut.value.details() or "")
        time.sleep(0.5)
        assert typed.read_text() == before
        coordinator.cli_json("kill", "release", "--worker", desk.worker_id)
        coordinator.cli_json("desktop", "handback", again["id"], token_file=ann)
    finally:
        _cancel_runs(coordinator, ann, run_id)


def test_a_desktop_run_is_recorded_with_who_held_the_controls(
    coordinator: CoordinatorProcess, desk: WorkerProcess, xvfb: Xvfb, typed: Path
) -> None:
    ann = new_owner(coordinator, "ann-recorded")
    run_id = _held_run(coordinator, desk, ann)
    try:
        db = Path(coordinator.db_url.removeprefix("sqlite:///"))

        def frames() -> list[tuple[int, str, int]]:
            with sqlite3.connect(db) as con:
                return con.execute(
                    "SELECT seq, held_by, size FROM recording_frames WHERE run_id = ? ORDER BY seq",
                    (run_id,),
                ).fetchall()

        wait_until(lambda: frames(), 15, 0.2, "a first recorded frame")
        _type_xdotool(xvfb, "recorded")
        wait_until(lambda: len(frames()) >= 2, 15, 0.2, "a frame of the change")
        took = coordinator.cli_json("desktop", "takeover", run_id, "--no-url", token_file=ann)
        _type_xdotool(xvfb, "held")
        wait_until(lambda: any(h == "person" for _, h, _ in frames()), 15, 0.2, "a person's frame")
        coordinator.cli_json("desktop", "handback", took["id"], token_file=ann)
        rows = frames()
        assert [seq for seq, _, _ in rows] == list(range(1, len(rows) + 1))
        assert {h for _, h, _ in rows} == {"agent", "person"}
        usage = coordinator.cli_json("users", "limits", "ann-recorded")
        assert int(usage.get("storedBytes", 0)) >= sum(size for _, _, size in rows)
        # A still screen records nothing more.
        time.sleep(1.5)
        still = len(frames())
        time.sleep(2.0)
        assert len(frames()) == still
    finally:
        _cancel_runs(coordinator, ann, run_id)
