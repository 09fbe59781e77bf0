"""What the console's pages show, computed from API messages: pure functions, no I/O."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from google.protobuf.timestamp_pb2 import Timestamp

from coordinator.admin_cli.desktop_commands import ACTIONS
from shared.gen.deskfleet.v1 import desktop_pb2, runs_pb2
from shared.text import visible

PAGE_SIZE = 50


def seconds(ts: Timestamp) -> float | None:
    """Epoch seconds of a set timestamp, None for an unset one."""
    if ts.seconds == 0 and ts.nanos == 0:
        return None
    return ts.seconds + ts.nanos / 1e9


def when(value: Timestamp | float | None) -> str:
    epoch = seconds(value) if isinstance(value, Timestamp) else value
    if not epoch:
        return "—"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(value: float) -> str:
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


@dataclass(frozen=True)
class Page:
    items: list[Any]
    number: int  # 1-based
    pages: int
    total: int

    @property
    def has_prev(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.pages


def page_of(items: Sequence[Any], number: int, size: int = PAGE_SIZE) -> Page:
    pages = max(1, -(-len(items) // size))
    number = min(max(1, number), pages)
    start = (number - 1) * size
    return Page(list(items[start : start + size]), number, pages, len(items))


# --- runs ----------------------------------------------------------------------------------


def filter_runs(
    runs: Sequence[runs_pb2.Run], *, owner: str = "", text: str = ""
) -> list[runs_pb2.Run]:
    needle = text.strip().lower()
    return [
        r
        for r in runs
        if (not owner or r.owner == owner)
        and (not needle or needle in r.title.lower() or needle in r.id.lower())
    ]


@dataclass(frozen=True)
class Bar:
    """One rectangle of the timeline drawing, in the SVG's user units."""

    x: float
    width: float
    row: int
    css: str  # a class name: the state or attempt status
    label: str
    title: str  # the hover text (rendered as text, never markup)


@dataclass(frozen=True)
class Timeline:
    width: float
    rows: list[str]  # row labels: "run state", then one per action
    bars: list[Bar]
    marks: list[Bar]  # retries, recoveries and events: zero-width ticks
    ticks: list[tuple[float, str]]  # (x, label) along the time axis
    wall_seconds: float


TIMELINE_WIDTH = 900.0


def timeline(t: runs_pb2.RunTimeline, width: float = TIMELINE_WIDTH) -> Timeline | None:
    """States and attempts placed along one time axis from submission to the stop (or now)."""
    start = seconds(t.submitted_at)
    if start is None:
        return None
    end = seconds(t.ended_at) or seconds(t.as_of) or start
    span = max(end - start, t.wall_seconds, 1e-3)

    def x(ts: Timestamp) -> float | None:
        at = seconds(ts)
        return None if at is None else max(0.0, min(width, (at - start) / span * width))

    bars: list[Bar] = []
    for s in t.states:
        x0 = x(s.entered_at) or 0.0
        left = x(s.left_at)
        x1 = width if left is None else left
        detail = f"{s.state} {duration(s.seconds)}" + (f": {s.reason}" if s.reason else "")
        bars.append(Bar(x0, max(x1 - x0, 1.0), 0, s.state.lower(), s.state, detail))
    rows = ["run"]
    row_of: dict[str, int] = {}
    for a in t.actions:
        if a.id not in row_of:
            row_of[a.id] = len(rows)
            rows.append(f"#{a.index} {a.kind}")
        dispatched = x(a.dispatched_at)
        if dispatched is None:
            continue
        x0 = dispatched
        finished = x(a.finished_at)
        x1 = min(width, x0 + a.seconds / span * width) if finished is None else finished
        detail = f"attempt {a.attempt} on {a.worker or '—'}: {a.status} {duration(a.seconds)}"
        if a.error:
            detail += f" ({a.error})"
        bars.append(Bar(x0, max(x1 - x0, 2.0), row_of[a.id], a.status.lower(), a.status, detail))
    marks: list[Bar] = []
    for r in t.retries:
        at = x(r.at)
        if at is not None:
            row = row_of.get(r.action_id, 0)
            marks.append(
                Bar(at, 0, row, "retry", r.kind, f"{r.kind} after attempt {r.attempt}: {r.cause}")
            )
    for css, events in (("recovery", t.recoveries), ("event", t.events)):
        for e in events:
            at = x(e.at)
            if at is not None:
                detail = f"{e.kind}" + (f": {e.detail}" if e.detail else "")
                marks.append(Bar(at, 0, row_of.get(e.action_id, 0), css, e.kind, detail))
    ticks = [(width * i / 4, duration(span * i / 4)) for i in range(5)]
    return Timeline(width, rows, bars, marks, ticks, t.wall_seconds)


