"""A run's timeline, rebuilt from its journal: where the run was, for how long, and why.

`build` is a pure function of the journal's events (and the time it is asked at), so the
answer to "where is this run waiting, and why?" never depends on log lines or on state
that the journal does not hold. The states' seconds always add up to the run's wall time:
each state ends where the next begins, and the last one ends when the run stopped (or now,
while it is live).
"""

from __future__ import annotations

import bisect
import collections
import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy.orm import Session

from coordinator.store import runs as run_queries
from shared.receipts import decode_result
from shared.states import ACTIVE, ActionState, RunState

# The state a run is created in, unless the transaction that wrote `run.submitted` moved it
# straight on (a desktop run waits for authority, a plan with no eligible worker waits for
# its environment); see `_PROVISIONAL`.
INITIAL_STATE = RunState.RUNNING

# Events written in the submitting transaction before the run does anything. A first
# `run.state` that follows only these, at once, is the state the run was created in (the
# journal does not name that state otherwise), not a move out of RUNNING.
_PROVISIONAL = frozenset({"run.submitted", "approval.requested", "goal.request"})
_SAME_TRANSACTION = 0.25  # seconds: appends of one transaction are this close, even loaded

# Events worth a line of their own: what a person did or must do, budgets, recoveries.
NOTABLE = frozenset(
    {
        "approval.requested",
        "approval.granted",
        "approval.denied",
        "approval.suspended",
        "budget.extended",
        "guidance.delivered",
        "kill.engaged",
        "kill.released",
        "input.lease",
        "desktop.continue",
        "goal.question",
        "goal.model_error",
        "goal.model_timeout",
        "research.branch",
        "research.skipped",
        "receipt.refused",
        "started.refused",
        "run.child",
    }
)
# Events that recover a run (or give it back to a person) rather than move it forward.
RECOVERY = frozenset({"action.unknown", "action.resumed", "run.retry", "goal.adopted"})
HAND_BACK = "hand_back"


@dataclass(frozen=True)
class JournalEntry:
    """One journal event as the timeline reads it."""

    seq: int
    kind: str
    at: float
    data: dict[str, Any]


@dataclass(frozen=True)
class StateSpan:
    state: str
    entered_at: float
    left_at: float | None  # None for the state the run is in now
    seconds: float
    reason: str = ""  # the waiting reason or stop reason that came with it
    cause: str = ""  # what moved the run into it
    seq: int = 0


@dataclass(frozen=True)
class AttemptSpan:
    action_id: str
    index: int
    kind: str
    worker: str
    attempt: int  # 1 for the first attempt of the action
    attempt_id: str
    status: str  # DISPATCHED STARTED SUCCEEDED FAILED CANCELLED UNKNOWN REDISPATCHED REFUSED
    dispatched_at: float
    started_at: float | None
    finished_at: float | None
    seconds: float  # dispatch to outcome; open attempts up to the end of the run (or now)
    error: str = ""
    receipt_id: str = ""


@dataclass(frozen=True)
class Retry:
    action_id: str
    index: int
    attempt: int  # the attempt that did not succeed
    cause: str
    at: float
    kind: str  # "retry" (after a failure or unknown outcome) | "redispatch" (never received)


@dataclass(frozen=True)
class Note:
    at: float
    kind: str
    detail: str
    action_id: str = ""
    seq: int = 0


@dataclass(frozen=True)
class Timeline:
    states: tuple[StateSpan, ...]
    attempts: tuple[AttemptSpan, ...]
    retries: tuple[Retry, ...]
    recoveries: tuple[Note, ...]
    notes: tuple[Note, ...]
    stop_reason: str
    wall_seconds: float
    submitted_at: float | None
    ended_at: float | None  # None while the run is live
    live: bool
    as_of: float


@dataclass
class _Attempt:
    span: AttemptSpan
    open: bool = True


