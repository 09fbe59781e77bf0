"""The worker's own check of an approved desktop scope, before anything touches the screen.

The coordinator checks the scope before it dispatches; the worker checks it again (defense
in depth) so that a coordinator defect, a stale dispatch or a replayed message cannot make a
worker act outside what a person approved. Everything here is pure: no display needed.

A scope, as the coordinator sends it in an action's args:

    {"actions": ["left_click", "type", ...],   # kinds, with or without the "desktop." prefix
     "displays": [0],                           # display indexes (0 = first real monitor)
     "region": [x, y, w, h] | null,             # real pixels of the action's display
     "expires_in": 540.0,                       # seconds left when it was dispatched
     "remaining": 12 | null}                    # actions left (null: no cap)

Keys other than these are ignored: the coordinator may add bookkeeping (an approval id).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeGuard

from worker_agent.actions import ActionRefused

PREFIX = "desktop."

# Codes of the refusals this module raises.
NO_SCOPE, OUT_OF_SCOPE, OUTSIDE_REGION = "no_scope", "out_of_scope", "outside_region"
EXPIRED, MAX_ACTIONS = "expired", "max_actions"


@dataclass(frozen=True)
class DesktopScope:
    """An approved scope as received, with the worker's clock reading at receipt."""

    actions: frozenset[str]
    displays: frozenset[int]
    region: tuple[int, int, int, int] | None
    expires_in: float
    remaining: int | None
    received_at: float  # time.monotonic() when the action started here

    @classmethod
    def from_args(cls, value: object, received_at: float) -> DesktopScope:
        """Parse the `scope` argument; ActionRefused(no_scope | invalid_argument) if unusable."""
        if value is None:
            raise ActionRefused(
                "no approved scope came with this action: desktop input and screenshots need one",
                code=NO_SCOPE,
            )
        if not isinstance(value, dict):
            raise _invalid("scope", "must be an object")
        return cls(
            actions=frozenset(_actions(value.get("actions"))),
            displays=frozenset(_int_list(value.get("displays"), "scope.displays")),
            region=_region(value.get("region")),
            expires_in=_number(value.get("expires_in"), "scope.expires_in"),
            remaining=_remaining(value.get("remaining")),
            received_at=received_at,
        )

    def seconds_left(self, now: float) -> float:
        return self.expires_in - (now - self.received_at)


def check_scope(
    scope: DesktopScope | None,
    action: str,
    display: int,
    points: Iterable[tuple[int, int]] = (),
    *,
    now: float,
) -> None:
    """Refuse (ActionRefused with a code) unless `action` on `display` at `points` is in scope.

    `points` are real pixels relative to the display, after any scaling: every point the
    action would touch, a drag's end included.
    """
    if scope is None:
        raise ActionRefused(f"{action} needs an approved scope and none was sent", code=NO_SCOPE)
    if scope.seconds_left(now) <= 0:
        raise ActionRefused("the approved scope has expired", code=EXPIRED)
    if scope.remaining is not None and scope.remaining <= 0:
        raise ActionRefused(
            "the approved scope has no actions left (its maximum was reached)", code=MAX_ACTIONS
        )
    if action not in scope.actions:
        allowed = ", ".join(sorted(scope.actions)) or "nothing"
        raise ActionRefused(
            f"{action} is not an approved action (approved: {allowed})", code=OUT_OF_SCOPE
        )
    if display not in scope.displays:
        allowed = ", ".join(str(d) for d in sorted(scope.displays)) or "none"
        raise ActionRefused(
            f"display {display} is not approved (approved displays: {allowed})", code=OUT_OF_SCOPE
        )
    if scope.region is None:
        return
    rx, ry, rw, rh = scope.region
    for x, y in points:
        if not (rx <= x < rx + rw and ry <= y < ry + rh):
            raise ActionRefused(
                f"({x}, {y}) on display {display} is outside the approved region "
                f"x={rx} y={ry} width={rw} height={rh} (real pixels)",
                code=OUTSIDE_REGION,
            )


def check_text_keys(scope: DesktopScope | None, text: str, what: str = "'text'") -> None:
    """Refuse (out_of_scope) `type` text with a control character unless `key` is approved too:
    typed, a newline presses Return and a tab presses Tab. For a secret's value (`what` other
    than 'text') the refusal says nothing about the character or where it is."""
    if scope is None or "key" in scope.actions:
        return
    for index, ch in enumerate(text):
        code = ord(ch)
        if code < 0x20 or 0x7F <= code <= 0x9F:
            where = f" (U+{code:04X} at index {index})" if what == "'text'" else ""
            allowed = ", ".join(sorted(scope.actions)) or "nothing"
            raise ActionRefused(
                f"{what} has a control character{where}, which presses a key: typing it needs"
                f" key in the approved actions (approved: {allowed})",
                code=OUT_OF_SCOPE,
            )


def _actions(value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(a, str) and a for a in value):
        raise _invalid("scope.actions", "must be a list of action names")
    return [a.removeprefix(PREFIX) for a in value]


def _int_list(value: object, field: str) -> list[int]:
    if not isinstance(value, list) or not all(_is_int(v) and v >= 0 for v in value):
        raise _invalid(field, "must be a list of integers >= 0")
    return list(value)


def _region(value: object) -> tuple[int, int, int, int] | None:
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 4
        or not all(_is_int(v) for v in value)
        or value[2] <= 0
        or value[3] <= 0
    ):
        raise _invalid("scope.region", "must be [x, y, width, height] (integers, size > 0) or null")
    x, y, w, h = value
    return (x, y, w, h)


def _number(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _invalid(field, "must be a finite number of seconds")
    return float(value)


def _remaining(value: object) -> int | None:
    if value is None:
        return None
    if not _is_int(value):
        raise _invalid("scope.remaining", "must be an integer or null")
    return value


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _invalid(field: str, message: str) -> ActionRefused:
    return ActionRefused(f"'{field}' {message}", code="invalid_argument")
