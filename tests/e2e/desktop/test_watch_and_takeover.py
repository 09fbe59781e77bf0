"""A live view and a person's takeover on a real X server with a real xterm, in this process:
the worker's ScreenWatcher and HumanInput driven with the orders the coordinator sends (the
rules alone, on fakes: tests/unit/desktop/test_watch_and_takeover.py)."""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image

from shared.gen.deskfleet.v1 import desktop_pb2, worker_pb2
from shared.gen.deskfleet.v1.worker_pb2 import WorkerMessage
from tests.harness import Xvfb, wait_until
from worker_agent.desktop.human import HumanInput
from worker_agent.desktop.inputs import DesktopSession
from worker_agent.desktop.screen import Screen
from worker_agent.desktop.watch import ScreenWatcher
from worker_agent.input_guard import InputGuard

pytestmark = pytest.mark.display

# The xterm's window, placed by its geometry flag (there is no window manager).
XTERM_AT = (100, 100)  # a point inside it


@dataclass
class Desk:
    screen: Screen
    session: DesktopSession
    guard: InputGuard
    env: dict[str, str]
    state: Path

    def human(self, allow_owner: bool = False) -> HumanInput:
        return HumanInput(self.session, self.screen, self.guard, allow_owner=allow_owner)


@pytest.fixture(scope="module")
def desk_module(xvfb: Xvfb, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desk]:
    if shutil.which("xterm") is None or shutil.which("xdotool") is None:
        pytest.skip("xterm and xdotool are not installed (scripts/setup.sh installs them)")
    state = tmp_path_factory.mktemp("state")
    with pytest.MonkeyPatch.context() as patch:
        # pyautogui and python-xlib read these when first imported / connected.
        patch.setenv("DISPLAY", xvfb.display)
        patch.setenv("XAUTHORITY", str(xvfb.auth))
        screen, session, guard = Screen(), DesktopSession(), InputGuard(state)
        guard.set_connected(True)
        try:
            yield Desk(screen, session, guard, {**os.environ, **xvfb.env}, state)
        finally:
            session.close()
            screen.close()


@pytest.fixture
def desk(desk_module: Desk) -> Iterator[Desk]:
    desk_module.session.paused = None
    desk_module.session.last_position = None
    yield desk_module
    desk_module.guard.release_local()


@dataclass
class Xterm:
    proc: subprocess.Popen[bytes]
    out: Path


@pytest.fixture
def xterm(desk: Desk, tmp_path: Path) -> Iterator[Xterm]:
    """An xterm at the top left whose shell writes what is typed into it to `out`."""
    out = tmp_path / "out"
    before = _pixels(desk)
    proc = subprocess.Popen(
        ["xterm", "-geometry", "60x10+0+0", "-e", "sh", "-c", f"cat > {out}"],
        env=desk.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: out.exists() and _pixels(desk) != before, 10, what="the xterm")
        time.sleep(0.3)  # its first paint done: the screen is still from here on
        yield Xterm(proc, out)
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(10)


def _pixels(desk: Desk) -> bytes:
    return bytes(desk.screen.grab_pixels(desk.screen.display(0)).raw)


def _xdotool(desk: Desk, *args: str) -> None:
    subprocess.run(["xdotool", *args], env=desk.env, check=True, capture_output=True)


def _watch(watch_id: str = "w1", **fields: object) -> worker_pb2.WatchScreenNow:
    return worker_pb2.WatchScreenNow(watch_id=watch_id, display=0, **fields)  # type: ignore[arg-type]


def _frames(sent: list[WorkerMessage]) -> list[worker_pb2.ScreenFrame]:
    return [m.frame for m in sent]


def _input(*events: desktop_pb2.HumanEvent, by_owner: bool = False) -> worker_pb2.HumanInputNow:
    return worker_pb2.HumanInputNow(
        input_id="in_1", takeover_id="tk_1", display=0, by_owner=by_owner, events=list(events)
    )


def _event(kind: str, **fields: object) -> desktop_pb2.HumanEvent:
    return desktop_pb2.HumanEvent(kind=kind, **fields)  # type: ignore[arg-type]


async def test_a_still_screen_sends_its_first_frame_at_once_and_then_nothing(
    desk: Desk, xterm: Xterm
) -> None:
    watcher, sent = ScreenWatcher(desk.screen, desk.guard), []
    started = time.time()
    watcher.order(_watch(max_fps=30, quality=60), sent.append)
    try:
        await asyncio.sleep(1.2)
    finally:
        watcher.stop_all()
        watcher.close()
    [frame] = _frames(sent)
    assert (frame.watch_id, frame.seq, frame.media_type) == ("w1", 1, "image/jpeg")
    assert (frame.width, frame.height) == (1280, 800)
    assert started <= frame.captured_at <= started + 0.5, "the first frame waited for a tick"
    with Image.open(io.BytesIO(frame.data)) as image:
        assert image.format == "JPEG" and image.size == (1280, 800)
        # The xterm's white background at the top left, the black root window beside it.
        assert min(image.getpixel(XTERM_AT)) > 200  # type: ignore[arg-type]
        assert max(image.getpixel((1200, 700))) < 60  # type: ignore[arg-type]


