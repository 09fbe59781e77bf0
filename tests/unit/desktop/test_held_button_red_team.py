"""The held-button watchdog as a hostile run would push it: a button pressed again just as the
watchdog let go of the last one, and a check that fails while the button is down. Either way
the button must be let go once a kill switch applies, never left down with nobody watching."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from worker_agent.desktop.inputs import DesktopSession


class _FakeGui(SimpleNamespace):
    """pyautogui's pointer calls, recorded: no display needed."""

    def __init__(self) -> None:
        super().__init__(released=0)

    def position(self) -> tuple[int, int]:
        return (10, 10)

    def mouseUp(self, x: object = None, y: object = None, button: str = "left") -> None:
        self.released += 1


def _session() -> tuple[DesktopSession, _FakeGui]:
    session = DesktopSession()
    gui = _FakeGui()
    session._gui = gui  # type: ignore[assignment]
    return session, gui


def _until(condition: object, seconds: float = 2.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.01)
    return False


def test_a_button_pressed_as_the_watchdog_ends_is_still_watched() -> None:
    """left_mouse_up then left_mouse_down at once: the watchdog that saw no button left must
    not count as the one watching the new press."""
    session, gui = _session()
    leaving, go_on = threading.Event(), threading.Event()
    original = DesktopSession._watch_held

    def slow_to_end(self: DesktopSession) -> None:
        original(self)
        leaving.set()  # done watching, but the thread is still alive for a moment
        go_on.wait(5)

    session._watch_held = slow_to_end.__get__(session)  # type: ignore[method-assign]
    switch: list[str] = []

    def blocked() -> str | None:
        return switch[0] if switch else None

    with session.turn(threading.Event()):
        session.hold("run_a", blocked, 60.0)
    with session.turn(threading.Event()):
        session.held = None  # left_mouse_up
    assert leaving.wait(2)
    with session.turn(threading.Event()):
        session.hold("run_a", blocked, 60.0)  # left_mouse_down again
    switch.append("kill switch k1 (run) is engaged")
    try:
        assert _until(lambda: session.held is None), "the button is still down under the switch"
        assert gui.released == 1
    finally:
        go_on.set()


@pytest.mark.parametrize("broken", ["blocked", "position"])
def test_a_check_that_fails_lets_the_button_go(broken: str) -> None:
    """A check the watchdog cannot make (the guard's file unreadable, the X connection gone)
    fails closed: the button is let go, and the watchdog does not die with it down."""
    session, gui = _session()

    def blocked() -> str | None:
        if broken == "blocked":
            raise PermissionError("KILL: permission denied")
        return None

    if broken == "position":

        def position() -> tuple[int, int]:
            raise OSError("X connection lost")

        gui.position = position  # type: ignore[method-assign]
        session.last_position = (1, 1)
    with session.turn(threading.Event()):
        session.hold("run_a", blocked, 60.0)
    assert _until(lambda: session.held is None), "the button is still down"
    assert any("could not" in why for why in session.let_go_because)
