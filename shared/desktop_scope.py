"""The desktop scope contract, kept once for both ends: the action vocabulary, the limits, the
refusal codes, the rule an action must pass under a scope, and the scope as it travels to the
worker (`Dispatch.scope`, a `ScopeGrant` message; never inside `args_json`).

The coordinator checks an action against the approval before it dispatches; the worker checks
it again against the grant it received (defense in depth: a coordinator defect, a stale or
replayed dispatch must not make a worker act outside what a person approved). Both use what
is here, so they cannot drift apart; tests/unit/desktop/test_desktop_scope.py holds them to it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from shared.gen.deskfleet.v1 import desktop_pb2, worker_pb2

PREFIX = "desktop."  # a worker registers each action as the kind PREFIX + name

# The Computer Use vocabulary (SPEC §5: the members of Anthropic's computer_toolset_20260801);
# as a type for schemas that name the choices.
Action = Literal[
    "screenshot",
    "zoom",
    "cursor_position",
    "mouse_move",
    "left_click",
    "right_click",
    "middle_click",
    "double_click",
    "triple_click",
    "left_click_drag",
    "left_mouse_down",
    "left_mouse_up",
    "scroll",
    "type",
    "key",
    "hold_key",
    "wait",
]
ACTIONS: tuple[str, ...] = get_args(Action)
# Reading the screen (or waiting) changes nothing: repeating one after an unknown outcome is
# harmless. Every other action touches input: it stops under a kill switch and yields to a person.
IDEMPOTENT = frozenset({"screenshot", "zoom", "cursor_position", "wait"})
INPUT = frozenset(ACTIONS) - IDEMPOTENT

# ------------------------------------------------------------------------------ limits
DEFAULT_TTL = 600.0  # seconds an approval lasts when the request names none
MAX_TTL = 24 * 3600.0
DEFAULT_MAX_ACTIONS = 100
MAX_ACTIONS = 10_000  # actions under one approval
MAX_DISPLAYS = 16  # display indexes 0..MAX_DISPLAYS-1
# No display is this large: a coordinate or size past it is a mistake, refused by name.
MAX_PIXELS = 65_536
MAX_SPACE = 16_384  # width and height of a scaled coordinate space
MAX_KEY_CHARS = 200  # characters of one `key` argument
MAX_COMBOS = 16  # key combos in one `key` argument ("ctrl+a Delete" is two)
MAX_TEXT = 10_000  # characters of `type` text, and of a secret's value
MAX_WAIT = 60.0  # seconds of one `wait`
MAX_HOLD = 10.0  # seconds of one `hold_key`
# A left button pressed by `left_mouse_down` is let go by the worker when no input action of
# its run came for this long (a run that stopped sends none), besides the kill switch, a lost
# coordinator, a person at the desk, the scope's end and another run's input, which let it go
# at once.
HELD_BUTTON_IDLE = 30.0
MAX_SCROLL = 100  # clicks of one `scroll`, either way
MAX_INTERVAL = 0.5  # seconds between typed characters

# ------------------------------------------------------------------------ refusal codes
# A refused action's error line starts with its code (`out_of_scope: ...`).
NOT_APPROVED = "not_approved"
DENIED = "denied"
REAPPROVAL_NEEDED = "reapproval_needed"
EXPIRED = "expired"
MAX_ACTIONS_USED = "max_actions"
OUT_OF_SCOPE = "out_of_scope"
OUTSIDE_REGION = "outside_region"
KILL_SWITCH = "kill_switch"
HUMAN_ACTIVE = "human_active"
INPUT_LEASE_HELD = "input_lease_held"
WORKER_OFFLINE = "worker_offline"
UNKNOWN_SECRET = "unknown_secret"
NO_SCOPE = "no_scope"
INVALID_SCOPE = "invalid_scope"
NO_DISPLAY = "no_display"
INVALID_ARGUMENT = "invalid_argument"

COORDINATOR, WORKER, BOTH = "coordinator", "worker", "both"
# Every code a desktop action can be refused with, who refuses with it, and what it means.
CODES: dict[str, tuple[str, str]] = {
    NOT_APPROVED: (COORDINATOR, "the run has no answered approval yet"),
    DENIED: (COORDINATOR, "the approval was denied"),
    REAPPROVAL_NEEDED: (COORDINATOR, "a kill switch or a lost connection took the approval back"),
    EXPIRED: (BOTH, "the approval's time is over"),
    MAX_ACTIONS_USED: (BOTH, "the approval's actions are used up"),
    OUT_OF_SCOPE: (BOTH, "the action or display is not approved, or text would press keys"),
    OUTSIDE_REGION: (BOTH, "a point lies outside the approved region"),
    KILL_SWITCH: (BOTH, "a kill switch applies to the worker or run"),
    HUMAN_ACTIVE: (BOTH, "a person is using the desktop; input waits for `desktop continue`"),
    INPUT_LEASE_HELD: (COORDINATOR, "another run controls the desktop"),
    WORKER_OFFLINE: (COORDINATOR, "the approved worker is not connected"),
    UNKNOWN_SECRET: (BOTH, "typed text refers to a secret that is not stored or not sent"),
    NO_SCOPE: (WORKER, "a desktop action arrived without a scope"),
    INVALID_SCOPE: (WORKER, "the scope that came with the action breaks this contract"),
    NO_DISPLAY: (WORKER, "the worker has no such display"),
    INVALID_ARGUMENT: (WORKER, "an argument the coordinator let through is malformed"),
}


# -------------------------------------------------------------------------- the rule


@dataclass(frozen=True)
class Refusal:
    code: str
    message: str


@dataclass(frozen=True)
class Region:
    """A rectangle in the real pixels of one display."""

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

    def fits(self) -> bool:
        """On some display: the corner on a pixel, the size positive and no larger."""
        return (
            0 <= self.x < MAX_PIXELS
            and 0 <= self.y < MAX_PIXELS
            and 0 < self.width <= MAX_PIXELS
            and 0 < self.height <= MAX_PIXELS
        )

    def __str__(self) -> str:
        return f"{self.width}x{self.height}+{self.x}+{self.y}"


REGION_RULE = f"x, y in 0..{MAX_PIXELS - 1} and width, height in 1..{MAX_PIXELS}"


def outside(
    actions: Sequence[str],
    displays: Iterable[int],
    region: Region | None,
    action: str,
    display: int,
    points: Iterable[tuple[int, int]] = (),
) -> Refusal | None:
    """Why `action` on `display` touching `points` (real pixels of that display) is outside a
    scope of `actions`, `displays` and `region`; None when it is inside."""
    if action not in actions:
        return Refusal(
            OUT_OF_SCOPE, f"{action} is not in the approved actions ({', '.join(actions)})"
        )
    if display not in displays:
        shown = ", ".join(str(d) for d in sorted(displays))
        return Refusal(OUT_OF_SCOPE, f"display {display} is not approved (approved: {shown})")
    if region is None:
        return None
    for x, y in points:
        if not region.contains(x, y):
            return Refusal(
                OUTSIDE_REGION,
                f"({x}, {y}) on display {display} is outside the approved region {region}"
                " (real pixels)",
            )
    return None


SPACE_RULE = f'{{"width": W, "height": H}} with integers in 1..{MAX_SPACE}'


def space_of(value: object) -> tuple[int, int] | None:
    """(width, height) of a scaled coordinate space argument, None for none; ValueError
    (saying what a space is) if it is malformed."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"width", "height"}:
        raise ValueError(SPACE_RULE)
    width, height = value["width"], value["height"]
    if type(width) is not int or type(height) is not int:
        raise ValueError(SPACE_RULE)
    if not (0 < width <= MAX_SPACE and 0 < height <= MAX_SPACE):
        raise ValueError(SPACE_RULE)
    return width, height


