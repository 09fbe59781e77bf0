"""Desktop control end to end: a real coordinator, a real worker on a real X display (Xvfb), a
real Chromium window showing a form whose server records what arrives.

Approval, scope, kill switch and presence rules are checked by their effects on that window:
what the page received, and the pixels of screenshots.
"""

from __future__ import annotations

import io
import json
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from coordinator.heart.context import ACTIVE
from shared.gen.deskfleet.v1 import desktop_pb2, desktop_pb2_grpc, runs_pb2, runs_pb2_grpc
from tests.harness import (
    BIN,
    CoordinatorProcess,
    WorkerProcess,
    Xvfb,
    journal,
    wait_until,
)
from tests.harness.sites import FIELD, MARKER, DesktopSite

pytestmark = pytest.mark.slow

SENTENCE = "Grüße, Zoë! 3 \u00d7 4 = 12; naïve café \u2014 ok?"
EXIT_NOT_DONE = 7
ALL_ACTIONS = ("screenshot", "left_click", "type", "key", "mouse_move", "cursor_position")


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    """One coordinator for the module: each test makes its own desktop runs and approvals and
    ends them afterwards (`desk`); the test that cuts the coordinator off has its own."""
    return module_coordinator


@pytest.fixture(scope="module")
def shared_desk(module_workers: Callable[..., WorkerProcess], xvfb: Xvfb) -> WorkerProcess:
    """The module's desk: one worker on the display, started once (a worker start is the
    larger part of a desktop test's cost on two cores)."""
    worker = module_workers("desk", display_env=xvfb.env)
    row = worker.wait_online()
    caps = {c["name"]: c for c in row["capabilities"]}
    assert caps["computer_use"]["available"], caps["computer_use"]
    return worker


@pytest.fixture
def desk(
    coordinator: CoordinatorProcess,
    shared_desk: WorkerProcess,
    window: Callable[[], None],
    desktop_site: DesktopSite,
    request: pytest.FixtureRequest,
) -> Iterator[WorkerProcess]:
    """The shared desk, handed to the test as the next test must find it: no desktop run of
    an earlier test holding its input lease, no kill switch engaged (the coordinator's or the
    local one), and no pause for a person at the desk (after a failed test, a new worker
    process: what it keeps in memory, a pause or where its last input left the pointer, goes
    with the old one)."""
    window()
    desktop_site.reset()
    failed_before = request.session.testsfailed
    yield shared_desk
    _leave_the_desk_as_found(
        coordinator, shared_desk, restart=request.session.testsfailed > failed_before
    )


def _leave_the_desk_as_found(
    coordinator: CoordinatorProcess, desk: WorkerProcess, *, restart: bool
) -> None:
    # In-process calls: a CLI process per call would cost each test seconds on two cores.
    channel = coordinator.channel()
    assert channel is not None
    md = coordinator.admin_metadata()
    runs = runs_pb2_grpc.RunServiceStub(channel)
    listed = runs.ListRuns(
        runs_pb2.ListRunsRequest(kind="desktop", owner="*", limit=1000), metadata=md, timeout=30
    )
    for run in listed.runs:
        if run.status in ACTIVE:  # its input lease ends with it
            runs.CancelRun(runs_pb2.RunRef(id=run.id), metadata=md, timeout=30)
    kills = desktop_pb2_grpc.KillSwitchServiceStub(channel)
    for switch in kills.Status(desktop_pb2.KillStatusRequest(), metadata=md, timeout=30).switches:
        release = desktop_pb2.ReleaseKillRequest(id=switch.id, reason="test over")
        kills.Release(release, metadata=md, timeout=30)
    if (desk.state_dir / "KILL").exists():
        subprocess.run(
            [str(BIN / "deskfleet-worker"), "kill", "release", "--state-dir", str(desk.state_dir)],
            capture_output=True,
            check=True,
        )
    if restart or desk.proc is None or desk.proc.poll() is not None:
        desk.stop()
        desk.start().wait_online()


def request(coordinator: CoordinatorProcess, worker: WorkerProcess, *extra: str) -> dict[str, Any]:
    actions = [] if "--action" in extra else [f"--action={a}" for a in ALL_ACTIONS]
    doc: dict[str, Any] = coordinator.cli_json(
        "desktop",
        "request",
        "--worker",
        worker.worker_id,
        "--reason",
        "fill in the form",
        *actions,
        *extra,
    )
    return doc


