"""The per-run journal: append-only, ordered by sequence number, hash-chained.

Each event holds the hash of the one before, so `verify` finds an edited, removed or
reordered event; receipts carry their own content hash, checked on every read.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.orm import Session

from coordinator.store import quotas, runs as run_queries
from coordinator.store.models import JournalRow, ReceiptRow, RunRow
from shared.errors import DataIntegrityError
from shared.receipts import content_hash, decode_result, encode_result

GENESIS = "0" * 64


def event_hash(prev_hash: str, run_id: str, seq: int, kind: str, at: float, data: str) -> str:
    material = f"{prev_hash}\n{run_id}\n{seq}\n{kind}\n{at!r}\n{data}"
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


def append(s: Session, run: RunRow, kind: str, data: dict[str, Any]) -> int:
    """Add one event to the run's journal (the run row must be locked); returns its seq."""
    seq = run.last_seq + 1
    at = time.time()
    text = encode_result(data)
    prev = run.last_hash or GENESIS
    digest = event_hash(prev, run.id, seq, kind, at, text)
    s.add(
        JournalRow(
            run_id=run.id,
            seq=seq,
            kind=kind,
            at=at,
            data=text,
            prev_hash=prev,
            hash=digest,
            trace_id=run.trace_id,
        )
    )
    run.last_seq = seq
    run.last_hash = digest
    run.updated_at = at
    quotas.charge(s, run.owner_id, len(text))  # ASCII: characters are bytes
    return seq


def read_receipt(row: ReceiptRow) -> Any:
    """The receipt's decoded body, after checking it against its stored content hash."""
    if content_hash(row.body) != row.sha256:
        raise DataIntegrityError(
            f"receipt {row.id} does not match its content hash: the stored receipt was altered"
        )
    return decode_result(row.body)


@dataclass(frozen=True)
class Verification:
    events: int
    receipts: int
    problems: tuple[str, ...]


def verify(s: Session, run: RunRow) -> Verification:
    """Walk the chain from the first event and check every receipt's content hash."""
    problems: list[str] = []
    prev = GENESIS
    expected_seq = 1
    events = 0
    after = 0
    while True:
        page = run_queries.journal_after(s, run.id, after, 1000)
        if not page:
            break
        for row in page:
            events += 1
            if row.seq != expected_seq:
                problems.append(f"event {expected_seq} is missing (next is {row.seq})")
            if row.prev_hash != prev:
                problems.append(f"event {row.seq} does not follow the event before it")
            if (
                event_hash(row.prev_hash, row.run_id, row.seq, row.kind, row.at, row.data)
                != row.hash
            ):
                problems.append(f"event {row.seq} ({row.kind}) was altered after it was written")
            prev = row.hash
            expected_seq = row.seq + 1
            after = row.seq
    if events != run.last_seq or (run.last_hash and prev != run.last_hash):
        problems.append(f"the run's head says {run.last_seq} events; the journal holds {events}")
    receipts: Sequence[ReceiptRow] = run_queries.receipts_of(s, run.id)
    for receipt in receipts:
        if content_hash(receipt.body) != receipt.sha256:
            problems.append(f"receipt {receipt.id} does not match its content hash")
    return Verification(events, len(receipts), tuple(problems))


E = TypeVar("E", bound=asyncio.Event)


class StopWait(asyncio.Event):
    """A waiter for a run's end. `view` is what the transaction that stopped the run built for
    its waiters on this replica; None when it was stopped elsewhere (another replica) or when
    the waiter subscribed too late to be seen: the waiter then reads the run itself."""

    def __init__(self) -> None:
        super().__init__()
        self.view: Any = None


class JournalBus:
    """Wakes watchers of a run when its journal grows on this replica, and waiters for a run's
    end when it stops (they need no wake-up for every start and receipt on the way).

    Watchers also poll the store, so a missed or remote wake-up only delays them.
    """

    def __init__(self) -> None:
        self._events: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._stops: dict[str, set[StopWait]] = defaultdict(set)
        # Builds, in the transaction that stops a run, the view its waiters are handed (wired
        # by `coordinator.server`: `runs.stopped_view`); a waiter then answers without a read.
        self.stop_view: Callable[[Session, str], Any] | None = None

    def views_of_stops(self, s: Session, stopped: Collection[str]) -> dict[str, Any]:
        """The views of the runs in `stopped` that have waiters here, read in the transaction
        that stopped them. Called on a store thread: only membership of the waiters' map is
        read, which the event loop changes in single dictionary operations."""
        build = self.stop_view
        if build is None:
            return {}
        return {run_id: build(s, run_id) for run_id in stopped if run_id in self._stops}

    def notify(
        self,
        run_ids: Sequence[str] | set[str],
        stopped: Sequence[str] | set[str] | None = None,
        views: Mapping[str, Any] | None = None,
    ) -> None:
        """`run_ids` grew; `stopped` (by default: any of them, when not known) stopped, and
        `views` are what their waiters are handed (committed by the caller)."""
        for run_id in run_ids:
            for event in self._events.get(run_id, ()):
                event.set()
        for run_id in run_ids if stopped is None else stopped:
            view = views.get(run_id) if views else None
            for waiter in self._stops.get(run_id, ()):
                if view is not None:
                    waiter.view = view
                waiter.set()

    def subscribe(self, run_id: str) -> asyncio.Event:
        event = asyncio.Event()
        self._events[run_id].add(event)
        return event

    def subscribe_stop(self, run_id: str) -> StopWait:
        """Wait for the run's end only, not for each event on the way."""
        waiter = StopWait()
        self._stops[run_id].add(waiter)
        return waiter

    def unsubscribe(self, run_id: str, event: asyncio.Event) -> None:
        _discard(self._events, run_id, event)
        if isinstance(event, StopWait):
            _discard(self._stops, run_id, event)


def _discard(subscribers: dict[str, set[E]], run_id: str, event: E) -> None:
    found = subscribers.get(run_id)
    if found is not None:
        found.discard(event)
        if not found:
            del subscribers[run_id]
