"""A desktop run's recording as its player shows it: each recorded frame with the action drawn
over it. Pure functions over API messages, no I/O (as `model`).

An action is drawn over a frame when it is the latest one dispatched at or before the frame
was captured: its mark stays on the frames after it acted, until the next one starts, since
a click lasts milliseconds and frames are kept a few a second at most. A frame a person held
gets no action: the agent's run waits while a person has the controls, so the last action
would be drawn over what the person did.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from coordinator.console.model import parse_int, seconds
from shared.gen.deskfleet.v1 import desktop_pb2, runs_pb2
from shared.text import visible

MAX_FRAMES = 20_000  # frames one page lists (2 frames a second: close to three hours)


@dataclass(frozen=True)
class Mark:
    """An action as drawn over a recorded frame, in that frame's pixels."""

    index: int
    action: str  # the desktop action, e.g. left_click
    status: str
    point: tuple[float, float] | None
    to: tuple[float, float] | None  # a drag's end
    text: str  # typed text as sent: a secret appears as its {{secret:NAME}} reference
    key: str
    acting: bool  # the frame was captured while the action ran (before its receipt)


@dataclass(frozen=True)
class Played:
    """One frame of the player."""

    seq: int
    at: float  # seconds after the recording's first frame
    held_by: str  # agent | person
    width: int
    height: int
    mark: Mark | None


@dataclass(frozen=True)
class _Acted:
    started: float
    finished: float | None
    action: runs_pb2.ActionInfo
    result: Mapping[str, Any]


def _scaled(value: Any, sx: float, sy: float) -> tuple[float, float] | None:
    if not isinstance(value, dict):
        return None
    x, y = value.get("x"), value.get("y")
    if isinstance(x, bool) or isinstance(y, bool):
        return None
    if not isinstance(x, int | float) or not isinstance(y, int | float):
        return None
    return (round(x * sx, 1), round(y * sy, 1))


def _mark(acted: _Acted, frame: desktop_pb2.RecordedFrame, captured: float) -> Mark:
    result = acted.result
    # The action's coordinates are in its space (or display); the frame is the display as
    # recorded, which may have been scaled down.
    space = result.get("space") or result.get("display") or {}
    sx = sy = 1.0
    if isinstance(space, dict):
        width, height = parse_int(space.get("width")), parse_int(space.get("height"))
        sx = frame.width / width if width > 0 and frame.width > 0 else 1.0
        sy = frame.height / height if height > 0 and frame.height > 0 else 1.0
    start = _scaled(result.get("from"), sx, sy)
    return Mark(
        index=acted.action.index,
        action=acted.action.kind.removeprefix("desktop."),
        status=acted.action.status,
        point=start or _scaled(result.get("at"), sx, sy),
        to=_scaled(result.get("to"), sx, sy),
        # Spelled out as every page shows text (a control character never reaches the page).
        text=visible(str(result.get("text") or "")),
        key=visible(str(result.get("key") or "")),
        acting=acted.finished is None or captured <= acted.finished,
    )


def played(
    frames: Sequence[desktop_pb2.RecordedFrame],
    actions: Sequence[runs_pb2.ActionInfo],
    results: Mapping[str, Mapping[str, Any]],
) -> list[Played]:
    """The recording's frames in order, each with the action drawn over it (if any).

    `results` holds each action's receipt result by action id, as for `model.replay`.
    """
    acted = sorted(
        (
            _Acted(started, seconds(a.finished_at), a, results.get(a.id) or {})
            for a in actions
            if a.kind.startswith("desktop.") and (started := seconds(a.dispatched_at)) is not None
        ),
        key=lambda x: (x.started, x.action.index),
    )
    starts = [x.started for x in acted]
    ordered = sorted(frames, key=lambda f: f.seq)[:MAX_FRAMES]
    first = (seconds(ordered[0].captured_at) or 0.0) if ordered else 0.0
    out: list[Played] = []
    for f in ordered:
        captured = seconds(f.captured_at) or first
        mark = None
        latest = bisect_right(starts, captured) - 1
        if latest >= 0 and f.held_by != "person":
            mark = _mark(acted[latest], f, captured)
        out.append(
            Played(
                seq=f.seq,
                at=round(max(captured - first, 0.0), 3),
                held_by="person" if f.held_by == "person" else "agent",
                width=f.width,
                height=f.height,
                mark=mark,
            )
        )
    return out


def as_json(frames: Sequence[Played]) -> list[dict[str, Any]]:
    """The player's frames as the page embeds them (the page's script reads this)."""
    return [asdict(f) for f in frames]
