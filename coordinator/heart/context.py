"""The values a ledger transaction works with, and nothing that decides: the run and action
states, the per-worker slot count, `Context`, what one transaction knows beyond the store
(the fleet snapshot, slot counts kept true through its own changes, the runs it touched),
and `RunKind`, what a kind of run adds to the ledger's rules.

A leaf of the heart: the rules (`ledger`, `outcomes`, `slots`) and the async side
(`dispatch`) import it; it imports none of them."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from coordinator.model.notes import Notes
from coordinator.model.orders import Order
from coordinator.store import runs as run_queries, workers as worker_queries
from coordinator.store.models import ActionRow, RunRow
from coordinator.streams.worker_index import FleetSnapshot, WorkerIndex
from shared.states import (
    ACTIVE as ACTIVE,
    DONE as DONE,
    FINISHED as FINISHED,
    IN_FLIGHT as IN_FLIGHT,
    STOPPED_FOR_A_PERSON as STOPPED_FOR_A_PERSON,
    ActionState,
    RunState,
)

# The states, by the names the ledger's rules read best (the vocabulary is shared.states).
RUNNING = RunState.RUNNING
WAITING_FOR_ENVIRONMENT = RunState.WAITING_FOR_ENVIRONMENT
WAITING_FOR_AUTHORITY = RunState.WAITING_FOR_AUTHORITY
SUCCEEDED = RunState.SUCCEEDED
FAILED = RunState.FAILED
HAND_BACK_TO_HUMAN = RunState.HAND_BACK_TO_HUMAN
CANCELLED = RunState.CANCELLED
NEEDS_APPROVAL = "needs_approval"
WORKERS_BUSY = "workers_busy"  # eligible workers are online, every slot of theirs in use

PENDING = ActionState.PENDING
DISPATCHED = ActionState.DISPATCHED
STARTED = ActionState.STARTED
UNKNOWN = ActionState.UNKNOWN
SKIPPED = ActionState.SKIPPED

# Results longer than this are archived: the journal keeps a preview and an exact reference.
ARCHIVE_OVER = 4096
PREVIEW_CHARS = 300
UNKNOWN_OUTCOME = "unknown_outcome"

# Per-worker concurrency: work units of one stage spread over the eligible workers.
MAX_PER_WORKER = 4


@dataclass(frozen=True)
class OpenStage:
    """A run's lowest stage with a unit not done, as this transaction last found it: the stage
    (None: every stage is done), its rows, when the stages before it were done and, when read
    ahead, the next stage and its rows."""

    stage: int | None
    rows: Sequence[ActionRow]
    ready: float
    added: int  # units added to the session when it was found (`run_queries.units_added`)
    next: tuple[int | None, Sequence[ActionRow]] | None = None


@dataclass
class Context:
    """What one transaction needs to know beyond the store."""

    lease_ttl: float
    max_attempts: int
    # The fleet as this replica knows it (kept in memory, see `worker_index`).
    workers: WorkerIndex
    # What each kind of run adds to the rules (research, desktop, goal), given at wiring.
    kinds: Mapping[str, RunKind] = field(default_factory=dict)
    now: float = field(default_factory=time.time)
    touched: set[str] = field(default_factory=set)  # runs whose journal grew
    stopped: set[str] = field(default_factory=set)  # runs that left the active states
    notes: Notes = field(default_factory=Notes)  # for the metrics, once committed
    # Runs this transaction put in line for a worker slot (insertion-ordered): each is tried
    # at least once, so that its state says why it waits.
    queued: dict[str, None] = field(default_factory=dict)
    # A slot was freed or a worker came (back): runs in line may go on now.
    capacity_changed: bool = False
    # The fleet as this transaction sees it, taken once however many actions it routes.
    _fleet: FleetSnapshot | None = None
    # Attempts in flight per worker, kept true through this transaction's own changes (`move`).
    _busy: dict[str, int] | None = None
    _serving: frozenset[str] = frozenset()  # online and active: their slots count
    _free: int = 0
    _positions: int = 0
    # Each run's open stage as last read in this transaction (`open_stage`).
    _stages: dict[str, OpenStage] = field(default_factory=dict)

    def reset(self) -> None:
        """Forget what an earlier try of the transaction read (it was rolled back)."""
        self._fleet = self._busy = None
        self.now = time.time()
        self.notes = Notes()
        self.queued = {}
        self.stopped = set()
        self.capacity_changed = False
        self._positions = 0
        self._stages = {}

    def fleet(self, s: Session) -> FleetSnapshot:
        """Enrolled workers, from memory: no store read, whatever the fleet's size."""
        if self._fleet is None:
            self._fleet = self.workers.snapshot(self.now)
        return self._fleet

    def is_online(self, s: Session, worker_id: str) -> bool:
        """Whether the worker streams to a live replica now, read from the store: for checks
        of one named worker (desktop control, rotation) that must not act on a stale view."""
        return worker_queries.is_online(s, worker_id, self.now)

    def busy(self, s: Session) -> dict[str, int]:
        """Attempts in flight per worker (workers with none are absent).

        Read from the store in each transaction, never carried over: a rolled-back try
        forgets it with everything else (`reset`), so no count can drift from the ledger.
        The read covers the attempts in flight, not the fleet, and `move` keeps it true
        through the transaction's own changes.
        """
        if self._busy is None:
            # The ledger's own changes must be in the count: a batch runs without autoflush,
            # and a receipt it applied would otherwise still count as a slot in use.
            s.flush()
            self._busy = run_queries.in_flight_counts(s)
            self._serving = self.fleet(s).serving
            self._free = MAX_PER_WORKER * len(self._serving) - sum(
                min(n, MAX_PER_WORKER) for w, n in self._busy.items() if w in self._serving
            )
        return self._busy

    def free_slots(self, s: Session) -> int:
        """Free slots on online, active workers (any capability): 0 means no run can start."""
        self.busy(s)
        return self._free

    def next_position(self) -> float:
        """A place at the back of the line, after every place given out before."""
        self._positions += 1
        return self.now + self._positions * 1e-6

    def kind(self, run: RunRow) -> RunKind:
        return self.kinds.get(run.kind, PLAN)

    def _room(self, worker_id: str) -> int:
        assert self._busy is not None
        return max(0, MAX_PER_WORKER - self._busy.get(worker_id, 0))

    def slot_changed(self, worker_id: str, delta: int) -> None:
        """An attempt took (+1) or left (-1) a slot of this worker."""
        if delta < 0:
            self.capacity_changed = True
        if self._busy is None or not worker_id:
            return
        before = self._room(worker_id)
        self._busy[worker_id] = max(0, self._busy.get(worker_id, 0) + delta)
        if worker_id in self._serving:
            self._free += self._room(worker_id) - before