def scale(value: int, source: int, target: int) -> int:
    """A coordinate on a `source`-pixel axis -> the same place on a `target`-pixel one: the
    centre of the source pixel, so that a point maps back to itself after a round trip. The
    coordinator's region check and the worker's pointer both map through this."""
    return min(target - 1, max(0, int((value + 0.5) * target / source)))


def control_character(text: str) -> tuple[int, str] | None:
    """The first control character (C0, DEL or C1) in `text` and its index, or None."""
    for index, ch in enumerate(text):
        code = ord(ch)
        if code < 0x20 or 0x7F <= code <= 0x9F:
            return index, ch
    return None


def keys_in_text(actions: Sequence[str], text: object, what: str = "'text'") -> Refusal | None:
    """out_of_scope if typing `text` would press keys the scope does not approve: typed, a
    newline presses Return and a tab presses Tab, so such text needs `key` approved as well as
    `type`. For a secret's value (`what` other than 'text') it says nothing of where."""
    if "key" in actions or not isinstance(text, str):
        return None
    found = control_character(text)
    if found is None:
        return None
    index, ch = found
    where = f" (U+{ord(ch):04X} at index {index})" if what == "'text'" else ""
    return Refusal(
        OUT_OF_SCOPE,
        f"{what} has a control character{where}, which presses a key: typing it needs key in"
        f" the approved actions ({', '.join(actions)})",
    )


