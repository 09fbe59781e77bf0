"""The desktop action kinds (`desktop.screenshot`, `desktop.left_click`, ...) and their checks.

Every input action passes, in order: its arguments (invalid_argument; a `scope` among them is
invalid_scope), the scope sent as Dispatch.scope (no_scope; invalid_scope if it breaks the
contract, shared/desktop_scope.py), the display (no_display), the scope's rule (expired,
max_actions, out_of_scope, outside_region), then, holding the input turn, the kill switch
(kill_switch) and a person's presence (human_active). Only then does it touch the pointer or
keyboard. Screenshots and cursor_position are not input: they run while input is paused or
the kill switch is engaged; a screenshot still needs "screenshot" in an approved scope, and
so does `screenshot_before` / `screenshot_after` on any action.

Every result has `action`, `display` ({index, width, height} in real pixels), `space` when
one was given, `cursor` (in the caller's space), `timings` (ms) and the refs of screenshots
taken; never screenshot bytes (they go to `ctx.artifacts`) and never a secret's value.
Besides those, by kind (points in the caller's space):

    screenshot       {"screenshot": ref, "format": "png" | "jpeg" | "webp"}
    zoom             {"zoom": ref, "region": [x0, y0, x1, y1] in real pixels, "format": ...}
    mouse_move       {"at": {x, y}}
    *_click          {"at": {x, y}, "button": "left" | "right" | "middle", "clicks": 1 | 2 | 3}
    left_mouse_down  {"at": {x, y}, "button": "left", "down": true} (let go by left_mouse_up,
                     or by the worker: kill switch, lost link, scope end, a person, idle run)
    left_mouse_up    {"at": {x, y}, "button": "left", "down": false, "was_down": bool}
    left_click_drag  {"from": {x, y}, "to": {x, y}}
    scroll           {"at": {x, y}, "dx": n, "dy": n}
    type             {"text": the text as sent, references and all, "typed_chars": n}
    key              {"key": the combos as keysym names, e.g. "Control_L+a Return"}
    hold_key         {"key": the combo, "seconds": as asked, "held_seconds": how long it was}
    wait             {"seconds": s}
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shared import desktop_scope as contract
from worker_agent.actions import (
    ActionCancelled,
    ActionContext,
    ActionFailed,
    ActionRefused,
    ActionRegistry,
    Handler,
)
from worker_agent.desktop.inputs import DesktopSession, Pointer
from worker_agent.desktop.keys import KeyCombo, parse_keys
from worker_agent.desktop.scope import (
    DesktopScope,
    check_scope,
    check_text_keys,
    refuse_scope_in_args,
)
from worker_agent.desktop.screen import FORMATS, DisplayGeometry, Screen, Space
from worker_agent.desktop.text import SecretText, TypingStopped, type_chunks

PREFIX = contract.PREFIX
KILL_SWITCH = contract.KILL_SWITCH
MAX_WAIT = contract.MAX_WAIT
MAX_SCROLL = contract.MAX_SCROLL
MAX_INTERVAL = contract.MAX_INTERVAL

_SHOTS = {"screenshot_before", "screenshot_after", "format", "quality"}
_POINT = {"x", "y"}
# The argument names each kind takes besides display and space; input kinds also take
# `resume` (which only the coordinator sets). Anything else is refused: a misspelt `x` must
# not become "click here".
FIELDS: dict[str, set[str]] = {
    "screenshot": {"format", "quality"},
    "zoom": {"region", "format", "quality"},
    "cursor_position": set(),
    "mouse_move": _POINT | _SHOTS,
    "left_click": _POINT | _SHOTS,
    "right_click": _POINT | _SHOTS,
    "middle_click": _POINT | _SHOTS,
    "double_click": _POINT | _SHOTS,
    "triple_click": _POINT | _SHOTS,
    "left_mouse_down": _POINT | _SHOTS,
    "left_mouse_up": _POINT | _SHOTS,
    "left_click_drag": _POINT | {"to_x", "to_y"} | _SHOTS,
    "scroll": _POINT | {"dx", "dy"} | _SHOTS,
    "type": {"text", "interval"} | _SHOTS,
    "key": {"key"} | _SHOTS,
    "hold_key": {"key", "seconds"} | _SHOTS,
    "wait": {"seconds"} | _SHOTS,
}
INPUT_KINDS = contract.INPUT
_CLICKS = {
    "left_click": ("left", 1),
    "right_click": ("right", 1),
    "middle_click": ("middle", 1),
    "double_click": ("left", 2),
    "triple_click": ("left", 3),
}


class _Args:
    """One action's arguments, read field by field; every refusal names the field."""

    def __init__(self, kind: str, args: dict[str, Any]) -> None:
        allowed = FIELDS[kind] | {"display", "space"}
        if kind in INPUT_KINDS:
            allowed.add("resume")
        unknown = sorted(set(args) - allowed)
        if unknown:
            takes = ", ".join(sorted(allowed))
            raise _invalid(unknown[0], f"is not an argument of desktop.{kind} (it takes: {takes})")
        self.kind, self._args = kind, args

    def get(self, name: str) -> Any:
        return self._args.get(name)

    def integer(
        self, name: str, default: int | None = None, low: int = 0, high: int = 1 << 30
    ) -> int:
        value = self._args.get(name, default)
        if value is None:
            raise _invalid(name, "is required (an integer)")
        if not _is_int(value) or not low <= value <= high:
            raise _invalid(name, f"must be an integer in {low}..{high}, not {value!r}")
        return int(value)

    def display(self) -> int:
        return self.integer("display", default=0, high=contract.MAX_DISPLAYS - 1)

    def flag(self, name: str) -> bool:
        value = self._args.get(name, False)
        if not isinstance(value, bool):
            raise _invalid(name, f"must be true or false, not {value!r}")
        return value

    def point(self, xname: str, yname: str) -> tuple[str, str, int, int]:
        return xname, yname, self.integer(xname), self.integer(yname)

    def optional_point(self, xname: str, yname: str) -> tuple[str, str, int, int] | None:
        """Both or neither: one coordinate alone is a mistake, not "the current position"."""
        if xname not in self._args and yname not in self._args:
            return None
        return self.point(xname, yname)

    def space(self) -> Space | None:
        try:
            size = contract.space_of(self._args.get("space"))
        except ValueError as exc:
            raise _invalid("space", f"must be {exc}") from None
        return None if size is None else Space(*size)

    def image_format(self) -> tuple[str, int | None]:
        fmt = self._args.get("format", "png")
        fmt = "jpeg" if fmt == "jpg" else fmt
        if fmt not in FORMATS:
            raise _invalid("format", f"must be one of png, jpeg, webp, not {fmt!r}")
        if "quality" not in self._args:
            return fmt, None
        if fmt == "png":
            raise _invalid("quality", "applies to jpeg and webp only")
        return fmt, self.integer("quality", low=1, high=100)