@dataclass
class _Builder:
    states: list[StateSpan] = field(default_factory=list)
    provisional: bool = True
    submitted_at: float | None = None
    clock: float | None = None
    attempts: dict[str, _Attempt] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    index_of: dict[str, int] = field(default_factory=dict)
    retries: list[Retry] = field(default_factory=list)
    recoveries: list[Note] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    stop_reason: str = ""

    def tick(self, at: float) -> float:
        # Replicas' clocks may disagree a little; the journal's order is the truth, so time
        # never runs backwards along it (and the states still add up).
        self.clock = at if self.clock is None else max(self.clock, at)
        return self.clock

    def start(self, at: float, seq: int) -> None:
        if self.submitted_at is None:
            self.submitted_at = at
            self.states.append(StateSpan(INITIAL_STATE, at, None, 0.0, cause="submitted", seq=seq))

    def move(self, e: JournalEntry, at: float) -> None:
        self.start(at, e.seq)
        status = str(e.data.get("status", ""))
        waiting = e.data.get("waiting") or {}
        reason = str(e.data.get("stop_reason") or "")
        if isinstance(waiting, dict) and waiting.get("code"):
            reason = f"{waiting['code']}: {waiting.get('detail', '')}"
        cause = str(e.data.get("cause") or "")
        self.stop_reason = str(e.data.get("stop_reason") or "")
        current = self.states[-1]
        provisional = self.provisional and at - current.entered_at < _SAME_TRANSACTION
        self.provisional = False
        if provisional:
            # Written with the run itself: this is the state it was created in.
            self.states[-1] = replace(
                current, state=status, reason=reason, cause=cause or "submitted"
            )
            return
        if (current.state, current.reason) == (status, reason):
            return
        self.states[-1] = replace(current, left_at=at, seconds=at - current.entered_at)
        self.states.append(StateSpan(status, at, None, 0.0, reason, cause, e.seq))
        if status == RunState.HAND_BACK_TO_HUMAN:
            self.recoveries.append(Note(at, HAND_BACK, reason, seq=e.seq))

    def attempt(self, attempt_id: str) -> _Attempt | None:
        return self.attempts.get(attempt_id)

    def add_attempt(self, span: AttemptSpan, open_: bool = True) -> None:
        key = span.attempt_id or f"{span.action_id}#{len(self.order)}"
        self.attempts[key] = _Attempt(span, open_)
        self.order.append(key)

    def close(self, attempt_id: str, at: float, status: str, **changes: Any) -> None:
        held = self.attempts.get(attempt_id)
        if held is None:
            return
        held.span = replace(held.span, status=status, finished_at=at, **changes)
        held.open = False


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _note_detail(kind: str, data: dict[str, Any]) -> str:
    """One line a person can read; the journal keeps the whole event."""
    if kind.startswith("approval."):
        who = f" by {data['by']}" if data.get("by") else ""
        why = data.get("reason") or data.get("why") or ""
        return f"approval {data.get('approval', '')}{who}" + (f": {why}" if why else "")
    if kind == "budget.extended":
        return (
            f"extension {data.get('extension')}: estimate now {data.get('estimate_actions')}"
            f" attempts / {float(data.get('estimate_seconds') or 0):g} s"
        )
    if kind == "guidance.delivered":
        return f"guidance {data.get('guidance', '')}: {_text(data.get('text', ''))}"
    if kind.startswith("kill."):
        return f"kill switch {data.get('kill', '')}: {data.get('reason', '')}"
    if kind == "goal.question":
        return _text(data.get("question", ""))
    if kind == "run.child":
        child = f"{data.get('kind', '')} run {data.get('child', '')}"
        return f"started {child} for call {data.get('origin', '')}"
    if kind in ("goal.model_error", "goal.model_timeout"):
        return _text(data.get("error", ""))
    if kind in ("receipt.refused", "started.refused") and data.get("reason"):
        noun = "receipt" if kind == "receipt.refused" else "start"
        return f"{noun} from {data.get('worker', '')} refused: {data.get('reason')}"
    if kind == "receipt.refused":
        return (
            f"stale receipt from {data.get('worker', '')} (epoch {data.get('epoch')}; current"
            f" {data.get('current_epoch')})"
        )
    rest = {k: v for k, v in data.items() if k not in ("action",)}
    return json.dumps(rest, ensure_ascii=False, sort_keys=True)


def _recovery_detail(kind: str, data: dict[str, Any]) -> str:
    if kind == "run.retry":
        return f"retry by {data.get('by', '')}"
    if kind == "goal.adopted":
        return f"adopted by replica {data.get('replica', '')} from {data.get('previous') or '-'}"
    if kind == "goal.tool_result":
        return (
            f"the result of call {data.get('call', '')} read from what it became"
            f" ({data.get('recovered', '')}), not run again"
        )
    return _text(data.get("cause", ""))