# What a kind of run adds to the ledger's rules, passed in at wiring (`app/server.py`). A plan
# run needs nothing beyond the ledger. Research picks its sources when the search's receipt
# arrives, chooses routes itself and writes a report when every unit is done; a desktop or
# goal run stays open between actions, advances itself and decides what a failure means. The
# dispatcher puts the kinds on every transaction's `Context`, so no module changes the ledger
# when it is imported. (The hooks take the `Context` that holds them: one module for both.)
ReceiptHook = Callable[[Session, RunRow, ActionRow, Any, Context], None]
# A completion hook may return the run's stop reason (research: why it found no evidence).
CompletionHook = Callable[[Session, RunRow, Sequence[ActionRow], Context], str | None]
# A route hook that settles a unit without running it marks it SKIPPED and returns
# (None, SKIPPED, why); the run moves on.
RouteHook = Callable[[Session, RunRow, ActionRow, Context], tuple[str | None, str, str]]
AdvanceHook = Callable[[Session, RunRow, Context], list[Order]]
FailureHook = Callable[[Session, RunRow, ActionRow, Context], list[Order]]


@dataclass(frozen=True)
class RunKind:
    """The steps a kind of run adds; each absent one is the ledger's plain rule."""

    on_receipt: ReceiptHook | None = None  # after a unit's successful receipt is recorded
    on_completion: CompletionHook | None = None  # when every unit is done, before SUCCEEDED
    route: RouteHook | None = None  # choose the worker for a unit
    advance: AdvanceHook | None = None  # the run advances itself (it stays open)
    on_failure: FailureHook | None = None  # what a failed unit means for the run


PLAN = RunKind()