def approve(coordinator: CoordinatorProcess, run_id: str, *narrowing: str) -> dict[str, Any]:
    pending = coordinator.cli_json("approvals", "list")["approvals"]
    [mine] = [a for a in pending if a["runId"] == run_id]
    doc: dict[str, Any] = coordinator.cli_json("approvals", "approve", mine["id"], *narrowing)
    return doc


def act(
    coordinator: CoordinatorProcess, run_id: str, action: str, *args: str
) -> tuple[int, dict[str, Any], str]:
    done = coordinator.cli(
        "desktop", "act", run_id, action, *args, json_out=True, check=False, timeout=90
    )
    doc = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, doc, done.stderr


def ok(coordinator: CoordinatorProcess, run_id: str, action: str, *args: str) -> dict[str, Any]:
    code, doc, err = act(coordinator, run_id, action, *args)
    assert code == 0, f"{action}: {doc.get('error') or err}"
    return doc


def refused(
    coordinator: CoordinatorProcess, run_id: str, action: str, *args: str
) -> dict[str, Any]:
    code, doc, err = act(coordinator, run_id, action, *args)
    assert code == EXIT_NOT_DONE and doc["status"] == "refused", (code, doc, err)
    return doc


def center(box: tuple[int, int, int, int], scale: float = 1.0) -> tuple[str, str]:
    x, y, w, h = box
    return str(int((x + w // 2) * scale)), str(int((y + h // 2) * scale))


def click_field(coordinator: CoordinatorProcess, run_id: str) -> None:
    # In the 1024x640 space an agent may see: 0.8 of the real 1280x800 screen.
    x, y = center(FIELD, 0.8)
    ok(coordinator, run_id, "left_click", "--x", x, "--y", y, "--space", "1024x640")
    ok(coordinator, run_id, "key", "--key", "ctrl+a")  # whatever an earlier test left there
    ok(coordinator, run_id, "key", "--key", "BackSpace")


def clicked(site: DesktopSite, count: int) -> list[dict]:
    """The clicks the page has reported, once there are `count`: a click's receipt means the
    input was sent, and the page posts the event to the site a moment later."""
    found: list[dict] = wait_until(
        lambda: len(c := [e for e in site.snapshot()[1] if e["type"] == "click"]) >= count and c,
        15,
        0.05,
        f"{count} clicks on the page",
    )
    return found


def submitted(site: DesktopSite, count: int) -> list[str]:
    return wait_until(
        lambda: (s := site.snapshot()[0]) and len(s) >= count and s, 15, 0.1, "form submit"
    )


def test_approved_control_sees_the_form_and_types_into_it(
    coordinator: CoordinatorProcess, desk: WorkerProcess, desktop_site: DesktopSite, tmp_path: Path
) -> None:
    run = request(coordinator, desk)
    assert run["status"] == "WAITING_FOR_AUTHORITY" and run["waiting"]["code"] == "needs_approval"
    # Silence is not consent: nothing runs before an answer.
    doc = refused(coordinator, run["id"], "screenshot")
    assert doc["code"] == "not_approved"

    granted = approve(coordinator, run["id"])
    assert granted["status"] == "approved"
    out = tmp_path / "shot.png"
    doc = ok(coordinator, run["id"], "screenshot", "--out", str(out))
    image = Image.open(io.BytesIO(out.read_bytes()))
    assert stat.S_IMODE(out.stat().st_mode) == 0o600  # a screen is its user's alone (30.16)
    assert image.size == (1280, 800)
    assert image.convert("RGB").getpixel(tuple(map(int, center(MARKER)))) == (255, 0, 0)
    [art] = doc["artifacts"]
    assert art["width"] == 1280 and art["mediaType"] == "image/png"

    click_field(coordinator, run["id"])
    typed = ok(coordinator, run["id"], "type", "--text", SENTENCE)
    assert typed["status"] == "succeeded"
    ok(coordinator, run["id"], "key", "--key", "Return")
    assert submitted(desktop_site, 1) == [SENTENCE]

    shown = coordinator.cli_json("runs", "show", run["id"])
    kinds = [a["kind"] for a in shown["actions"]]
    assert kinds == [
        "desktop.screenshot",
        "desktop.screenshot",
        "desktop.left_click",
        "desktop.key",
        "desktop.key",
        "desktop.type",
        "desktop.key",
    ]
    assert shown["actions"][0]["error"].startswith("not_approved")
    assert all(a["receiptId"] for a in shown["actions"])
    saved = coordinator.cli_json("runs", "show", run["id"], "--artifacts-dir", str(tmp_path / "a"))
    [ref] = saved["actions"][1]["artifacts"]
    assert ref["sha256"] == art["sha256"] and ref["role"] == "screenshot"
    assert Path(ref["path"]).read_bytes() == out.read_bytes()
    assert stat.S_IMODE(Path(ref["path"]).stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
    assert coordinator.cli_json("journal", "verify", run["id"])["ok"]


def test_refusals_name_their_reason_and_leave_a_receipt(
    coordinator: CoordinatorProcess, desk: WorkerProcess, desktop_site: DesktopSite
) -> None:
    # Denied: answered is not approved; the run is over.
    run = request(coordinator, desk)
    pending = coordinator.cli_json("approvals", "list")["approvals"]
    [mine] = [a for a in pending if a["runId"] == run["id"]]
    coordinator.cli("approvals", "deny", mine["id"], "--reason", "not now")
    code, _, err = act(coordinator, run["id"], "screenshot")
    assert code != 0 and "approval_denied" in err

    # Narrowed to screenshots in a region, two actions at most.
    run = request(coordinator, desk, "--max-actions", "5")
    approve(
        coordinator,
        run["id"],
        "--action",
        "screenshot",
        "--action",
        "left_click",
        "--region",
        "400x300+500+50",
        "--max-actions",
        "3",
    )
    assert refused(coordinator, run["id"], "type", "--text", "x")["code"] == "out_of_scope"
    x, y = center(FIELD)
    assert refused(coordinator, run["id"], "left_click", "--x", x, "--y", y)["code"] == (
        "outside_region"
    )
    mx, my = center(MARKER)
    ok(coordinator, run["id"], "left_click", "--x", mx, "--y", my)
    ok(coordinator, run["id"], "screenshot")
    ok(coordinator, run["id"], "screenshot")
    assert refused(coordinator, run["id"], "screenshot")["code"] == "max_actions"
    # Every act, refused or done, is the run's next action, numbered in order.
    shown = coordinator.cli_json("runs", "show", run["id"])
    assert [a["index"] for a in shown["actions"]] == list(range(6))
    # Only the one click inside the region reached the page.
    clicks = clicked(desktop_site, 1)
    assert [(c["x"], c["y"]) for c in clicks] == [(int(mx), int(my))]

    # Expired: the approval's time ends the run.
    run = request(coordinator, desk)
    approve(coordinator, run["id"], "--ttl", "1s")
    time.sleep(1.2)
    # Refused at the act, or already ended by the sweep: either way nothing runs, and says so.
    code, doc, err = act(coordinator, run["id"], "screenshot")
    assert code != 0 and (doc.get("code") == "expired" or "scope_expired" in err), (doc, err)
    assert coordinator.cli_json("runs", "show", run["id"])["stopReason"].startswith("scope_expired")
    # Approvals only narrow.
    run = request(coordinator, desk, "--action", "screenshot")
    pending = coordinator.cli_json("approvals", "list")["approvals"]
    [mine] = [a for a in pending if a["runId"] == run["id"]]
    done = coordinator.cli("approvals", "approve", mine["id"], "--action", "type", check=False)
    assert done.returncode == 2 and "only narrows" in done.stderr


def test_typing_a_newline_or_tab_needs_key_approved(
    coordinator: CoordinatorProcess, desk: WorkerProcess, desktop_site: DesktopSite
) -> None:
    # One controller at a time: each run ends before the next one acts.
    first = request(coordinator, desk)
    approve(coordinator, first["id"])
    click_field(coordinator, first["id"])  # focus, and an empty field
    coordinator.cli("runs", "cancel", first["id"])

    narrow = request(coordinator, desk, "--action", "type", "--action", "screenshot")
    approve(coordinator, narrow["id"])
    for text in ("ls\nexit\t", "a\tb", "x\r"):
        doc = refused(coordinator, narrow["id"], "type", "--text", text)
        assert doc["code"] == "out_of_scope" and "needs key" in doc["error"], doc
    ok(coordinator, narrow["id"], "type", "--text", "ls")
    time.sleep(0.5)
    assert desktop_site.snapshot()[0] == []  # no Return was pressed: nothing submitted
    coordinator.cli("runs", "cancel", narrow["id"])

    last = request(coordinator, desk)
    approve(coordinator, last["id"])
    ok(coordinator, last["id"], "key", "--key", "Return")
    assert submitted(desktop_site, 1) == ["ls"]  # and no Tab took the focus away
    coordinator.cli("runs", "cancel", last["id"])


def test_a_secret_is_typed_but_never_journaled(
    coordinator: CoordinatorProcess, desk: WorkerProcess, desktop_site: DesktopSite
) -> None:
    value = "hunter2-Ü"
    done = coordinator.cli("secrets", "set", "PIN", input_text=value + "\n")
    assert done.returncode == 0, done.stderr
    run = request(coordinator, desk)
    approve(coordinator, run["id"])
    click_field(coordinator, run["id"])
    typed = ok(coordinator, run["id"], "type", "--text", "pin {{secret:PIN}}!")
    assert value not in json.dumps(typed, ensure_ascii=False)
    ok(coordinator, run["id"], "key", "--key", "Return")
    assert submitted(desktop_site, 1) == [f"pin {value}!"]
    history = json.dumps(journal(coordinator, run["id"]), ensure_ascii=False)
    assert "{{secret:PIN}}" in history and value not in history
    assert refused(coordinator, run["id"], "type", "--text", "{{secret:NOPE}}")["code"] == (
        "unknown_secret"
    )


LONG = "abcdefghij" * 60


def _type_in_background(
    coordinator: CoordinatorProcess, run_id: str
) -> tuple[threading.Thread, list[tuple[int, dict[str, Any], str]]]:
    out: list[tuple[int, dict[str, Any], str]] = []
    thread = threading.Thread(
        target=lambda: out.append(
            act(coordinator, run_id, "type", "--text", LONG, "--args", '{"interval": 0.01}')
        ),
        daemon=True,
    )
    thread.start()
    return thread, out


def _wait_typing(coordinator: CoordinatorProcess, run_id: str) -> None:
    def started() -> bool:
        actions = coordinator.cli_json("runs", "show", run_id)["actions"]
        return any(a["kind"] == "desktop.type" and a["status"] == "STARTED" for a in actions)

    wait_until(started, 15, 0.05, "typing to start")
    time.sleep(0.3)


def test_the_kill_switch_stops_typing_and_holds_until_released_and_reapproved(
    coordinator: CoordinatorProcess, desk: WorkerProcess, desktop_site: DesktopSite
) -> None:
    run = request(coordinator, desk)
    approve(coordinator, run["id"])
    click_field(coordinator, run["id"])
    thread, out = _type_in_background(coordinator, run["id"])
    _wait_typing(coordinator, run["id"])
    kill = coordinator.cli_json("kill", "engage", "--worker", desk.worker_id, "--reason", "test")
    thread.join(60)
    [(code, doc, _)] = out
    assert code == EXIT_NOT_DONE and "kill switch" in doc["error"], doc
    status = wait_until(
        lambda: (
            (k := coordinator.cli_json("kill", "status")["switches"]) and k[0]["acknowledged"] and k
        ),
        10,
        0.1,
        "the worker's acknowledgement",
    )
    assert status[0]["acknowledged"] == [desk.worker_id] and not status[0]["unacknowledged"]
    # While engaged, nothing starts; the run waits for authority.
    assert refused(coordinator, run["id"], "key", "--key", "Return")["code"] == "kill_switch"
    shown = coordinator.cli_json("runs", "show", run["id"])
    assert shown["waiting"]["code"] == "kill_switch"
    coordinator.cli("kill", "release", "--id", kill["id"], "--reason", "done")
    # Released is not re-approved.
    assert refused(coordinator, run["id"], "key", "--key", "Return")["code"] == "not_approved"
    approve(coordinator, run["id"])
    ok(coordinator, run["id"], "key", "--key", "Return")
    [text] = submitted(desktop_site, 1)
    assert LONG.startswith(text) and 0 < len(text) < len(LONG), len(text)
    # Stopped within one chunk of the kill: what reached the page is what the worker reported.
    typed = json.loads(json.dumps(doc))
    assert f"{len(text)} of {len(LONG)}" in typed["error"] or str(len(text)) in typed["error"]
    kinds = [e["kind"] for e in journal(coordinator, run["id"])]
    assert "kill.engaged" in kinds and "kill.released" in kinds


def test_reapproval_after_a_kill_switch_asks_for_the_narrowed_grant_not_the_request(
    coordinator: CoordinatorProcess, desk: WorkerProcess
) -> None:
    run = request(coordinator, desk, "--max-actions", "40", "--ttl", "20m")
    narrowing = ("--action", "screenshot", "--action", "cursor_position", "--region")
    granted = approve(coordinator, run["id"], *narrowing, "600x400+0+0", "--max-actions", "5")
    assert granted["granted"]["actions"] == ["screenshot", "cursor_position"]
    ok(coordinator, run["id"], "cursor_position")
    coordinator.cli("kill", "engage", "--worker", desk.worker_id, "--reason", "look again")
    coordinator.cli("kill", "release", "--worker", desk.worker_id, "--reason", "done")
    pending = coordinator.cli_json("approvals", "list")["approvals"]
    [again] = [a for a in pending if a["runId"] == run["id"]]
    assert again["id"] != granted["id"]
    # The re-ask carries the last grant (its size, not what was left of it), not the request.
    assert again["requested"] == granted["granted"], again
    detail = coordinator.cli_json("runs", "show", run["id"])["waiting"]["detail"]
    assert "actions screenshot,cursor_position on display 0 in region 600x400+0+0" in detail
    # Wider flags are refused, naming what was granted, and change nothing.
    for wider, message in (
        (("--action", "key"), "scope.actions: key was not previously granted"),
        (
            ("--region", "800x600+0+0"),
            "scope.region: 800x600+0+0 is not inside the previously granted 600x400+0+0",
        ),
        (("--max-actions", "6"), "scope.max_actions: at most the previously granted 5"),
        (("--ttl", "30m"), "scope.ttl: between 0 and 1200 seconds"),
    ):
        done = coordinator.cli("approvals", "approve", again["id"], *wider, check=False)
        assert done.returncode == 2, (wider, done.stderr)
        assert done.stderr.startswith(f"deskfleet: {message}"), (wider, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1
    # (Of this run's: the coordinator is shared with the module's other tests.)
    pending = coordinator.cli_json("approvals", "list")["approvals"]
    assert [a["id"] for a in pending if a["runId"] == run["id"]] == [again["id"]]
    # A plain approve grants the narrowed scope again, and only it.
    plain = coordinator.cli_json("approvals", "approve", again["id"])
    assert plain["granted"] == granted["granted"]
    assert refused(coordinator, run["id"], "key", "--key", "Return")["code"] == "out_of_scope"
    x, y = center(FIELD)
    assert refused(coordinator, run["id"], "left_click", "--x", x, "--y", y)["code"] == (
        "out_of_scope"
    )
    ok(coordinator, run["id"], "screenshot")


@pytest.fixture
def pointer_kept(xvfb: Xvfb) -> Iterator[None]:
    """Puts the pointer back where the test found it: the shared desk takes a pointer that is
    not where its last input left it for a person at the desk."""
    done = subprocess.run(
        ["xdotool", "getmouselocation", "--shell"],
        env=xvfb.env,
        capture_output=True,
        text=True,
        check=True,
    )
    where = dict(line.split("=", 1) for line in done.stdout.split())
    yield
    subprocess.run(["xdotool", "mousemove", where["X"], where["Y"]], env=xvfb.env, check=True)


# Its own coordinator (it kills and restarts it) and so its own worker on the display.
def test_a_worker_cut_off_from_its_coordinator_stops_input(
    own_coordinator: CoordinatorProcess,
    xvfb: Xvfb,
    window: Callable[[], None],
    desktop_site: DesktopSite,
    pointer_kept: None,
) -> None:
    coordinator = own_coordinator
    window()
    desktop_site.reset()
    desk = WorkerProcess(
        coordinator, "desk", display_env=xvfb.env, home=own_coordinator.workdir / "workers"
    )
    try:
        row = desk.start().wait_online()
        assert {c["name"]: c for c in row["capabilities"]}["computer_use"]["available"]
        run = request(coordinator, desk)
        approve(coordinator, run["id"])
        click_field(coordinator, run["id"])
        thread, _ = _type_in_background(coordinator, run["id"])
        _wait_typing(coordinator, run["id"])
        coordinator.kill()
        thread.join(60)
        time.sleep(1.0)
        typed_after_cut = desktop_site.snapshot()
        coordinator.start(port=int(coordinator.address.rsplit(":", 1)[1]))
        desk.wait_online(60)
        # The worker came back on a new session: the old approval no longer holds.
        assert refused(coordinator, run["id"], "key", "--key", "Return")["code"] == (
            "reapproval_needed"
        )
        approve(coordinator, run["id"])
        ok(coordinator, run["id"], "key", "--key", "Return")
        [text] = submitted(desktop_site, 1)
        assert LONG.startswith(text) and 0 < len(text) < len(LONG), len(text)
        assert typed_after_cut[0] == []
    finally:
        desk.stop()


def test_a_person_at_the_desk_pauses_input_until_told_to_continue(
    coordinator: CoordinatorProcess, desk: WorkerProcess, xvfb: Xvfb, desktop_site: DesktopSite
) -> None:
    run = request(coordinator, desk)
    approve(coordinator, run["id"])
    mx, my = center(MARKER)
    ok(coordinator, run["id"], "left_click", "--x", mx, "--y", my)
    subprocess.run(["xdotool", "mousemove", "30", "700"], env=xvfb.env, check=True)
    doc = refused(coordinator, run["id"], "left_click", "--x", mx, "--y", my)
    assert doc["code"] == "human_active"
    shown = coordinator.cli_json("runs", "show", run["id"])
    assert shown["waiting"]["code"] == "human_active"
    assert refused(coordinator, run["id"], "left_click", "--x", mx, "--y", my)["code"] == (
        "human_active"
    )
    coordinator.cli("desktop", "continue", run["id"])
    ok(coordinator, run["id"], "left_click", "--x", mx, "--y", my)
    clicks = clicked(desktop_site, 2)
    assert len(clicks) == 2


def test_one_controller_at_a_time(coordinator: CoordinatorProcess, desk: WorkerProcess) -> None:
    first = request(coordinator, desk)
    approve(coordinator, first["id"])
    ok(coordinator, first["id"], "screenshot")
    second = request(coordinator, desk)
    approve(coordinator, second["id"])
    shown = coordinator.cli_json("runs", "show", second["id"])
    assert shown["status"] == "WAITING_FOR_ENVIRONMENT"
    assert (
        shown["waiting"]["code"] == "input_lease_held" and first["id"] in shown["waiting"]["detail"]
    )
    assert refused(coordinator, second["id"], "screenshot")["code"] == "input_lease_held"
    coordinator.cli("runs", "cancel", first["id"])
    ok(coordinator, second["id"], "screenshot")


def _shows_local(coordinator: CoordinatorProcess, desk: WorkerProcess, means: str) -> bool:
    """Whether `kill status` comes to show the desk's own switch, engaged by `means`."""

    def shown() -> bool:
        local = coordinator.cli_json("kill", "status")["local"]
        return [k["state"]["means"] for k in local if k["workerId"] == desk.worker_id] == [means]

    return bool(wait_until(shown, 10, 0.1, f"kill status showing the desk's own switch ({means})"))


def test_the_local_kill_switch_stops_input_from_the_desk(
    coordinator: CoordinatorProcess, desk: WorkerProcess, xvfb: Xvfb
) -> None:
    run = request(coordinator, desk)
    approve(coordinator, run["id"])
    mx, my = center(MARKER)
    ok(coordinator, run["id"], "left_click", "--x", mx, "--y", my)
    # The person at the desk presses the hotkey: a KILL file appears in the state directory.
    subprocess.run(["xdotool", "key", "ctrl+alt+shift+k"], env=xvfb.env, check=True)
    kill_file = desk.state_dir / "KILL"
    wait_until(kill_file.exists, 10, 0.05, "the local kill switch")
    doc = refused(coordinator, run["id"], "left_click", "--x", mx, "--y", my)
    assert doc["code"] == "kill_switch" and "local kill switch" in doc["error"]
    # Admins see it, and how it was engaged (30.19).
    assert _shows_local(coordinator, desk, "hotkey")
    ok(coordinator, run["id"], "screenshot")  # looking is not input
    released = subprocess.run(
        [str(BIN / "deskfleet-worker"), "kill", "release", "--state-dir", str(desk.state_dir)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "released" in released.stdout and not kill_file.exists()
    ok(coordinator, run["id"], "left_click", "--x", mx, "--y", my)
    # SIGUSR1 engages it too.
    desk.signal(signal.SIGUSR1)
    wait_until(kill_file.exists, 10, 0.05, "the local kill switch by signal")
    assert refused(coordinator, run["id"], "left_click", "--x", mx, "--y", my)["code"] == (
        "kill_switch"
    )
    assert _shows_local(coordinator, desk, "signal")