def _apply(b: _Builder, e: JournalEntry) -> None:
    at = b.tick(e.at)
    d = e.data
    kind = e.kind
    if kind not in _PROVISIONAL and kind != "run.state":
        b.provisional = False
    if kind == "run.submitted":
        b.start(at, e.seq)
    elif kind == "run.state":
        b.move(e, at)
    elif kind == "action.dispatched":
        action_id = str(d.get("action", ""))
        index = int(d.get("index", b.index_of.get(action_id, 0)))
        b.index_of[action_id] = index
        b.add_attempt(
            AttemptSpan(
                action_id=action_id,
                index=index,
                kind=str(d.get("kind", "")),
                worker=str(d.get("worker", "")),
                attempt=int(d.get("attempt_number", 0)),
                attempt_id=str(d.get("attempt", "")),
                status=ActionState.DISPATCHED,
                dispatched_at=at,
                started_at=None,
                finished_at=None,
                seconds=0.0,
            )
        )
    elif kind == "action.started":
        held = b.attempt(str(d.get("attempt", "")))
        if held is not None and held.open:
            held.span = replace(held.span, status=ActionState.STARTED, started_at=at)
    elif kind == "receipt":
        b.close(
            str(d.get("attempt", "")),
            at,
            str(d.get("status", "")).upper(),
            error=str(d.get("error") or ""),
            receipt_id=str(d.get("receipt", "")),
        )
    elif kind == "action.unknown":
        b.close(str(d.get("attempt", "")), at, ActionState.UNKNOWN, error=str(d.get("cause", "")))
    elif kind == "action.redispatch":
        attempt_id = str(d.get("attempt", ""))
        b.close(attempt_id, at, "REDISPATCHED", error=str(d.get("cause", "")))
        held = b.attempt(attempt_id)
        action_id = str(d.get("action", ""))
        b.retries.append(
            Retry(
                action_id,
                b.index_of.get(action_id, 0),
                held.span.attempt if held else 0,
                str(d.get("cause", "")),
                at,
                "redispatch",
            )
        )
    elif kind == "action.resumed":
        held = b.attempt(str(d.get("attempt", "")))
        if held is not None:
            held.span = replace(held.span, status=ActionState.STARTED, finished_at=None, error="")
            held.open = True
    elif kind == "action.retry":
        action_id = str(d.get("action", ""))
        b.retries.append(
            Retry(
                action_id,
                b.index_of.get(action_id, 0),
                int(d.get("attempts", 0)),
                str(d.get("cause", "")),
                at,
                "retry",
            )
        )
    elif kind == "action.refused":
        action_id = str(d.get("action", ""))
        b.add_attempt(
            AttemptSpan(
                action_id=action_id,
                index=b.index_of.get(action_id, 0),
                kind=str(d.get("kind", "")),
                worker="",
                attempt=0,
                attempt_id="",
                status="REFUSED",
                dispatched_at=at,
                started_at=None,
                finished_at=at,
                seconds=0.0,
                error=f"{d.get('code', '')}: {d.get('reason', '')}",
                receipt_id=str(d.get("receipt", "")),
            ),
            open_=False,
        )
    if kind in RECOVERY or (kind == "goal.tool_result" and d.get("recovered")):
        b.recoveries.append(
            Note(at, kind, _recovery_detail(kind, d), str(d.get("action", "")), e.seq)
        )
    elif kind in NOTABLE:
        b.notes.append(Note(at, kind, _note_detail(kind, d), str(d.get("action", "")), e.seq))


def build(events: Iterable[JournalEntry], now: float) -> Timeline:
    """The timeline of one run from its journal events (in sequence order), as of `now`."""
    b = _Builder()
    for e in sorted(events, key=lambda e: e.seq):
        _apply(b, e)
    if b.submitted_at is None or not b.states:
        return Timeline((), (), (), (), (), "", 0.0, None, None, False, now)
    last = b.states[-1]
    live = last.state in ACTIVE
    # A live run's current state runs up to now; a stopped run ends where its last state began.
    end = max(now, b.clock or now) if live else last.entered_at
    b.states[-1] = replace(last, seconds=end - last.entered_at if live else 0.0)
    attempts = []
    for key in b.order:
        held = b.attempts[key]
        span = held.span
        finish = span.finished_at if span.finished_at is not None else end
        attempts.append(replace(span, seconds=max(0.0, finish - span.dispatched_at)))
    return Timeline(
        states=tuple(b.states),
        attempts=tuple(attempts),
        retries=tuple(b.retries),
        recoveries=tuple(b.recoveries),
        notes=tuple(b.notes),
        stop_reason="" if live else b.stop_reason,
        wall_seconds=end - b.submitted_at,
        submitted_at=b.submitted_at,
        ended_at=None if live else end,
        live=live,
        as_of=now,
    )


