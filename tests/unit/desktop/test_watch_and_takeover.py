"""The worker's side of a live view and a takeover as rules, on a fake screen and pointer: what
a watch order is clamped to, how many watches run, which input is refused before anything
runs. On a real X server with a real xterm: tests/e2e/desktop/test_watch_and_takeover.py."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from PIL import Image

from shared.advertisement import Advertisement
from shared.gen.deskfleet.v1 import desktop_pb2, worker_pb2, worker_pb2_grpc
from shared.gen.deskfleet.v1.worker_pb2 import WorkerMessage
from worker_agent.action_log import ActionLog
from worker_agent.connection import WorkerConnection
from worker_agent.desktop.human import MAX_EVENTS, MAX_TEXT, HumanInput
from worker_agent.desktop.inputs import DesktopSession
from worker_agent.desktop.keys import KeyCombo
from worker_agent.desktop.screen import DisplayGeometry, Pixels, Screen
from worker_agent.desktop.watch import MAX_WATCHES, ScreenWatcher, WatchPlan
from worker_agent.executor import ActionExecutor
from worker_agent.input_guard import InputGuard, Kill
from worker_agent.state import WorkerIdentity

# A second monitor right of the first: its points land 1280 px further right.
SECOND = DisplayGeometry(1, 1280, 0, 640, 400)


class FakeScreen(Screen):
    """Two monitors; every grab is the same noise (a still screen) unless `changes`."""

    def __init__(self, changes: bool = False) -> None:
        super().__init__()
        self.changes, self.grabs = changes, 0
        self._noise = Image.effect_noise((64, 40), 128).convert("RGB").tobytes("raw", "BGRX")

    def displays(self) -> list[DisplayGeometry]:
        return [DisplayGeometry(0, 0, 0, 1280, 800), SECOND]

    def grab_pixels(self, geometry: DisplayGeometry, box: Any = None) -> Pixels:
        self.grabs += 1
        raw = bytearray(self._noise)
        if self.changes:
            raw[0] = self.grabs % 256
        return Pixels(raw, (64, 40))


class FakeGui(SimpleNamespace):
    """pyautogui's pointer, recorded."""

    def __init__(self) -> None:
        super().__init__(calls=[], at=(0, 0))

    def position(self) -> tuple[int, int]:
        return self.at  # type: ignore[no-any-return]

    def moveTo(self, x: int, y: int) -> None:
        self.calls.append(("move", x, y))
        self.at = (x, y)

    def click(self, x: int, y: int, clicks: int, interval: float, button: str) -> None:
        self.calls.append(("click", x, y, button))
        self.at = (x, y)

    def mouseDown(self, x: int | None, y: int | None, button: str) -> None:
        self.calls.append(("down", x, y, button))
        self.at = self.at if x is None or y is None else (x, y)

    def mouseUp(self, x: int | None = None, y: int | None = None, button: str = "left") -> None:
        self.calls.append(("up", x, y, button))
        self.at = self.at if x is None or y is None else (x, y)


class FakeKeyboard:
    def __init__(self) -> None:
        self.typed: list[str] = []

    def type(self, text: str) -> None:
        self.typed.append(text)

    def press(self, combo: KeyCombo) -> None:
        self.typed.append(f"<{combo}>")

    def close(self) -> None:
        pass


def _desk(tmp_path: Path, allow_owner: bool = False) -> tuple[HumanInput, FakeGui, InputGuard]:
    session = DesktopSession()
    gui, keyboard = FakeGui(), FakeKeyboard()
    session._gui = gui  # type: ignore[assignment]
    session._keyboard = keyboard  # type: ignore[assignment]
    guard = InputGuard(tmp_path)
    guard.set_connected(True)
    return HumanInput(session, FakeScreen(), guard, allow_owner=allow_owner), gui, guard


def _input(*events: desktop_pb2.HumanEvent, **fields: Any) -> worker_pb2.HumanInputNow:
    return worker_pb2.HumanInputNow(input_id="in_1", takeover_id="tk_1", events=events, **fields)