# ------------------------------------------------------------------------- the wire


class InvalidScope(ValueError):
    """A grant that breaks the contract; the message names the field."""


@dataclass(frozen=True)
class Grant:
    """What an approval still allows when an action is sent (`Dispatch.scope`)."""

    actions: tuple[str, ...]
    displays: tuple[int, ...]
    region: Region | None
    expires_in: float  # seconds left of the approval when it was sent
    remaining: int  # actions left under it, the one sent included

    def to_proto(self) -> worker_pb2.ScopeGrant:
        msg = worker_pb2.ScopeGrant(
            actions=self.actions,
            displays=self.displays,
            expires_in_seconds=self.expires_in,
            remaining_actions=self.remaining,
        )
        if self.region is not None:
            r = self.region
            msg.region.CopyFrom(desktop_pb2.Region(x=r.x, y=r.y, width=r.width, height=r.height))
        return msg

    @classmethod
    def from_proto(cls, msg: worker_pb2.ScopeGrant) -> Grant:
        """The grant in `msg`, checked against the contract; InvalidScope if it breaks it."""
        r = msg.region
        return cls.checked(
            list(msg.actions),
            list(msg.displays),
            Region(r.x, r.y, r.width, r.height) if msg.HasField("region") else None,
            msg.expires_in_seconds,
            msg.remaining_actions,
        )

    @classmethod
    def checked(
        cls,
        actions: list[str],
        displays: list[int],
        region: Region | None,
        expires_in: float,
        remaining: int,
    ) -> Grant:
        if not actions:
            raise InvalidScope("scope.actions: empty (a grant names at least one action)")
        unknown = [a for a in actions if a not in ACTIONS]
        if unknown:
            raise InvalidScope(
                f"scope.actions: unknown {', '.join(repr(a[:40]) for a in unknown[:3])}"
                f" (known: {', '.join(ACTIONS)})"
            )
        if not displays or any(not 0 <= d < MAX_DISPLAYS for d in displays):
            raise InvalidScope(f"scope.displays: one or more indexes in 0..{MAX_DISPLAYS - 1}")
        if region is not None and not region.fits():
            raise InvalidScope(f"scope.region: {REGION_RULE}")
        if not math.isfinite(expires_in) or expires_in > MAX_TTL:
            raise InvalidScope(f"scope.expires_in_seconds: a number of at most {MAX_TTL:g}")
        if not 0 <= remaining <= MAX_ACTIONS:
            raise InvalidScope(f"scope.remaining_actions: in 0..{MAX_ACTIONS}")
        return cls(
            tuple(dict.fromkeys(actions)),
            tuple(sorted(set(displays))),
            region,
            float(expires_in),
            remaining,
        )

    def to_json(self) -> dict[str, Any]:
        """For an order that waits in the store for another replica's stream."""
        r = self.region
        return {
            "actions": list(self.actions),
            "displays": list(self.displays),
            "region": None if r is None else [r.x, r.y, r.width, r.height],
            "expires_in": self.expires_in,
            "remaining": self.remaining,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Grant:
        region = data["region"]
        return cls(
            tuple(data["actions"]),
            tuple(data["displays"]),
            None if region is None else Region(*region),
            float(data["expires_in"]),
            int(data["remaining"]),
        )