@dataclass
class _Call:
    """What one action works with once its checks have passed."""

    kind: str
    ctx: ActionContext
    geometry: DisplayGeometry
    space: Space | None
    scope: DesktopScope | None
    session: DesktopSession
    at_pointer: bool  # no coordinates were given: the action lands where the pointer is
    pointer: Pointer | None = None

    def root(self, point: tuple[int, int]) -> tuple[int, int]:
        """A checked real display point -> root-window pixels for the pointer."""
        return self.geometry.to_root(*point)

    def in_space(self, root: tuple[int, int]) -> dict[str, int]:
        x, y = self.geometry.to_space(*self.geometry.from_root(*root), self.space)
        return {"x": x, "y": y}


@dataclass
class _Timings:
    input_ms: float = 0.0
    capture_ms: float = 0.0
    encode_ms: float = 0.0

    def describe(self) -> dict[str, float]:
        return {k: round(v, 2) for k, v in vars(self).items()}


class DesktopActions:
    """Registers the desktop kinds on a registry. One per worker process: the session it
    holds tracks the pointer of this machine's desktop."""

    def __init__(self, session: DesktopSession | None = None, screen: Screen | None = None):
        self.session = session or PROCESS_SESSION
        self.screen = screen or Screen()

    def register(self, registry: ActionRegistry) -> None:
        for kind, handler in self.handlers().items():
            registry.register(kind, handler)

    def handlers(self) -> dict[str, Handler]:
        """`desktop.<kind>` -> handler, for every kind."""

        def bind(kind: str) -> Handler:
            return lambda args, ctx: self.run(kind, args, ctx)

        return {PREFIX + kind: bind(kind) for kind in FIELDS}

    def close(self) -> None:
        self.screen.close()
        self.session.close()

    def run(self, kind: str, args: dict[str, Any], ctx: ActionContext) -> dict[str, Any]:
        """Check and run one action of `kind` (without the prefix)."""
        refuse_scope_in_args(args)
        a = _Args(kind, args)
        index = a.display()
        space = a.space()
        before, after = a.flag("screenshot_before"), a.flag("screenshot_after")
        fmt, quality = a.image_format()
        resume = a.flag("resume")
        plan = self._plan(kind, a)
        started = time.monotonic()
        captures = kind in ("screenshot", "zoom") or before or after
        needs_scope = kind in INPUT_KINDS or captures
        scope = DesktopScope.received(ctx.scope, started) if needs_scope else None
        geometry = self.screen.display(index)
        real = [_check_point(geometry, space, target) for target in plan.targets]
        if kind in INPUT_KINDS:
            check_scope(scope, kind, index, real, now=started)
        if kind == "type":
            check_text_keys(scope, a.get("text"))
        if kind == "zoom":
            check_scope(scope, "zoom", index, real, now=started)
            captures = before or after
        if captures:
            check_scope(scope, "screenshot", index, now=started)
        call = _Call(kind, ctx, geometry, space, scope, self.session, plan.at_pointer)
        timings = _Timings()
        result: dict[str, Any] = {"action": kind, "display": geometry.describe()}
        if space is not None:
            result["space"] = space.describe()

        def shot(key: str) -> None:
            capture = self.screen.capture(geometry, space, fmt, quality)
            ctx.artifacts.append(capture.artifact)
            timings.capture_ms += capture.capture_ms
            timings.encode_ms += capture.encode_ms
            result[key] = capture.artifact.ref()

        call.pointer = self.session.pointer()
        if kind in INPUT_KINDS:
            with self.session.turn(ctx.cancelled):
                position = self._may_act(call, resume)
                held = self.session.held
                if held is not None and held.run_id != ctx.run_id:
                    self.session.let_go(f"input of another run ({ctx.run_id})")
                self.session.touch(ctx.run_id)
                if before:
                    shot("screenshot_before")
                clock = time.perf_counter()
                try:
                    result.update(plan.act(call, real))
                except BaseException:
                    self.session.record(call.pointer.position())  # wherever it stopped
                    raise
                finally:
                    timings.input_ms = (time.perf_counter() - clock) * 1000
                # Where this action put the pointer, not where it is now: a person who moved
                # it meanwhile is then seen by the next action.
                self.session.record(call.root(real[-1]) if real else position)
                if after:
                    shot("screenshot_after")
        else:
            if before:
                shot("screenshot_before")
            result.update(plan.act(call, real))
            if after:
                shot("screenshot_after")
            if kind == "screenshot":
                shot("screenshot")
                result["format"] = fmt
            if kind == "zoom":
                (x0, y0), (x1, y1) = real
                box = (x0, y0, x1 + 1, y1 + 1)
                capture = self.screen.capture_box(geometry, box, fmt, quality)
                ctx.artifacts.append(capture.artifact)
                timings.capture_ms += capture.capture_ms
                timings.encode_ms += capture.encode_ms
                result |= {"zoom": capture.artifact.ref(), "region": list(box), "format": fmt}
        result["cursor"] = call.in_space(call.pointer.position())
        result["timings"] = timings.describe()
        return result

    def _may_act(self, call: _Call, resume: bool) -> tuple[int, int]:
        """The checks made while holding the input turn, just before acting; returns where
        the pointer is."""
        reason = call.ctx.input_blocked()
        if reason is not None:
            raise ActionRefused(f"desktop input is blocked: {reason}", code=KILL_SWITCH)
        if call.ctx.cancelled.is_set():
            raise ActionCancelled("cancelled before any input")
        assert call.pointer is not None
        position = call.pointer.position()
        self.session.check_presence(position, resume)
        if call.at_pointer:
            # No coordinates: the action lands where the pointer is, which must be in scope.
            here = call.geometry.from_root(*position)
            if not call.geometry.contains(*here):
                raise ActionRefused(
                    f"the pointer is not on display {call.geometry.index}",
                    code=contract.OUT_OF_SCOPE,
                )
            check_scope(call.scope, call.kind, call.geometry.index, [here], now=time.monotonic())
        return position

    def _plan(self, kind: str, a: _Args) -> _Plan:
        if kind in ("screenshot", "cursor_position"):
            return _Plan(_nothing)
        if kind == "wait":
            return _Plan(_wait(_seconds(a)))
        if kind == "mouse_move":
            return _Plan(_move, [a.point("x", "y")])
        if kind in _CLICKS:
            point = a.optional_point("x", "y")
            return _Plan(_click(*_CLICKS[kind]), [point] if point else [], point is None)
        if kind in ("left_mouse_down", "left_mouse_up"):
            point = a.optional_point("x", "y")
            act = _press if kind == "left_mouse_down" else _release
            return _Plan(act, [point] if point else [], point is None)
        if kind == "zoom":
            return _Plan(_nothing, _zoom_corners(a))
        if kind == "hold_key":
            combos = parse_keys(a.get("key"))
            if len(combos) != 1:
                raise _invalid("key", "holds one combo, e.g. 'shift' or 'ctrl+a'")
            seconds = a.get("seconds")
            if not _is_number(seconds) or not 0 < seconds <= contract.MAX_HOLD:
                raise _invalid("seconds", f"must be a number in 0..{contract.MAX_HOLD:g}")
            return _Plan(_hold(combos[0], float(seconds)))
        if kind == "left_click_drag":
            start, end = a.optional_point("x", "y"), a.point("to_x", "to_y")
            return _Plan(_drag(start is not None), [p for p in (start, end) if p], start is None)
        if kind == "scroll":
            point = a.optional_point("x", "y")
            dx = a.integer("dx", default=0, low=-MAX_SCROLL, high=MAX_SCROLL)
            dy = a.integer("dy", default=0, low=-MAX_SCROLL, high=MAX_SCROLL)
            if not (dx or dy):
                raise _invalid("dy", "or 'dx' must be non-zero: scroll by how many clicks?")
            return _Plan(_scroll(dx, dy), [point] if point else [], point is None)
        if kind == "type":
            text = a.get("text")
            if not isinstance(text, str) or not text:
                raise _invalid("text", f"must be a non-empty string, not {text!r}")
            interval = a.get("interval")
            interval = 0 if interval is None else interval
            if not _is_number(interval) or not 0 <= interval <= MAX_INTERVAL:
                raise _invalid("interval", f"seconds per character in 0..{MAX_INTERVAL:g}")
            return _Plan(_type(text, float(interval)))
        return _Plan(_key(parse_keys(a.get("key"))))