def pretty_json(text: str) -> str:
    """JSON text indented for reading (as stored when it is not JSON)."""
    try:
        return json.dumps(_unnested(json.loads(text)), indent=2, ensure_ascii=False)
    except ValueError:
        return text


def _unnested(value: Any) -> Any:
    """JSON held as a string inside JSON (`result_json`, `args_json`) decoded for reading."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(v, str) and k.endswith("_json"):
                try:
                    v = json.loads(v)
                except ValueError:
                    pass
            out[k] = _unnested(v)
        return out
    if isinstance(value, list):
        return [_unnested(v) for v in value]
    return value


# --- research ------------------------------------------------------------------------------


def research_report(data_json: str) -> dict[str, Any] | None:
    """The `research.report` event's report, sources with evidence first (as the CLI lists)."""
    try:
        report = json.loads(data_json)
    except ValueError:
        return None
    if not isinstance(report, dict) or not isinstance(report.get("sources"), list):
        return None
    report["sources"] = sorted(report["sources"], key=lambda src: not src.get("evidence"))
    return report


def href(url: Any) -> str:
    """A link target a page may carry: http(s) to a host, else nothing (shown as text only).

    A research app names its sources itself: a `javascript:` or `data:` URL must not become
    a link a person clicks on the console's origin.
    """
    text = str(url or "")
    try:
        parts = urlsplit(text)
    except ValueError:
        return ""
    return text if parts.scheme.lower() in ("http", "https") and parts.netloc else ""


# --- replays -------------------------------------------------------------------------------

SHOTS = ("screenshot_before", "screenshot", "screenshot_after")


@dataclass(frozen=True)
class Shot:
    sha256: str
    width: int
    height: int
    role: str  # which field of which step's receipt it came from


@dataclass(frozen=True)
class Frame:
    """One step of a replay: the screen as it was when the action ran, and the action."""

    step: int  # 1-based
    index: int  # the action's index in the run
    action: str  # the desktop action, e.g. left_click
    status: str
    error: str
    shot: Shot | None  # None: no screenshot was taken before this step
    point: tuple[float, float] | None  # where it acted, in the shot's pixels
    to: tuple[float, float] | None  # a drag's end
    text: str  # typed text as sent: a secret appears as its {{secret:NAME}} reference
    key: str


def _shot(ref: Any, role: str, kept: frozenset[str]) -> Shot | None:
    # Only an artifact the coordinator checked and kept for this run: the result is the
    # worker's word, and its sha256 becomes part of a URL on the console.
    if not isinstance(ref, dict) or ref.get("sha256") not in kept:
        return None
    return Shot(ref["sha256"], parse_int(ref.get("width")), parse_int(ref.get("height")), role)


def _point(value: Any, sx: float, sy: float) -> tuple[float, float] | None:
    if not isinstance(value, dict):
        return None
    x, y = value.get("x"), value.get("y")
    if not isinstance(x, int | float) or not isinstance(y, int | float):
        return None
    return (round(x * sx, 1), round(y * sy, 1))


