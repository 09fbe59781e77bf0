"""Desktop scopes: what an approval allows, how an approver narrows it, and the checks an
action must pass under it. Pure functions: the worker repeats the same checks on its side.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from shared.action_kinds import DESKTOP, IDEMPOTENT_KINDS
from shared.errors import InvalidArgumentError

# The Computer Use vocabulary (SPEC §5).
ACTIONS = (
    "screenshot",
    "cursor_position",
    "mouse_move",
    "left_click",
    "right_click",
    "middle_click",
    "double_click",
    "left_click_drag",
    "scroll",
    "type",
    "key",
    "wait",
)
# Actions that touch input: these stop under a kill switch and yield to a person.
INPUT = frozenset(
    {
        "mouse_move",
        "left_click",
        "right_click",
        "middle_click",
        "double_click",
        "left_click_drag",
        "scroll",
        "type",
        "key",
    }
)
# Reading the screen changes nothing: repeating one after an unknown outcome is harmless.
IDEMPOTENT = frozenset(k.removeprefix(DESKTOP) for k in IDEMPOTENT_KINDS if k.startswith(DESKTOP))

DEFAULT_TTL = 600.0
MAX_TTL = 24 * 3600.0
DEFAULT_MAX_ACTIONS = 100
MAX_ACTIONS = 10_000
MAX_DISPLAYS = 16
# No display is this large: a coordinate or size past it is a mistake, refused by name.
MAX_PIXELS = 65_536
MAX_KEY_CHARS = 200
MAX_COMBOS = 16  # the worker's own limit (worker_agent/desktop/keys.py)
# The shape of xdotool-style key combos ("ctrl+shift+t Return"); the worker knows the names.
_KEY_PART = re.compile(r"[A-Za-z0-9_]+|[!-~]")


@dataclass(frozen=True)
class Region:
    x: int
    y: int
    width: int
    height: int

    def contains(self, x: int, y: int) -> bool:
        return self.x <= x < self.x + self.width and self.y <= y < self.y + self.height

    def within(self, other: Region) -> bool:
        return (
            other.x <= self.x
            and other.y <= self.y
            and self.x + self.width <= other.x + other.width
            and self.y + self.height <= other.y + other.height
        )

    def __str__(self) -> str:
        return f"{self.width}x{self.height}+{self.x}+{self.y}"


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
    if not (
        0 <= region.x < MAX_PIXELS
        and 0 <= region.y < MAX_PIXELS
        and 0 < region.width <= MAX_PIXELS
        and 0 < region.height <= MAX_PIXELS
    ):
        raise InvalidArgumentError(
            f"scope.region: x, y in 0..{MAX_PIXELS - 1} and width, height in 1..{MAX_PIXELS}"
        )


def _ttl_checked(ttl: float, most: float) -> None:
    # NaN passes every comparison, so it is refused first.
    if not math.isfinite(ttl) or not 0 <= ttl <= most:
        raise InvalidArgumentError(f"scope.ttl: between 0 and {most:g} seconds")


@dataclass(frozen=True)
class Refusal:
    code: str
    message: str


def points_of(args: dict[str, Any]) -> list[tuple[int, int]]:
    """The coordinates an action's arguments name, as given (possibly in a scaled space)."""
    points = []
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


def control_character(text: str) -> tuple[int, str] | None:
    """The first control character (C0, DEL or C1) in `text` and its index, or None.

    Typed, these press keys (a newline is Return, a tab is Tab): `type` text that holds one
    needs `key` in the approved actions as well as `type`.
    """
    for index, ch in enumerate(text):
        code = ord(ch)
        if code < 0x20 or 0x7F <= code <= 0x9F:
            return index, ch
    return None


def keys_in_text(scope: Scope, text: object, what: str = "'text'") -> Refusal | None:
    """out_of_scope if `text` would press keys that the scope does not approve."""
    if "key" in scope.actions or not isinstance(text, str):
        return None
    found = control_character(text)
    if found is None:
        return None
    index, ch = found
    where = f" (U+{ord(ch):04X} at index {index})" if what == "'text'" else ""
    return Refusal(
        "out_of_scope",
        f"{what} has a control character{where}, which presses a key: typing it needs key in"
        f" the approved actions ({', '.join(scope.actions)})",
    )


def to_real(point: tuple[int, int], space: object, display: tuple[int, int]) -> tuple[int, int]:
    """Map a point given in a scaled space onto the display's real pixels."""
    if space is None or space == {}:
        return point
    if not isinstance(space, dict):
        raise InvalidArgumentError(f"space: {{width, height}} as integers in 1..{MAX_PIXELS}")
    width, height = space.get("width"), space.get("height")
    if (
        type(width) is not int
        or type(height) is not int
        or not 0 < width <= MAX_PIXELS
        or not 0 < height <= MAX_PIXELS
    ):
        raise InvalidArgumentError(f"space: {{width, height}} as integers in 1..{MAX_PIXELS}")
    return (point[0] * display[0] // width, point[1] * display[1] // height)


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
    if action not in scope.actions:
        return Refusal(
            "out_of_scope", f"{action} is not in the approved actions ({', '.join(scope.actions)})"
        )
    if action == "type" and (refusal := keys_in_text(scope, args.get("text"))):
        return refusal
    display = args.get("display", 0)
    if display not in scope.displays:
        return Refusal("out_of_scope", f"display {display} is not approved")
    if scope.region is None:
        return None
    points = points_of(args)
    if not points:
        return None
    if display_size is None:
        return Refusal(
            "outside_region", "the display's size is unknown, so no region can be checked"
        )
    for point in points:
        real = to_real(point, args.get("space"), display_size)
        if not scope.region.contains(*real):
            return Refusal(
                "outside_region",
                f"({real[0]}, {real[1]}) is outside the approved region {scope.region}",
            )
    return None