def _event(kind: str, **fields: Any) -> desktop_pb2.HumanEvent:
    return desktop_pb2.HumanEvent(kind=kind, **fields)


def test_events_land_in_the_displays_pixels_through_the_session(tmp_path: Path) -> None:
    human, gui, _ = _desk(tmp_path)
    result = human.apply(
        _input(
            _event("move", x=10, y=20),
            _event("down", x=30, y=40, button="right"),
            _event("up", x=50, y=60, button="right"),
            _event("click", x=5, y=5),
            _event("type", text="hi"),
            _event("key", key="ctrl+a Return"),
            display=1,
        )
    )
    assert (result.input_id, result.applied, result.code) == ("in_1", 6, "")
    assert gui.calls == [
        ("move", 1290, 20),
        ("down", 1310, 40, "right"),
        ("up", 1330, 60, "right"),
        ("click", 1285, 5, "left"),
    ]
    keyboard = human._session._keyboard  # type: ignore[union-attr]
    assert keyboard.typed == ["hi", "<Control_L+a>", "<Return>"]  # type: ignore[union-attr]
    # The person's moves are the session's own: the agent's next input sees no one else.
    assert human._session.last_position == (1285, 5)  # type: ignore[union-attr]
    human.close()


def test_a_held_button_is_let_go_by_the_watchdog_under_a_kill_switch(tmp_path: Path) -> None:
    human, gui, guard = _desk(tmp_path)
    assert human.apply(_input(_event("down", x=1, y=1))).applied == 1
    session = human._session
    assert session is not None and session.held is not None
    assert session.held.run_id == "takeover tk_1"
    guard.apply(Kill("k1", "worker", "wrk_1", "stop"), True)
    deadline = threading.Event()
    for _ in range(100):
        if session.held is None:
            break
        deadline.wait(0.02)
    assert session.held is None and gui.calls[-1] == ("up", None, None, "left")
    human.close()


@pytest.mark.parametrize(
    ("events", "says"),
    [
        ([_event("wiggle")], "unknown kind 'wiggle'"),
        ([_event("move", x=1280, y=0)], "outside display 0"),
        ([_event("click", x=0, y=-1)], "outside display 0"),
        ([_event("click", x=0, y=0, button="fourth")], "'button' must be one of"),
        ([_event("scroll", x=0, y=0)], "must be non-zero"),
        ([_event("scroll", x=0, y=0, dy=101)], "'dx' and 'dy'"),
        ([_event("key", key="ctrl+nosuchkey")], "unknown key 'nosuchkey'"),
        ([_event("type", text="x" * (MAX_TEXT + 1))], f"longer than {MAX_TEXT}"),
        ([_event("type", text="bell\x07")], "cannot be typed"),
        ([_event("move", x=1, y=1)] * (MAX_EVENTS + 1), f"at most {MAX_EVENTS} events"),
    ],
)
def test_bad_events_are_refused_before_any_runs(
    tmp_path: Path, events: list[desktop_pb2.HumanEvent], says: str
) -> None:
    human, gui, _ = _desk(tmp_path)
    # A good event first: it must not run either.
    result = human.apply(_input(_event("move", x=1, y=1), *events[: MAX_EVENTS + 1]))
    assert (result.applied, result.code) == (0, "invalid_argument")
    assert says in result.error and "\n" not in result.error
    assert gui.calls == [] and human._session.last_position is None  # type: ignore[union-attr]
    human.close()


def test_an_owner_takes_over_only_where_the_worker_allows_it(tmp_path: Path) -> None:
    human, gui, _ = _desk(tmp_path)
    refused = human.apply(_input(_event("move", x=1, y=1), by_owner=True))
    assert (refused.applied, refused.code) == (0, "not_allowed")
    assert "--allow-owner-takeover" in refused.error and gui.calls == []
    assert human.apply(_input(_event("move", x=1, y=1))).applied == 1  # an admin's
    allowed, gui, _ = _desk(tmp_path, allow_owner=True)
    assert allowed.apply(_input(_event("move", x=1, y=1), by_owner=True)).applied == 1
    human.close()
    allowed.close()


