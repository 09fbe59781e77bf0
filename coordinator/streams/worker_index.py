"""The fleet as routing sees it, kept in memory by each replica.

A ledger transaction that routes work used to read every worker, its presence and its parsed
advertisement from the store; now it takes a snapshot of this index: the enrolled workers with
their labels, state, advertisement (parsed once per connect) and the replica holding their
stream. The index changes when a worker connects or disconnects, is drained, undrained or
revoked, on whichever replica that happens:

- this replica's own changes are read back (`refresh`) right after their commit and before
  anything that relies on them goes on (a connect's `on_connect`, an undrain's line service);
- other replicas' changes arrive as `NOTIFY deskfleet_workers` on PostgreSQL (ids); every
  (re)established LISTEN, and every tenth relay beat, reads the whole fleet again, so a lost
  notification only delays a change;
- replica leases come with each relay beat: a worker is online while the replica named in its
  presence row renews its lease, and only if it connected after that replica's process started
  (a restarted replica clears the rows of its previous process).

Refreshes run one at a time, each read after the change it covers committed, so a later
refresh never applies an older state than an earlier one. Busy counts are not kept here: they
are read from the store in each transaction (`ledger.Context.busy`).

The fleet's counts (online by replica, and offering each capability) are kept as each view
changes, so that a status answers them without reading or scanning the fleet.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from coordinator.model.workers import WorkerView
from coordinator.store import Database, workers as worker_queries
from shared.advertisement import Advertisement
from shared.errors import DeskfleetError
from shared.local_kill import LocalKill

log = logging.getLogger(__name__)

# Distinct route shapes (capability, labels, app) whose eligible workers a snapshot remembers;
# owners choose labels freely, so the memory is bounded.
ELIGIBLE_CACHE = 256
RETRY_AFTER = 1.0
# More changed workers than this at once (a connect storm) are read as the whole fleet: one
# plain query instead of an IN list past what the store takes as parameters.
FULL_READ_OVER = 1000


@dataclass(frozen=True)
class Lease:
    expires_at: float
    started_at: float  # of the replica's current process: older presence rows are stale


@dataclass(frozen=True)
class _Entry:
    row: worker_queries.RoutingRow
    advertisement: Advertisement


@dataclass(frozen=True)
class ReplicaCounts:
    """Workers online through one replica, and those of them offering each capability."""

    replica: str
    online: int
    headless: int
    computer_use: int


RouteKey = tuple[str, tuple[tuple[str, str], ...], str]


class FleetSnapshot:
    """The fleet at one moment: immutable, shared by the transactions that take it."""

    def __init__(self, views: dict[str, WorkerView]) -> None:
        self._views = views
        self._eligible: dict[RouteKey, tuple[WorkerView, ...]] = {}
        online = [v for v in views.values() if v.online]
        self.online = len(online)
        # Online and active: their slots count as capacity, whatever their capabilities.
        self.serving = frozenset(v.id for v in online if v.state == "active")

    def __iter__(self) -> Iterator[WorkerView]:
        return iter(self._views.values())

    def __len__(self) -> int:
        return len(self._views)

    def get(self, worker_id: str) -> WorkerView | None:
        return self._views.get(worker_id)

    def eligible(self, capability: str, labels: dict[str, str], app: str) -> tuple[WorkerView, ...]:
        """Online, active workers offering `capability` (if any), carrying `labels` and
        advertising research app `app` (if any), by id. Computed once per snapshot and route."""
        key: RouteKey = (capability, tuple(sorted(labels.items())), app)
        found = self._eligible.get(key)
        if found is None:
            found = tuple(
                sorted(
                    (v for v in self._views.values() if routable(v, capability, labels, app)),
                    key=lambda v: v.id,
                )
            )
            if len(self._eligible) >= ELIGIBLE_CACHE:
                self._eligible.clear()
            self._eligible[key] = found
        return found


def routable(view: WorkerView, capability: str, labels: dict[str, str], app: str) -> bool:
    """Whether new work of this route may go to the worker now (busy counts aside)."""
    return (
        view.online
        and view.state == "active"
        and all(view.labels.get(k) == v for k, v in labels.items())
        and (not capability or view.offers(capability))
        and (not app or app in view.advertisement.research_apps)
    )


class WorkerIndex:
    """Enrolled workers in memory. Every method may be called from a store thread; the ones
    taking a session read the store (`read`) inside that session's transaction."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._views: dict[str, WorkerView] = {}
        self._leases: dict[str, Lease] = {}
        self._live: frozenset[str] = frozenset()  # replicas whose lease ran at the last look
        self._snapshot: FleetSnapshot | None = None
        # replica -> [online, headless, computer_use] of the views online there (a replica
        # with none online has no entry)
        self._tally: dict[str, list[int]] = {}

    def snapshot(self, now: float) -> FleetSnapshot:
        """The fleet as of the last applied change, with online judged at `now`."""
        with self._lock:
            self._judge_leases(now)
            if self._snapshot is None:
                self._snapshot = FleetSnapshot(dict(self._views))
            return self._snapshot

    def counts(self, now: float) -> list[ReplicaCounts]:
        """Workers online by replica, and those offering each capability, judged at `now`:
        kept as views change, so this costs the same whatever the fleet's size."""
        with self._lock:
            self._judge_leases(now)
            return [ReplicaCounts(r, *tally) for r, tally in sorted(self._tally.items())]

    def read(self, s: Session, worker_ids: Sequence[str] | None = None) -> None:
        """Read these workers (None: the whole fleet, and the replicas' leases) again."""
        rows = worker_queries.routing_rows(s, worker_ids)
        with self._lock:
            if worker_ids is None:
                known = {w: e.row for w, e in self._entries.items()}
            else:
                known = {w: self._entries[w].row for w in worker_ids if w in self._entries}
        # An advertisement changes only with a connect (a new session): only those are parsed.
        new_sessions = [
            r.id for r in rows if r.id not in known or known[r.id].session_id != r.session_id
        ]
        adverts = worker_queries.advertisements(s, new_sessions) if new_sessions else {}
        with self._lock:
            seen = set()
            for row in rows:
                seen.add(row.id)
                old = self._entries.get(row.id)
                if old is not None and old.row == row:
                    continue
                if row.id in adverts:
                    advertisement = Advertisement.from_json(adverts[row.id])
                else:
                    advertisement = old.advertisement if old is not None else Advertisement()
                entry = _Entry(row, advertisement)
                self._entries[row.id] = entry
                self._put(row.id, self._view(entry))
                self._snapshot = None
            asked = set(self._entries) if worker_ids is None else set(worker_ids)
            for worker_id in (asked - seen) & set(self._entries):
                del self._entries[worker_id]
                self._put(worker_id, None)
                self._snapshot = None
        if worker_ids is None:
            self.set_leases(worker_queries.replica_leases(s))

    def set_leases(self, leases: Iterable[tuple[str, float, float]]) -> None:
        """The replicas' leases as of a relay beat: (name, expires at, process started at)."""
        with self._lock:
            fresh = {name: Lease(expires, started) for name, expires, started in leases}
            changed = {
                name
                for name in fresh.keys() | self._leases.keys()
                if (old := self._leases.get(name)) is None
                or (new := fresh.get(name)) is None
                or old.started_at != new.started_at
            }
            self._leases = fresh
            if changed:
                self._restate(changed, self._live)

    def _judge_leases(self, now: float) -> None:
        """Judge again the workers of replicas whose lease lapsed or ran again since the last
        look. Called with the lock held."""
        live = frozenset(r for r, lease in self._leases.items() if lease.expires_at > now)
        if live != self._live:
            self._restate(live ^ self._live, live)

    def _restate(self, replicas: set[str] | frozenset[str], live: frozenset[str]) -> None:
        """Judge again the workers streaming to these replicas. Called with the lock held."""
        self._live = live
        for worker_id, entry in self._entries.items():
            if entry.row.replica in replicas:
                self._put(worker_id, self._view(entry))
        self._snapshot = None

    def _put(self, worker_id: str, view: WorkerView | None) -> None:
        """Set (None: remove) a worker's view, and move the counts with it. Called with the
        lock held."""
        old = self._views.pop(worker_id, None)
        if old is not None and old.online:
            self._count(old, -1)
        if view is not None:
            self._views[worker_id] = view
            if view.online:
                self._count(view, 1)

    def _count(self, view: WorkerView, sign: int) -> None:
        tally = self._tally.setdefault(view.replica, [0, 0, 0])
        tally[0] += sign
        tally[1] += sign * view.offers("headless")
        tally[2] += sign * view.offers("computer_use")
        if not tally[0]:
            del self._tally[view.replica]

    def _view(self, entry: _Entry) -> WorkerView:
        """Called with the lock held."""
        row = entry.row
        lease = self._leases.get(row.replica) if row.replica else None
        online = (
            lease is not None
            and row.replica in self._live
            and row.connected_at >= lease.started_at
            and row.state != "revoked"
        )
        return WorkerView(
            id=row.id,
            name=row.name,
            labels=dict(row.labels),
            state=row.state,
            advertisement=entry.advertisement,
            allowed_capabilities=tuple(row.allowed_capabilities),
            enrolled_at=row.enrolled_at,
            online=online,
            last_heartbeat=row.connected_at if row.replica else None,
            lease_expires_at=lease.expires_at if lease is not None else None,
            replica=row.replica if online else "",
            local_kill=row.local_kill if online else LocalKill(),
        )


