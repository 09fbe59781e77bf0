"""Desktop scopes: what an approval allows, how an approver narrows it, and the checks an
action must pass under it. Pure functions; the vocabulary, limits, codes and the rule itself
are the contract both ends keep (shared/desktop_scope.py): the worker checks the same again.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from shared.desktop_scope import (
    ACTIONS,
    DEFAULT_MAX_ACTIONS,
    DEFAULT_TTL,
    MAX_ACTIONS,
    MAX_COMBOS,
    MAX_DISPLAYS,
    MAX_HOLD,
    MAX_KEY_CHARS,
    MAX_PIXELS,
    MAX_TTL,
    OUTSIDE_REGION,
    REGION_RULE,
    Grant,
    Refusal,
    Region,
    keys_in_text as _keys_in_text,
    outside,
    scale,
    space_of,
)
from shared.errors import InvalidArgumentError

# The shape of xdotool-style key combos ("ctrl+shift+t Return"); the worker knows the names.
_KEY_PART = re.compile(r"[A-Za-z0-9_]+|[!-~]")


@dataclass(frozen=True)
class Scope:
    actions: tuple[str, ...]
    displays: tuple[int, ...] = (0,)
    region: Region | None = None
    ttl: float = DEFAULT_TTL
    max_actions: int = DEFAULT_MAX_ACTIONS

    def to_json(self) -> dict[str, Any]:
        return {
            "actions": list(self.actions),
            "displays": list(self.displays),
            "region": None
            if self.region is None
            else [self.region.x, self.region.y, self.region.width, self.region.height],
            "ttl": self.ttl,
            "max_actions": self.max_actions,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Scope:
        region = data.get("region")
        return cls(
            tuple(data["actions"]),
            tuple(int(d) for d in data.get("displays") or (0,)),
            Region(*(int(v) for v in region)) if region else None,
            float(data.get("ttl", DEFAULT_TTL)),
            int(data.get("max_actions", DEFAULT_MAX_ACTIONS)),
        )

    def grant(self, expires_in: float, remaining: int) -> Grant:
        """What the worker is sent with an action: the scope as it stands now."""
        return Grant(self.actions, self.displays, self.region, expires_in, remaining)

    def describe(self) -> str:
        where = f" in region {self.region}" if self.region else ""
        shown = ",".join(str(d) for d in self.displays)
        return (
            f"actions {','.join(self.actions)} on display {shown}{where},"
            f" for {self.ttl:g} s, at most {self.max_actions} actions"
        )


def requested(
    actions: list[str],
    displays: list[int],
    region: Region | None,
    ttl: float,
    max_actions: int,
) -> Scope:
    """A scope as asked for: every field validated, defaults filled in."""
    if not actions:
        raise InvalidArgumentError("scope.actions: name at least one desktop action")
    unknown = [a for a in actions if a not in ACTIONS]
    if unknown:
        raise InvalidArgumentError(
            f"scope.actions: unknown {', '.join(map(repr, unknown))} (known: {', '.join(ACTIONS)})"
        )
    if len(displays) > MAX_DISPLAYS or any(not 0 <= d < MAX_DISPLAYS for d in displays):
        raise InvalidArgumentError(
            f"scope.displays: up to {MAX_DISPLAYS} indexes in 0..{MAX_DISPLAYS - 1}"
        )
    _region_checked(region)
    _ttl_checked(ttl, MAX_TTL)
    if max_actions < 0 or max_actions > MAX_ACTIONS:
        raise InvalidArgumentError(f"scope.max_actions: between 0 and {MAX_ACTIONS}")
    return Scope(
        tuple(dict.fromkeys(actions)),
        tuple(sorted(set(displays))) or (0,),
        region,
        ttl or DEFAULT_TTL,
        max_actions or DEFAULT_MAX_ACTIONS,
    )


def narrowed(
    asked: Scope,
    actions: list[str],
    displays: list[int],
    region: Region | None,
    ttl: float,
    max_actions: int,
    *,
    source: str = "requested",
) -> Scope:
    """The scope an approver grants: what was asked, narrowed by any field given; never wider.

    `source` says in refusals what `asked` is ("requested", "previously granted").
    """
    granted = asked
    if actions:
        wider = [a for a in actions if a not in asked.actions]
        if wider:
            raise InvalidArgumentError(
                f"scope.actions: {', '.join(wider)} was not {source}; an approval only narrows"
            )
        granted = replace(granted, actions=tuple(dict.fromkeys(actions)))
    if displays:
        wider_d = [d for d in displays if d not in asked.displays]
        if wider_d:
            raise InvalidArgumentError(
                f"scope.displays: {wider_d} was not {source}; an approval only narrows"
            )
        granted = replace(granted, displays=tuple(sorted(set(displays))))
    if region is not None:
        _region_checked(region)
        if asked.region is not None and not region.within(asked.region):
            raise InvalidArgumentError(
                f"scope.region: {region} is not inside the {source} {asked.region}"
            )
        granted = replace(granted, region=region)
    if ttl:
        _ttl_checked(ttl, asked.ttl)
        granted = replace(granted, ttl=ttl)
    if max_actions:
        if max_actions < 0 or max_actions > asked.max_actions:
            raise InvalidArgumentError(
                f"scope.max_actions: at most the {source} {asked.max_actions}"
            )
        granted = replace(granted, max_actions=max_actions)
    return granted


def _region_checked(region: Region | None) -> None:
    if region is None:
        return
    if not region.fits():
        raise InvalidArgumentError(f"scope.region: {REGION_RULE}")


def _ttl_checked(ttl: float, most: float) -> None:
    # NaN passes every comparison, so it is refused first.
    if not math.isfinite(ttl) or not 0 <= ttl <= most:
        raise InvalidArgumentError(f"scope.ttl: between 0 and {most:g} seconds")


def points_of(args: dict[str, Any]) -> list[tuple[int, int]]:
    """The coordinates an action's arguments name, as given (possibly in a scaled space): a
    zoom's region by its first and last pixel."""
    points = []
    if "region" in args:
        x0, y0, x1, y1 = region_of(args["region"])
        points += [(x0, y0), (x1 - 1, y1 - 1)]
    for xk, yk in (("x", "y"), ("to_x", "to_y")):
        x, y = args.get(xk), args.get(yk)
        if x is None and y is None:
            continue
        if type(x) is not int or type(y) is not int:
            raise InvalidArgumentError(f"{xk}, {yk}: integers (pixels)")
        for name, value in ((xk, x), (yk, y)):
            if not 0 <= value < MAX_PIXELS:
                raise InvalidArgumentError(f"{name}: {value} is not a pixel (0..{MAX_PIXELS - 1})")
        points.append((x, y))
    return points