def replay(
    actions: Sequence[runs_pb2.ActionInfo], results: Mapping[str, dict[str, Any]]
) -> list[Frame]:
    """A desktop run's steps in order, each over the newest screen seen before it acted.

    `results` holds each action's receipt result by action id; a screenshot counts only when
    the run's actions list it among their artifacts. A step is drawn over its own
    `screenshot_before`, a screenshot step over what it captured, any other over the last
    screenshot of an earlier step; coordinates are scaled from the step's space (or display)
    to that image's pixels, since an earlier shot may have been taken in another space.
    """
    kept = frozenset(art.sha256 for a in actions for art in a.artifacts)
    frames: list[Frame] = []
    last: Shot | None = None
    for a in sorted(actions, key=lambda a: a.index):
        if not a.kind.startswith("desktop."):
            continue
        result = results.get(a.id) or {}
        shots = {role: _shot(result.get(role), f"#{a.index} {role}", kept) for role in SHOTS}
        shown = shots["screenshot_before"] or shots["screenshot"] or last
        space = result.get("space") or result.get("display") or {}
        sx = sy = 1.0
        if shown is not None and isinstance(space, dict):
            width, height = parse_int(space.get("width")), parse_int(space.get("height"))
            sx = shown.width / width if width > 0 and shown.width > 0 else 1.0
            sy = shown.height / height if height > 0 and shown.height > 0 else 1.0
        drag_from = _point(result.get("from"), sx, sy)
        frames.append(
            Frame(
                step=len(frames) + 1,
                index=a.index,
                action=a.kind.removeprefix("desktop."),
                status=a.status,
                error=a.error,
                shot=shown,
                point=drag_from or _point(result.get("at"), sx, sy),
                to=_point(result.get("to"), sx, sy),
                text=str(result.get("text") or ""),
                key=str(result.get("key") or ""),
            )
        )
        # After it acted, the newest screen is what it saw last.
        last = next((shots[r] for r in reversed(SHOTS) if shots[r] is not None), last)
    return frames


# --- approvals -----------------------------------------------------------------------------

DESKTOP_ACTIONS = ACTIONS  # the CLI's list: one place names them


def scope_text(scope: desktop_pb2.DesktopScope) -> str:
    parts = [", ".join(scope.actions) or "every action"]
    parts.append(
        "displays " + ", ".join(str(d) for d in scope.displays) if scope.displays else "display 0"
    )
    if scope.HasField("region"):
        r = scope.region
        parts.append(f"region {r.width}x{r.height}+{r.x}+{r.y}")
    else:
        parts.append("the whole display")
    if scope.ttl_seconds:
        parts.append(f"for {duration(scope.ttl_seconds)}")
    if scope.max_actions:
        parts.append(f"at most {scope.max_actions} actions")
    return "; ".join(parts)


GRID = 160  # px between the grid lines of a display's drawing, at most
GRID_LINES = 32  # lines each way, at most, whatever size a worker advertises


def grid_step(width: int, height: int) -> int:
    """The spacing of a display drawing's grid: every GRID px, doubled until a side has at
    most GRID_LINES lines (the size comes from the worker: it bounds nothing by itself)."""
    step, side = GRID, max(width, height, 1)
    while side > step * GRID_LINES:
        step *= 2
    return step


def parse_int(value: Any, default: int = 0) -> int:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return default


def parse_float(value: Any, default: float = 0.0) -> float:
    try:
        number = float(str(value).strip())
    except (TypeError, ValueError):
        return default
    return number if number == number else default  # NaN: the default


def short_words(text: str, longest: int = 40) -> str:
    """Each word longer than `longest` cut with an ellipsis (the cell's title keeps it whole):
    a table cell wraps between words and never inside one, so one long token would otherwise
    widen its column past the screen."""
    # Measured as the page shows it: a control character is spelled out (`\u202e`, six
    # characters), so 39 of them were a 234-character word no cell could wrap.
    return " ".join(
        w if len(w) <= longest else w[: longest - 1] + "…" for w in visible(str(text)).split(" ")
    )


@dataclass(frozen=True)
class JournalPages:
    """Where a page of a run's journal is: events after `after`, `size` a page (a run's
    sequence numbers count its events from 1, so a page's number follows from them)."""

    after: int
    last_seq: int
    size: int

    @property
    def number(self) -> int:
        return self.after // self.size + 1

    @property
    def count(self) -> int:
        return max((self.last_seq + self.size - 1) // self.size, 1)

    @property
    def earlier(self) -> int | None:
        return max(self.after - self.size, 0) if self.after > 0 else None

    @property
    def later(self) -> int | None:
        return self.after + self.size if self.after + self.size < self.last_seq else None

    @property
    def last(self) -> int:
        return (self.count - 1) * self.size