_Act = Callable[["_Call", list[tuple[int, int]]], dict[str, Any]]


@dataclass(frozen=True)
class _Plan:
    """How to perform one action, and the points it touches (in the caller's space, with
    the names of their fields, for refusals)."""

    act: _Act
    targets: list[tuple[str, str, int, int]] = field(default_factory=list)
    at_pointer: bool = False


def _nothing(call: _Call, points: list[tuple[int, int]]) -> dict[str, Any]:
    return {}


def _move(call: _Call, points: list[tuple[int, int]]) -> dict[str, Any]:
    assert call.pointer is not None
    call.pointer.move(*call.root(points[0]))
    return {"at": call.in_space(call.root(points[0]))}


def _click(button: str, clicks: int) -> _Act:
    def act(call: _Call, points: list[tuple[int, int]]) -> dict[str, Any]:
        assert call.pointer is not None
        at = call.root(points[0]) if points else None
        call.pointer.click(at, button, clicks)
        return {"button": button, "clicks": clicks, "at": call.in_space(at or _here(call))}

    return act


def _drag(has_start: bool) -> _Act:
    def act(call: _Call, points: list[tuple[int, int]]) -> dict[str, Any]:
        assert call.pointer is not None
        start = call.root(points[0]) if has_start else call.pointer.position()
        end = call.root(points[-1])
        call.pointer.drag(start, end)
        return {"from": call.in_space(start), "to": call.in_space(end)}

    return act