@dataclass
class _Refresh:
    ids: set[str] | None  # None: the whole fleet
    done: list[asyncio.Future[None]] = field(default_factory=list)


class IndexUpdates:
    """Brings the index up to date, one store read at a time, on the event loop's side."""

    def __init__(self, db: Database, index: WorkerIndex) -> None:
        self._db = db
        self.index = index
        self._pending: _Refresh | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> IndexUpdates:
        await self._db.read(self.index.read)
        self._task = asyncio.create_task(self._loop(), name="worker-index")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def mark(self, worker_ids: Iterable[str] | None) -> None:
        """Read these workers (None: all) from the store again, soon."""
        self._request(worker_ids, None)

    async def refresh(self, worker_ids: Iterable[str] | None) -> None:
        """Read these workers (None: all) from the store again; returns once that read is
        applied. Requests made while a read is under way are merged into the next one."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._request(worker_ids, done)
        await done

    async def counts(self) -> list[ReplicaCounts]:
        """The fleet's counts once every change this replica was told of before now is
        applied: a status that has just read a disconnect's commit counts it too."""
        await self.refresh(())
        return self.index.counts(time.time())

    def _request(self, worker_ids: Iterable[str] | None, done: asyncio.Future[None] | None) -> None:
        pending = self._pending
        if pending is None:
            pending = self._pending = _Refresh(set())
        if worker_ids is None:
            pending.ids = None
        elif pending.ids is not None:
            pending.ids.update(worker_ids)
        if done is not None:
            pending.done.append(done)
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            todo, self._pending = self._pending, None
            if todo is None:
                continue
            try:
                if todo.ids is None or len(todo.ids) > FULL_READ_OVER:
                    await self._db.read(self.index.read)
                elif todo.ids:
                    await self._db.read(self.index.read, sorted(todo.ids))
            except DeskfleetError as exc:
                log.warning("could not read worker changes (trying again): %s", exc)
                for done in todo.done:
                    if not done.done():
                        done.set_exception(exc)
                # Kept for the next try: the index must not miss a change it was told of.
                self.mark(todo.ids)
                await asyncio.sleep(RETRY_AFTER)
                continue
            for done in todo.done:
                if not done.done():
                    done.set_result(None)