REGION_ARG = "region: [x0, y0, x1, y1], integer pixels with x0 < x1 and y0 < y1"


def region_of(value: object) -> tuple[int, int, int, int]:
    """A zoom's region argument, (x0, y0, x1, y1) with the far corner exclusive."""
    if not isinstance(value, list) or len(value) != 4 or any(type(v) is not int for v in value):
        raise InvalidArgumentError(REGION_ARG)
    x0, y0, x1, y1 = value
    if not (0 <= x0 < x1 <= MAX_PIXELS and 0 <= y0 < y1 <= MAX_PIXELS):
        raise InvalidArgumentError(REGION_ARG)
    return x0, y0, x1, y1


def check_hold(args: dict[str, Any]) -> None:
    """`hold_key`'s arguments: one combo (several would be a sequence, which is `key`'s) and
    a time in (0, MAX_HOLD]."""
    if len(check_keys(args.get("key"), "args.key").split()) != 1:
        raise InvalidArgumentError("args.key: hold_key holds one combo, e.g. 'shift' or 'ctrl+a'")
    value = args.get("seconds")
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (math.isfinite(value) and 0 < value <= MAX_HOLD)
    ):
        raise InvalidArgumentError(f"args.seconds: how long to hold the key, 0 to {MAX_HOLD:g}")


def check_keys(value: object, field: str = "key") -> str:
    """The shape of a key combo argument; the worker checks each name against X keysyms."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(f"{field}: a key combo such as 'ctrl+a' or 'Return'")
    if len(value) > MAX_KEY_CHARS:
        raise InvalidArgumentError(f"{field}: at most {MAX_KEY_CHARS} characters")
    words = value.split()
    if len(words) > MAX_COMBOS:
        raise InvalidArgumentError(f"{field}: at most {MAX_COMBOS} combos, got {len(words)}")
    for word in words:
        if not all(_KEY_PART.fullmatch(part) for part in word.split("+")):
            raise InvalidArgumentError(
                f"{field}: {word[:40]!r} is not a key combo (keys are names such as Return,"
                " ctrl, F5, a, minus, joined by '+'; the + key is 'plus')"
            )
    return value


def keys_in_text(scope: Scope, text: object, what: str = "'text'") -> Refusal | None:
    """out_of_scope if `text` would press keys that the scope does not approve."""
    return _keys_in_text(scope.actions, text, what)


def space_checked(space: object) -> tuple[int, int] | None:
    """(width, height) of a scaled space argument, or None; InvalidArgumentError if malformed."""
    try:
        return space_of(space)
    except ValueError as exc:
        raise InvalidArgumentError(f"space: {exc}") from None


def to_real(point: tuple[int, int], space: object, display: tuple[int, int]) -> tuple[int, int]:
    """Map a point given in a scaled space onto the display's real pixels, as the worker does."""
    size = space_checked(space)
    if size is None:
        return point
    (x, y), (width, height) = point, size
    if not (0 <= x < width and 0 <= y < height):
        raise InvalidArgumentError(f"({x}, {y}) is outside the space {width}x{height}")
    return scale(x, width, display[0]), scale(y, height, display[1])


def check(
    scope: Scope,
    action: str,
    args: dict[str, Any],
    display_size: tuple[int, int] | None,
) -> Refusal | None:
    """Why this action may not run under the scope (time and count are checked apart).

    Malformed arguments are an InvalidArgumentError, raised inside the act's transaction
    (so nothing of it is written), not a refusal.
    """
    if action == "key":
        check_keys(args.get("key"))
    display = args.get("display", 0)
    refusal = outside(scope.actions, scope.displays, None, action, display)
    if refusal is None and scope.region is not None and (points := points_of(args)):
        if display_size is None:
            return Refusal(
                OUTSIDE_REGION, "the display's size is unknown, so no region can be checked"
            )
        real = [to_real(point, args.get("space"), display_size) for point in points]
        refusal = outside(scope.actions, scope.displays, scope.region, action, display, real)
    if refusal is None and action == "type":
        refusal = keys_in_text(scope, args.get("text"))
    return refusal