def _press(call: _Call, points: list[tuple[int, int]]) -> dict[str, Any]:
    assert call.pointer is not None
    at = call.root(points[0]) if points else None
    call.pointer.press(at)
    seconds_left = call.scope.seconds_left(time.monotonic()) if call.scope else 0.0
    call.session.hold(call.ctx.run_id, call.ctx.input_blocked, seconds_left)
    return {"button": "left", "down": True, "at": call.in_space(at or _here(call))}


def _release(call: _Call, points: list[tuple[int, int]]) -> dict[str, Any]:
    assert call.pointer is not None
    at = call.root(points[0]) if points else None
    was_down = call.session.held is not None
    call.session.held = None  # let go here, by this action: the watchdog has nothing to do
    call.pointer.release(at)
    return {
        "button": "left",
        "down": False,
        "was_down": was_down,
        "at": call.in_space(at or _here(call)),
    }


def _zoom_corners(a: _Args) -> list[tuple[str, str, int, int]]:
    """A zoom's region as its first and last pixel, checked as points are."""
    region = a.get("region")
    shape = "must be [x0, y0, x1, y1]: integers with x0 < x1 and y0 < y1"
    if not isinstance(region, list) or len(region) != 4 or not all(map(_is_int, region)):
        raise _invalid("region", shape)
    x0, y0, x1, y1 = region
    if not (x0 < x1 and y0 < y1):
        raise _invalid("region", shape)
    return [("region[0]", "region[1]", x0, y0), ("region[2]", "region[3]", x1 - 1, y1 - 1)]