async def test_typing_into_the_xterm_sends_new_frames_within_a_second(
    desk: Desk, xterm: Xterm
) -> None:
    watcher, sent = ScreenWatcher(desk.screen, desk.guard), []
    changed = asyncio.Event()

    def send(message: WorkerMessage) -> None:
        sent.append(message)
        if len(sent) > 1:
            changed.set()

    watcher.order(_watch(max_fps=10), send)
    try:
        await asyncio.sleep(0.3)
        assert len(sent) == 1
        _xdotool(desk, "mousemove", *map(str, XTERM_AT))  # no window manager: focus follows
        typed = time.time()
        _xdotool(desk, "type", "--delay", "20", "hello")
        try:
            await asyncio.wait_for(changed.wait(), 1.0)
        except TimeoutError:
            pytest.fail("no frame within 1 s of typing")
        await asyncio.sleep(0.5)
    finally:
        watcher.stop_all()
        watcher.close()
    frames = _frames(sent)
    assert [f.seq for f in frames] == list(range(1, len(frames) + 1))
    assert all(not f.error for f in frames) and frames[1].captured_at >= typed - 0.2
    assert len(frames) <= 1 + 10 * 2, "more frames than max_fps allows"
    # After the watch ended, nothing more is sent.
    count = len(sent)
    _xdotool(desk, "type", "more")
    await asyncio.sleep(0.3)
    assert len(sent) == count


async def test_the_persons_typing_reaches_the_xterm_and_their_moves_are_not_a_person(
    desk: Desk, xterm: Xterm
) -> None:
    human = desk.human()
    # Where the agent's last action left the pointer, before the person took over.
    desk.session.pointer().move(700, 500)
    desk.session.record((700, 500))
    try:
        result = await human.answer(
            _input(
                _event("click", x=XTERM_AT[0], y=XTERM_AT[1]),
                _event("type", text="echo hi\n"),
                _event("key", key="ctrl+d"),  # the end of cat's input: the xterm closes
            )
        )
        assert (result.input_id, result.applied, result.code, result.error) == (
            "in_1",
            3,
            "",
            "",
        )
        xterm.proc.wait(10)
        assert xterm.out.read_text() == "echo hi\n"
        # The agent's next input after the takeover: the person's click is the session's own.
        position = desk.session.pointer().position()
        assert position == XTERM_AT
        desk.session.check_presence(position, resume=False)
        # Someone at the machine moves the pointer: the person's next input is refused.
        _xdotool(desk, "mousemove", "600", "400")
        refused = await human.answer(_input(_event("move", x=10, y=10)))
        assert (refused.applied, refused.code) == (0, "human_active")
        assert desk.session.pointer().position() == (600, 400), "the refused move ran"
    finally:
        human.close()


async def test_the_local_kill_switch_ends_a_watch_and_refuses_the_persons_input(
    desk: Desk, xterm: Xterm
) -> None:
    watcher, sent = ScreenWatcher(desk.screen, desk.guard), []
    human = desk.human()
    watcher.order(_watch(max_fps=5), sent.append)
    try:
        await asyncio.sleep(0.3)
        desk.guard.engage_local("a person at the desk", "command")
        await asyncio.sleep(0.3)  # at most one tick (0.2 s) and a grab
        last = sent[-1].frame
        assert (last.code, last.data) == ("kill_switch", b"")
        assert "local kill switch" in last.error
        assert watcher.watching == 0
        result = await human.answer(
            _input(_event("click", x=XTERM_AT[0], y=XTERM_AT[1]), _event("type", text="no"))
        )
        assert (result.applied, result.code) == (0, "kill_switch")
        assert "local kill switch" in result.error
    finally:
        watcher.stop_all()
        watcher.close()
        human.close()
    assert xterm.proc.poll() is None
    xterm.proc.terminate()
    xterm.proc.wait(10)
    assert xterm.out.read_text() == "", "input ran under the kill switch"


async def test_a_display_that_does_not_exist_ends_the_watch_with_one_error(desk: Desk) -> None:
    watcher, sent = ScreenWatcher(desk.screen, desk.guard), []
    watcher.order(worker_pb2.WatchScreenNow(watch_id="w9", display=3), sent.append)
    await asyncio.sleep(0.3)
    watcher.close()
    [frame] = _frames(sent)
    assert (frame.watch_id, frame.code, frame.data) == ("w9", "invalid_argument", b"")
    assert "'display' 3 does not exist" in frame.error
