"""A person's mouse and keyboard from a takeover in the console (`HumanInputNow`).

The person's events go through the same input session as an agent's actions
(`DesktopSession`): they take the input turn, any kill switch that applies to this worker (its
local one included) refuses them (kill_switch), and so does a person at the machine itself
(human_active: the pointer is not where the last input left it). Each event the remote person
sends is recorded as the session's own input, so the agent's next action after the takeover
does not take the person's moves for someone at the desk. A button the person holds down is
watched as an agent's is: let go on a kill switch, a person at the machine, or idleness.

Everything is checked before anything runs: an unknown kind, a point off the display, more
than MAX_EVENTS events, text over MAX_TEXT characters, a key no keyboard has (invalid_argument);
a run's owner where this worker was not started with `--allow-owner-takeover` (not_allowed).
The answer says how many events ran (`applied`), and why no more did.

Coordinates are the display's real pixels, placed in the root window by the display's
left/top as the desktop actions place theirs. Batches run one at a time, in the order they
came, on one thread of their own: a person's keystrokes must not be reordered.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from shared.desktop_scope import (
    INVALID_ARGUMENT,
    KILL_SWITCH,
    MAX_DISPLAYS,
    MAX_SCROLL,
    NO_DISPLAY,
)
from shared.gen.deskfleet.v1 import desktop_pb2, worker_pb2
from worker_agent.actions import ActionRefused
from worker_agent.desktop.inputs import DesktopSession, Pointer
from worker_agent.desktop.keys import KeyCombo, parse_keys
from worker_agent.desktop.screen import DisplayGeometry, Screen
from worker_agent.desktop.text import TypingStopped, check_typeable, type_chunks
from worker_agent.input_guard import InputGuard

MAX_EVENTS = 64  # per HumanInputNow, as SendInput allows
MAX_TEXT = 2000  # characters of one `type` event
KINDS = ("move", "down", "up", "click", "scroll", "key", "type")
BUTTONS = ("left", "middle", "right")
NOT_ALLOWED = "not_allowed"
FAILED = "failed"
# A button the person holds is let go after this long whatever else happens; the session's
# watchdog lets it go sooner when no input comes for HELD_BUTTON_IDLE seconds.
HOLD_LIMIT = 300.0
NO_DESKTOP = "this worker runs without computer use (--no-computer-use): no desktop to control"


@dataclass(frozen=True)
class _Step:
    """One checked event: where it lands in root-window pixels and what it does."""

    index: int
    kind: str
    at: tuple[int, int] | None = None
    button: str = "left"
    dx: int = 0
    dy: int = 0
    combos: tuple[KeyCombo, ...] = ()
    text: str = ""


class _Stop(Exception):
    """No more events run: why, with its code."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class HumanInput:
    """Applies takeover input on this worker's desktop; one per worker process."""

    def __init__(
        self,
        session: DesktopSession | None,
        screen: Screen | None,
        guard: InputGuard | None,
        *,
        allow_owner: bool = False,
    ) -> None:
        self._session = session  # None with the screen: the worker runs without computer use
        self._screen = screen
        self._guard = guard
        self._allow_owner = allow_owner
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="takeover-input")
        self._never = threading.Event()  # a person's input is not cancelled, it is refused

    async def answer(self, order: worker_pb2.HumanInputNow) -> worker_pb2.HumanInputResult:
        """`apply` off the event loop, after every batch that came before it."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, self.apply, order)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def apply(self, order: worker_pb2.HumanInputNow) -> worker_pb2.HumanInputResult:
        """Run the order's events; never raises (the console is waiting for the answer)."""
        result = worker_pb2.HumanInputResult(input_id=order.input_id)
        try:
            if order.by_owner and not self._allow_owner:
                raise _Stop(
                    "this worker does not let a run's owner take over its desktop (start it"
                    " with deskfleet-worker run --allow-owner-takeover); an admin may",
                    NOT_ALLOWED,
                )
            if self._session is None or self._screen is None:
                raise _Stop(NO_DESKTOP, NO_DISPLAY)
            steps = self._check(order, self._screen)
            self._run(order, steps, self._session, result)
        except _Stop as stop:
            result.error, result.code = str(stop), stop.code
        except ActionRefused as exc:
            result.error, result.code = str(exc), exc.code
        except Exception as exc:  # the display went away mid-batch, an X error
            result.error, result.code = f"input failed: {_short(exc)}", FAILED
        return result

    def _check(self, order: worker_pb2.HumanInputNow, screen: Screen) -> list[_Step]:
        if len(order.events) > MAX_EVENTS:
            raise _Stop(
                f"at most {MAX_EVENTS} events per input, got {len(order.events)}",
                INVALID_ARGUMENT,
            )
        if not 0 <= order.display < MAX_DISPLAYS:
            raise _Stop(
                f"'display' must be in 0..{MAX_DISPLAYS - 1}, not {order.display}",
                INVALID_ARGUMENT,
            )
        geometry = screen.display(order.display)
        return [_step(index, event, geometry) for index, event in enumerate(order.events)]

    def _run(
        self,
        order: worker_pb2.HumanInputNow,
        steps: list[_Step],
        session: DesktopSession,
        result: worker_pb2.HumanInputResult,
    ) -> None:
        holder = f"takeover {order.takeover_id}"
        self._refuse_if_blocked()
        pointer = session.pointer()
        with session.turn(self._never):
            held = session.held
            if held is not None and held.run_id != holder:
                session.let_go(f"input of {holder}")
            for step in steps:
                self._refuse_if_blocked()
                position = pointer.position()
                session.check_presence(position, resume=False)
                session.touch(holder)
                try:
                    self._act(step, session, pointer, holder)
                except BaseException:
                    session.record(pointer.position())  # wherever it stopped
                    raise
                # Where this event put the pointer, so that the next input (the agent's after
                # the takeover) does not take the person's moves for someone at the machine.
                session.record(step.at or position)
                result.applied += 1

    def _act(self, step: _Step, session: DesktopSession, pointer: Pointer, holder: str) -> None:
        if step.kind == "move":
            assert step.at is not None
            pointer.move(*step.at)
        elif step.kind == "click":
            pointer.click(step.at, step.button)
        elif step.kind == "down":
            held = session.held
            if held is not None and held.button != step.button:
                session.let_go(f"{holder} pressed the {step.button} button")
            pointer.press(step.at, step.button)
            session.hold(holder, self._blocked, HOLD_LIMIT, step.button)
        elif step.kind == "up":
            held = session.held
            if held is not None and held.button == step.button:
                session.held = None  # let go here: the watchdog has nothing to do
            pointer.release(step.at, step.button)
        elif step.kind == "scroll":
            pointer.scroll(step.at, step.dx, step.dy)
        elif step.kind == "key":
            keyboard = session.keyboard()
            for number, combo in enumerate(step.combos):
                if number:
                    self._refuse_if_blocked()
                keyboard.press(combo)
        else:
            self._type(step, session)

    def _type(self, step: _Step, session: DesktopSession) -> None:
        def stop_reason() -> tuple[str, str] | None:
            why = self._blocked()
            return None if why is None else (KILL_SWITCH, f"desktop input is blocked: {why}")

        try:
            type_chunks(session.keyboard(), step.text, stop_reason, self._never)
        except TypingStopped as stop:
            raise _Stop(
                f"{stop.reason}: event {step.index} (type) typed {stop.typed} of"
                f" {len(step.text)} characters before stopping",
                stop.code,
            ) from None

    def _blocked(self) -> str | None:
        """Any kill switch here (a run's too, as for a watch), or a lost coordinator."""
        if self._guard is None:
            return None
        return self._guard.stopped() or self._guard.blocked("")

    def _refuse_if_blocked(self) -> None:
        why = self._blocked()
        if why is not None:
            raise _Stop(f"desktop input is blocked: {why}", KILL_SWITCH)