def test_a_kill_switch_or_a_person_at_the_machine_refuses_the_input(tmp_path: Path) -> None:
    human, gui, guard = _desk(tmp_path)
    guard.apply(Kill("k1", "run", "run_9", "stop"), True)  # a run's: the takeover stops too
    stopped = human.apply(_input(_event("move", x=1, y=1)))
    assert (stopped.applied, stopped.code) == (0, "kill_switch") and gui.calls == []
    guard.apply(Kill("k1", "run", "run_9", "stop"), False)
    guard.engage_local("at the desk")
    local = human.apply(_input(_event("type", text="x")))
    assert local.code == "kill_switch" and "local kill switch" in local.error
    guard.release_local()
    assert human.apply(_input(_event("move", x=1, y=1))).applied == 1
    gui.at = (400, 300)  # someone at the machine moved it
    here = human.apply(_input(_event("move", x=2, y=2), _event("type", text="x")))
    assert (here.applied, here.code) == (0, "human_active") and len(gui.calls) == 1
    human.close()


def test_without_computer_use_input_is_refused(tmp_path: Path) -> None:
    human = HumanInput(None, None, InputGuard(tmp_path))
    result = human.apply(_input(_event("move", x=1, y=1)))
    assert result.code == "no_display" and "--no-computer-use" in result.error
    human.close()


def test_a_watch_order_is_clamped_to_what_a_worker_serves() -> None:
    def plan(**fields: Any) -> WatchPlan:
        return WatchPlan.of(worker_pb2.WatchScreenNow(watch_id="w1", **fields))

    assert (plan().interval, plan().quality, plan().max_bytes) == (0.1, 70, 4 * 1024 * 1024)
    assert plan(max_fps=100).interval == pytest.approx(1 / 30)
    assert plan(max_fps=0.2).interval == 1.0
    assert plan(max_fps=float("nan")).interval == 0.1
    assert (plan(quality=100).quality, plan(quality=3).quality) == (95, 10)
    assert plan(max_bytes=1000).max_bytes == 1000


def _frames(sent: list[WorkerMessage]) -> list[worker_pb2.ScreenFrame]:
    return [m.frame for m in sent]


async def test_a_still_screen_sends_one_frame_and_a_changing_one_a_frame_a_tick(
    tmp_path: Path,
) -> None:
    still, changing = FakeScreen(), FakeScreen(changes=True)
    sent_still: list[WorkerMessage] = []
    sent_changing: list[WorkerMessage] = []
    watchers = [ScreenWatcher(still, InputGuard(tmp_path)), ScreenWatcher(changing, None)]
    watchers[0].order(worker_pb2.WatchScreenNow(watch_id="w1", max_fps=30), sent_still.append)
    watchers[1].order(worker_pb2.WatchScreenNow(watch_id="w2", max_fps=20), sent_changing.append)
    await asyncio.sleep(0.5)
    for watcher in watchers:
        watcher.stop_all()
        watcher.close()
    assert len(sent_still) == 1 and still.grabs >= 10
    seqs = [f.seq for f in _frames(sent_changing)]
    assert 5 <= len(seqs) <= 11 and seqs == list(range(1, len(seqs) + 1))


async def test_at_most_sixteen_watches_and_a_stop_is_silent(tmp_path: Path) -> None:
    watcher, sent = ScreenWatcher(FakeScreen(), InputGuard(tmp_path)), []
    for n in range(MAX_WATCHES + 1):
        watcher.order(worker_pb2.WatchScreenNow(watch_id=f"w{n}", max_fps=1), sent.append)
    await asyncio.sleep(0.2)
    refused = [f for f in _frames(sent) if f.error]
    assert [(f.watch_id, f.code) for f in refused] == [(f"w{MAX_WATCHES}", "too_many")]
    assert watcher.watching == MAX_WATCHES
    count = len(sent)
    watcher.order(worker_pb2.WatchScreenNow(watch_id="w0", stop=True), sent.append)
    await asyncio.sleep(0.05)
    assert watcher.watching == MAX_WATCHES - 1 and len(sent) == count
    watcher.order(worker_pb2.WatchScreenNow(watch_id="w99", max_fps=1), sent.append)
    await asyncio.sleep(0.1)
    assert watcher.watching == MAX_WATCHES and not sent[-1].frame.error
    watcher.stop_all()
    watcher.stop_all()  # twice is safe
    assert watcher.watching == 0
    watcher.close()


