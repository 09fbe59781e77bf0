"""Presence: the worker streams this replica holds, and what the shared store says of them.

A presence row is written when a worker's stream opens and removed when it ends; it names the
replica holding the stream. The worker is online while that replica's lease runs: the replica
renews one row (`replicas.lease_expires_at`, at every relay beat) for all its streams, so the
cost of staying online does not grow with the fleet. A dead worker is found by the stream
itself (HTTP/2 keepalive pings in gRPC's core, see `server.server_options`): its stream ends
and its row goes. A dead replica stops renewing its lease, and all its workers go offline
together when it lapses.

Connects and disconnects that arrive together are written in one transaction. The leases of
the attempts this replica's workers hold are renewed in one statement per interval, and
revocations made on other replicas arrive as a feed (workers revoked lately), not as a query
over every stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session

from coordinator.model import capabilities
from coordinator.model.orders import DispatchOrder
from coordinator.model.settings import CoordinatorConfig
from coordinator.store import Database, replicas as replica_queries, workers as worker_queries
from shared.advertisement import Advertisement
from shared.errors import DeskfleetError, RevokedError
from shared.ids import new_id
from shared.local_kill import LocalKill

if TYPE_CHECKING:
    from coordinator.streams.worker_index import IndexUpdates

log = logging.getLogger(__name__)

# Revocations made on another replica reach this one's streams through this periodic check.
REVOCATION_CHECK_EVERY = 1.0
# The check reads the workers revoked in this last window (wide enough for clock skew between
# replicas and for a check that failed a few times in a row).
REVOCATION_WINDOW = 60.0
STORE_WARNING_EVERY = 30.0
# Connects and disconnects written in one transaction, at most.
WRITE_BATCH = 500


class Sent(enum.Enum):
    """What became of an order given to `Presence.send`."""

    SENT = "queued on the worker's stream"
    NOT_HERE = "the worker has no open stream on this replica"
    # The worker's hello did not list the attempt, so its connect's reconcile accounts for it.
    CLAIMED_BEFORE_STREAM = "claimed before the worker's current stream opened"


@dataclass(eq=False)
class WorkerSession:
    """One live stream from a worker to this replica."""

    worker_id: str
    session_id: str
    ended: asyncio.Future[DeskfleetError] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    # Orders for the worker (dispatches, cancels, receipt verdicts); the stream's writer drains it.
    outbox: asyncio.Queue[object] = field(default_factory=asyncio.Queue)
    # The welcome asked the worker to rotate its credential.
    rotate_credential: bool = False
    # When this replica began routing the worker's orders to this stream (the ledger's clock,
    # `time.time()`): attempts claimed earlier belong to an older stream (see `send`).
    opened_at: float = 0.0
    # The worker's own kill switch as this stream last reported it.
    local_kill: LocalKill = field(default_factory=LocalKill)

    def end(self, reason: DeskfleetError) -> None:
        if not self.ended.done():
            self.ended.set_result(reason)


@dataclass
class _Claim:
    claim: worker_queries.PresenceClaim
    done: asyncio.Future[bool]


class Presence:
    """Opens and closes worker sessions (written in batches); renews what this replica holds."""

    def __init__(self, db: Database, config: CoordinatorConfig, index: IndexUpdates) -> None:
        self._db = db
        self._config = config
        self._index = index
        self._sessions: dict[str, WorkerSession] = {}
        self._claims: list[_Claim] = []
        self._releases: list[tuple[str, str]] = []
        # (worker, session) -> the worker's own kill switch, as last reported, not yet written
        self._local_kills: dict[tuple[str, str], LocalKill] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def connected(self) -> int:
        return len(self._sessions)

    async def __aenter__(self) -> Presence:
        self._tasks = [
            asyncio.create_task(self._write_loop(), name="presence-writes"),
            asyncio.create_task(self._renew_loop(), name="presence-renew"),
        ]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def open(
        self, worker_id: str, advertisement: Advertisement, local_kill: LocalKill | None = None
    ) -> WorkerSession:
        """Record the worker's advertisement, its own kill switch and its presence for a new
        session (written with the other connects of the moment, in one transaction)."""
        session = WorkerSession(worker_id, new_id("ses"), local_kill=local_kill or LocalKill())
        claim = _Claim(
            worker_queries.PresenceClaim(
                worker_id,
                session.session_id,
                advertisement.to_json(),
                frozenset(
                    name
                    for name in capabilities.ALL
                    if (c := advertisement.capability(name)) is not None and c.available
                ),
                local_kill or LocalKill(),
            ),
            asyncio.get_running_loop().create_future(),
        )
        previous = self._sessions.get(worker_id)
        if previous is not None:
            previous.end(DeskfleetError("superseded by a newer connection of the same worker"))
        # Taking orders before the presence is written: routing can choose the worker on this
        # session only after that write, so every attempt claimed on it finds this stream, and
        # one claimed earlier is, by its time, an older stream's (`send`). No await between
        # these two.
        session.opened_at = time.time()
        self._sessions[worker_id] = session
        self._claims.append(claim)
        self._wake.set()
        try:
            session.rotate_credential = await claim.done
        except BaseException:
            if self._sessions.get(worker_id) is session:
                del self._sessions[worker_id]
            raise
        return session

    def report_local_kill(self, session: WorkerSession, state: LocalKill) -> bool:
        """The worker says its own kill switch changed: written with the next batch (the last
        report of a stream wins). False when nothing changed (a worker repeating itself costs
        nothing) or the stream was superseded (its newer stream's hello said what holds)."""
        if self._sessions.get(session.worker_id) is not session or state == session.local_kill:
            return False
        session.local_kill = state
        self._local_kills[(session.worker_id, session.session_id)] = state
        self._wake.set()
        return True

    def connected_ids(self) -> frozenset[str]:
        return frozenset(self._sessions)

    def send(self, worker_id: str, order: object) -> Sent:
        """Queue an order for the worker's stream on this replica, or say why it was not.

        An attempt claimed before the stream opened is not sent on it: the worker's hello did
        not list it, so the reconcile of this connect sends the attempt again, and sending this
        one as well would run the action twice. Both sides compare the same two values (the
        claim's `dispatched_at`, the session's `opened_at`), so exactly one of them sends it,
        whatever the order in which they run."""
        session = self._sessions.get(worker_id)
        if session is None or session.ended.done():
            return Sent.NOT_HERE
        if isinstance(order, DispatchOrder) and 0 < order.dispatched_at < session.opened_at:
            return Sent.CLAIMED_BEFORE_STREAM
        session.outbox.put_nowait(order)
        return Sent.SENT

    async def close(self, session: WorkerSession) -> None:
        """Forget a session whose stream ended; its presence row goes with the next write
        (kept and tried again while the store fails: until then the worker counts online)."""
        if self._sessions.get(session.worker_id) is session:
            del self._sessions[session.worker_id]
        self._releases.append((session.worker_id, session.session_id))
        self._wake.set()

    def cut(self, worker_id: str, reason: DeskfleetError) -> bool:
        """End this replica's stream of a worker, if it holds one."""
        session = self._sessions.get(worker_id)
        if session is None:
            return False
        session.end(reason)
        return True

    # ------------------------------------------------------------------------------ writes

    async def _write_loop(self) -> None:
        failing = _Failing("cannot record worker connects and disconnects")
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._claims or self._releases or self._local_kills:
                try:
                    await self._write_batch()
                except DeskfleetError as exc:
                    failing.warn(exc)
                    await asyncio.sleep(self._config.lease_flush_interval)
                else:
                    failing.recovered()

    async def _write_batch(self) -> None:
        claims, self._claims = self._claims[:WRITE_BATCH], self._claims[WRITE_BATCH:]
        releases, self._releases = self._releases[:WRITE_BATCH], self._releases[WRITE_BATCH:]
        local, self._local_kills = self._local_kills, {}  # one per stream at most
        reports = [(w, sid, state) for (w, sid), state in local.items()]
        config = self._config

        changed = sorted(
            {w for w, _ in releases} | {c.claim.worker_id for c in claims} | {w for w, _ in local}
        )

        def unit(s: Session) -> dict[str, bool]:
            worker_queries.release_presences(s, releases)
            rotate = worker_queries.claim_presences(
                s, [c.claim for c in claims], config.replica, time.time(), config.lease_ttl
            )
            worker_queries.set_local_kills(s, reports)
            replica_queries.announce_workers(s, changed)
            return rotate

        try:
            rotate = await self._db.write(unit)
        except DeskfleetError as exc:
            # The connects fail (their streams end and the workers retry); the disconnects
            # and the kill switch reports are tried again (a newer report wins), or the
            # worker would stay online on a live replica, or show a stale switch.
            self._releases = releases + self._releases
            self._local_kills = {**local, **self._local_kills}
            for c in claims:
                if not c.done.done():
                    c.done.set_exception(exc)
            raise
        # Routing sees the connects before their welcome goes on to `on_connect`, which gives
        # the new slots to the runs in line. A failed read is tried again by the index itself.
        with contextlib.suppress(DeskfleetError):
            await self._index.refresh(changed)
        for c in claims:
            if c.done.done():  # the stream went away while its connect was being written
                self._releases.append((c.claim.worker_id, c.claim.session_id))
            else:
                c.done.set_result(rotate.get(c.claim.worker_id, False))

    # --------------------------------------------------------------- leases and revocations

    async def _renew_loop(self) -> None:
        failing = _Failing("cannot renew the leases of attempts held by this replica's workers")
        last_renewal = last_check = 0.0
        while True:
            await asyncio.sleep(min(REVOCATION_CHECK_EVERY, self._config.heartbeat_interval))
            now = time.monotonic()
            try:
                if self._sessions and now - last_renewal >= self._config.heartbeat_interval:
                    await self._renew_action_leases()
                    last_renewal = now
                if self._sessions and now - last_check >= REVOCATION_CHECK_EVERY:
                    await self._cut_revoked()
                    last_check = now
            except DeskfleetError as exc:
                failing.warn(exc)
            else:
                failing.recovered()

    async def _renew_action_leases(self) -> None:
        until = time.time() + self._config.lease_ttl
        await self._db.write(replica_queries.renew_held_action_leases, self._config.replica, until)

    async def _cut_revoked(self) -> None:
        revoked = await self._db.read(worker_queries.revoked_since, time.time() - REVOCATION_WINDOW)
        for worker_id in revoked:
            self.cut(worker_id, RevokedError(f"worker {worker_id} has been revoked"))


class _Failing:
    """One warning when the store starts failing, then one every STORE_WARNING_EVERY seconds,
    and one line when it works again."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._since: float | None = None
        self._last_warning = 0.0

    def warn(self, exc: DeskfleetError) -> None:
        now = time.monotonic()
        self._since = self._since or now
        if now - self._last_warning >= STORE_WARNING_EVERY:
            self._last_warning = now
            log.warning("%s for %.0f s: %s", self._what, now - self._since, exc)

    def recovered(self) -> None:
        if self._since is not None:
            log.info("the store answers again (%s)", self._what.removeprefix("cannot "))
        self._since = None