def _step(index: int, event: desktop_pb2.HumanEvent, geometry: DisplayGeometry) -> _Step:
    """One event checked against the display; _Stop(invalid_argument) names what is wrong."""
    kind = event.kind

    def invalid(message: str) -> _Stop:
        return _Stop(f"event {index} ({kind or 'no kind'}): {message}", INVALID_ARGUMENT)

    if kind not in KINDS:
        raise invalid(f"unknown kind {kind!r} (one of {', '.join(KINDS)})")
    if kind == "key":
        try:
            return _Step(index, kind, combos=parse_keys(event.key))
        except ActionRefused as exc:
            raise invalid(str(exc)) from None
    if kind == "type":
        if not event.text:
            raise invalid("'text' must not be empty")
        if len(event.text) > MAX_TEXT:
            raise invalid(f"'text' is longer than {MAX_TEXT} characters ({len(event.text)})")
        try:
            check_typeable(event.text, "'text'")
        except ActionRefused as exc:
            raise invalid(str(exc)) from None
        return _Step(index, kind, text=event.text)
    if not geometry.contains(event.x, event.y):
        raise invalid(
            f"({event.x}, {event.y}) is outside display {geometry.index}"
            f" (0..{geometry.width - 1}, 0..{geometry.height - 1})"
        )
    at = geometry.to_root(event.x, event.y)
    button = event.button or "left"
    if kind in ("down", "up", "click") and button not in BUTTONS:
        raise invalid(f"'button' must be one of {', '.join(BUTTONS)}, not {button!r}")
    if kind == "scroll":
        if not (abs(event.dx) <= MAX_SCROLL and abs(event.dy) <= MAX_SCROLL):
            raise invalid(f"'dx' and 'dy' are clicks in -{MAX_SCROLL}..{MAX_SCROLL}")
        if not (event.dx or event.dy):
            raise invalid("'dy' or 'dx' must be non-zero: scroll by how many clicks?")
        return _Step(index, kind, at, dx=event.dx, dy=event.dy)
    return _Step(index, kind, at, button)


def _short(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