async def test_a_frame_too_large_even_at_low_quality_ends_the_watch(tmp_path: Path) -> None:
    watcher, sent = ScreenWatcher(FakeScreen(), None), []
    watcher.order(worker_pb2.WatchScreenNow(watch_id="w1", max_bytes=200), sent.append)
    await asyncio.sleep(0.2)
    watcher.close()
    [frame] = _frames(sent)
    assert (frame.code, frame.seq, frame.data) == ("too_large", 0, b"")
    assert "quality 30" in frame.error and watcher.watching == 0


async def test_without_computer_use_or_with_a_bad_order_a_watch_is_refused() -> None:
    sent: list[WorkerMessage] = []
    ScreenWatcher(None, None).order(worker_pb2.WatchScreenNow(watch_id="w1"), sent.append)
    watcher = ScreenWatcher(FakeScreen(), None)
    watcher.order(worker_pb2.WatchScreenNow(watch_id="w2", display=99), sent.append)
    watcher.order(worker_pb2.WatchScreenNow(), sent.append)
    watcher.close()
    assert [(f.watch_id, f.code) for f in _frames(sent)] == [
        ("w1", "no_display"),
        ("w2", "invalid_argument"),
        ("", "invalid_argument"),
    ]


class _Gateway(worker_pb2_grpc.WorkerGatewayServicer):
    """A coordinator's stream, in this process: a watch and a takeover's input, then the
    stream ends while the watch runs."""

    def __init__(self) -> None:
        self.received: list[WorkerMessage] = []
        self.ended = asyncio.Event()

    async def Connect(self, request_iterator: Any, context: Any) -> Any:
        if self.ended.is_set():  # the worker reconnecting: no second watch to confuse the count
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the test is over")
        messages = request_iterator.__aiter__()
        await messages.__anext__()  # the hello
        yield worker_pb2.CoordinatorMessage(
            welcome=worker_pb2.Welcome(worker_id="wrk_1", stream_liveness=True)
        )
        yield worker_pb2.CoordinatorMessage(
            watch=worker_pb2.WatchScreenNow(watch_id="w1", max_fps=5)
        )
        yield worker_pb2.CoordinatorMessage(human_input=_input(_event("move", x=3, y=4)))
        while len({m.WhichOneof("body") for m in self.received} & {"frame", "input_result"}) < 2:
            self.received.append(await messages.__anext__())
        self.ended.set()  # returning ends the stream


async def test_the_stream_carries_frames_and_input_and_its_end_stops_the_watches(
    tmp_path: Path,
) -> None:
    gateway = _Gateway()
    server = grpc.aio.server()
    worker_pb2_grpc.add_WorkerGatewayServicer_to_server(gateway, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    human, gui, guard = _desk(tmp_path)
    watcher = ScreenWatcher(FakeScreen(), guard)
    connection = WorkerConnection(
        WorkerIdentity("wrk_1", "w", [f"127.0.0.1:{port}"]),
        "secret",
        Advertisement,
        actions=ActionExecutor(ActionLog(tmp_path / "actions")),
        guard=guard,
        watcher=watcher,
        human_input=human.answer,
    )
    task = asyncio.create_task(connection.run_forever())
    try:
        await asyncio.wait_for(gateway.ended.wait(), 10)
        kinds = {m.WhichOneof("body"): m for m in gateway.received}
        assert kinds["frame"].frame.seq == 1 and kinds["frame"].frame.watch_id == "w1"
        assert kinds["input_result"].input_result.applied == 1
        assert gui.calls == [("move", 3, 4)]
        for _ in range(100):
            if watcher.watching == 0:
                break
            await asyncio.sleep(0.02)
        assert watcher.watching == 0, "a watch outlived its stream"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await server.stop(None)
        watcher.close()
        human.close()