def entries(rows: Sequence[Any]) -> list[JournalEntry]:
    """Journal rows (`seq`, `kind`, `at`, `data` as stored) as timeline entries.

    Only the kinds the timeline reads are decoded: a goal run's journal is mostly model
    calls whose bodies it never needs (their place in the order still counts).
    """
    wanted = NOTABLE | RECOVERY | _KINDS
    out = []
    for row in rows:
        data = decode_result(row.data) if row.kind in wanted and row.data else {}
        out.append(JournalEntry(row.seq, row.kind, row.at, data if isinstance(data, dict) else {}))
    return out


_KINDS = frozenset(
    {
        "run.submitted",
        "run.state",
        "action.dispatched",
        "action.started",
        "receipt",
        "action.unknown",
        "action.redispatch",
        "action.resumed",
        "action.retry",
        "action.refused",
    }
)


class _Entries:
    """The decoded journal of the runs read lately, by run: a journal is append-only (an event
    is never changed or removed once committed), so what was decoded once stays true, and a
    status board polling a live run reads and decodes only the events since its last look,
    not the whole journal each time.

    Bounded in runs, in events and in the stored characters they were decoded from, held in
    all (an owner polling many long runs, or runs whose events carry results of thousands of
    characters, must not grow a replica's memory without end): the runs read longest ago are
    dropped first, and a run whose journal alone is past a quarter of a bound is not kept (read
    whole each time)."""

    def __init__(self, runs: int, events: int, chars: int = 32 << 20) -> None:
        self._runs = runs
        self._events = events
        self._chars = chars
        self._held = 0
        self._held_chars = 0
        self._chars_of: dict[str, int] = {}
        self._lock = threading.Lock()
        self._of: collections.OrderedDict[str, tuple[JournalEntry, ...]] = collections.OrderedDict()

    @property
    def held(self) -> tuple[int, int]:
        """(runs, events) kept now."""
        with self._lock:
            return len(self._of), self._held

    def get(self, run_id: str) -> tuple[JournalEntry, ...]:
        with self._lock:
            found = self._of.get(run_id, ())
            if found:
                self._of.move_to_end(run_id)
            return found

    def put(self, run_id: str, events: tuple[JournalEntry, ...], chars: int = 0) -> None:
        """Keep `events` of the run, decoded from `chars` stored characters."""
        with self._lock:
            had = self._of.get(run_id, ())
            if len(events) < len(had):  # a reader of an older snapshot never shrinks it
                return
            if had:
                self._drop(run_id)
            if len(events) > self._events // 4 or chars > self._chars // 4:
                return
            self._of[run_id] = events
            self._chars_of[run_id] = chars
            self._held += len(events)
            self._held_chars += chars
            while (
                len(self._of) > self._runs
                or self._held > self._events
                or self._held_chars > self._chars
            ):
                self._drop(next(iter(self._of)))

    def chars_of(self, run_id: str) -> int:
        with self._lock:
            return self._chars_of.get(run_id, 0)

    def _drop(self, run_id: str) -> None:
        self._held -= len(self._of.pop(run_id))
        self._held_chars -= self._chars_of.pop(run_id)


_ENTRIES = _Entries(512, 200_000)


def of_run(s: Session, run_id: str, now: float, upto: int | None = None) -> Timeline:
    """The run's timeline from its journal up to event `upto` (the run row's `last_seq` in
    this transaction's snapshot: the timeline and the run's status then agree even when a
    newer transaction's events were decoded already); None: all of it.

    Only the events past those decoded before are read (`_Entries`), as plain columns."""
    known = _ENTRIES.get(run_id)
    if upto is None or not known or known[-1].seq < upto:
        rows: list[JournalEntry] = list(known)
        chars = _ENTRIES.chars_of(run_id) if known else 0
        after = rows[-1].seq if rows else 0
        while True:
            page = run_queries.journal_tail(s, run_id, after, _PAGE)
            rows += entries(page)
            chars += sum(len(row.data or "") for row in page)
            if len(page) < _PAGE:
                break
            after = page[-1].seq
        known = tuple(rows)
        _ENTRIES.put(run_id, known, chars)
    if upto is not None and known and known[-1].seq > upto:
        known = known[: bisect.bisect_right(known, upto, key=lambda e: e.seq)]
    return build(known, now)


_PAGE = 1000