def _hold(combo: KeyCombo, seconds: float) -> _Act:
    def act(call: _Call, points: list[tuple[int, int]]) -> dict[str, Any]:
        keyboard = call.session.keyboard()

        def stop() -> bool:
            return call.ctx.input_blocked() is not None or call.ctx.cancelled.is_set()

        start = time.monotonic()
        keyboard.hold(combo, stop, seconds)
        held = round(time.monotonic() - start, 3)
        if call.ctx.cancelled.is_set():
            raise ActionCancelled(f"cancelled after holding {combo} {held} of {seconds} s")
        reason = call.ctx.input_blocked()
        if reason is not None:
            raise ActionFailed(
                f"desktop input is blocked: {reason}: held {combo} {held} of {seconds} s,"
                " then let it go"
            )
        return {"key": str(combo), "seconds": seconds, "held_seconds": held}

    return act


def _scroll(dx: int, dy: int) -> _Act:
    def act(call: _Call, points: list[tuple[int, int]]) -> dict[str, Any]:
        assert call.pointer is not None
        at = call.root(points[0]) if points else None
        call.pointer.scroll(at, dx, dy)
        return {"dx": dx, "dy": dy, "at": call.in_space(at or _here(call))}

    return act


def _wait(seconds: float) -> _Act:
    def act(call: _Call, points: list[tuple[int, int]]) -> dict[str, Any]:
        if call.ctx.cancelled.wait(timeout=seconds):
            raise ActionCancelled(f"cancelled while waiting {seconds} s")
        return {"seconds": seconds}

    return act


def _seconds(a: _Args) -> float:
    seconds = a.get("seconds")
    if not _is_number(seconds) or not 0 <= seconds <= MAX_WAIT:
        raise _invalid("seconds", f"must be a number in 0..{MAX_WAIT:g}, not {seconds!r}")
    return float(seconds)


# Some applications drop keystrokes that come faster than they redraw: `interval` paces typing
# (at most MAX_INTERVAL) like pyautogui's write(interval=...), and the kill switch is still
# asked before every chunk.


def _type(template: str, interval: float = 0.0) -> _Act:
    def act(call: _Call, points: list[tuple[int, int]]) -> dict[str, Any]:
        # Resolved only now, and kept in this frame only: the value never reaches a result.
        text = SecretText.resolve(template, call.ctx.secrets)
        if text.value != template:  # a secret's value presses keys the same way
            check_text_keys(call.scope, text.value, "a secret 'text' refers to")
        keyboard = call.session.keyboard()

        def stop_reason() -> tuple[str, str] | None:
            reason = call.ctx.input_blocked()
            if reason is not None:
                return KILL_SWITCH, f"desktop input is blocked: {reason}"
            if call.scope is not None and call.scope.seconds_left(time.monotonic()) <= 0:
                return contract.EXPIRED, "the approved scope expired"
            return None

        try:
            type_chunks(keyboard, text.value, stop_reason, call.ctx.cancelled, interval)
        except TypingStopped as stop:
            raise _stopped(stop, text) from None
        return {"text": template, "typed_chars": len(template)}

    return act


class TypingInterrupted(ActionFailed):
    """Typing began and was stopped (kill switch, expired scope): `typed` of `total`
    characters of the text (as sent, with its secret references) went out."""

    def __init__(self, message: str, typed: int, total: int) -> None:
        super().__init__(message)
        self.typed, self.total = typed, total


def _stopped(stop: TypingStopped, text: SecretText) -> Exception:
    """A stop before the first character is a refusal (nothing ran); after it, the action
    ran in part, which is a failure (or a cancellation) that says how far it got."""
    if stop.typed == 0:
        if stop.code == "cancelled":
            return ActionCancelled("cancelled before typing anything")
        return ActionRefused(stop.reason, code=stop.code)
    done, inside = text.progress(stop.typed)
    where = f", stopping inside {inside}" if inside else ""
    message = (
        f"{stop.reason}: typed {done} of {len(text.template)} characters of 'text' "
        f"before stopping{where}"
    )
    if stop.code == "cancelled":
        return ActionCancelled(message)
    return TypingInterrupted(message, done, len(text.template))


def _key(combos: tuple[KeyCombo, ...]) -> _Act:
    def act(call: _Call, points: list[tuple[int, int]]) -> dict[str, Any]:
        keyboard = call.session.keyboard()
        for number, combo in enumerate(combos):
            if number and call.ctx.input_blocked() is not None:
                raise ActionFailed(
                    f"desktop input is blocked: {call.ctx.input_blocked()}: pressed "
                    f"{number} of {len(combos)} key combos before stopping"
                )
            keyboard.press(combo)
        return {"key": " ".join(str(c) for c in combos)}

    return act


def _here(call: _Call) -> tuple[int, int]:
    assert call.pointer is not None
    return call.pointer.position()


def _check_point(
    geometry: DisplayGeometry, space: Space | None, target: tuple[str, str, int, int]
) -> tuple[int, int]:
    """A point in the caller's space -> real display pixels; refused if off the display."""
    xname, yname, x, y = target
    width, height = (space.width, space.height) if space else (geometry.width, geometry.height)
    frame = "space" if space else f"display {geometry.index}"
    if not 0 <= x < width:
        raise _invalid(xname, f"= {x} is outside the {frame} (0..{width - 1})")
    if not 0 <= y < height:
        raise _invalid(yname, f"= {y} is outside the {frame} (0..{height - 1})")
    return geometry.to_real(x, y, space)


def _invalid(field: str, message: str) -> ActionRefused:
    return ActionRefused(f"'{field}' {message}", code=contract.INVALID_ARGUMENT)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


PROCESS_SESSION = DesktopSession()  # the one pointer and keyboard of this process's desktop
