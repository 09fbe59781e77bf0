"""Presence: the worker streams this replica holds, and their leases in the shared store.

A worker is online while its lease in the store is unexpired. Heartbeats renew it; renewals
are gathered and written in one statement per flush. The store, not this replica's memory, is
what `status` reads, so other replicas see the same fleet.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from coordinator.settings import CoordinatorConfig
from coordinator.store import Database
from coordinator.store import runs as run_queries
from coordinator.store import workers as worker_queries
from shared.advertisement import Advertisement
from shared.errors import DeskfleetError, RevokedError
from shared.ids import new_id

log = logging.getLogger(__name__)

# Revocations made on another replica reach this one's streams through this periodic check.
REVOCATION_CHECK_EVERY = 1.0
STORE_WARNING_EVERY = 30.0


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

    def end(self, reason: DeskfleetError) -> None:
        if not self.ended.done():
            self.ended.set_result(reason)


class Presence:
    """Opens, renews and closes worker sessions; runs the lease flush loop while open."""

    def __init__(self, db: Database, config: CoordinatorConfig) -> None:
        self._db = db
        self._config = config
        self._sessions: dict[str, WorkerSession] = {}
        self._renewals: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None

    @property
    def connected(self) -> int:
        return len(self._sessions)

    async def __aenter__(self) -> Presence:
        self._task = asyncio.create_task(self._flush_loop(), name="presence-flush")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def open(self, worker_id: str, advertisement: Advertisement) -> WorkerSession:
        """Record the worker's advertisement and take its presence lease for a new session."""
        session = WorkerSession(worker_id, new_id("ses"))

        def claim(s: Session) -> None:
            worker_queries.set_advertisement(s, worker_id, advertisement.to_json())
            worker_queries.claim_presence(
                s,
                worker_id,
                self._config.replica,
                session.session_id,
                time.time(),
                self._config.lease_ttl,
            )

        await self._db.write(claim)
        previous = self._sessions.get(worker_id)
        if previous is not None:
            previous.end(DeskfleetError("superseded by a newer connection of the same worker"))
        self._sessions[worker_id] = session
        return session

    def connected_ids(self) -> frozenset[str]:
        return frozenset(self._sessions)

    def send(self, worker_id: str, order: object) -> bool:
        """Queue an order for the worker's stream on this replica; False if it is not here."""
        session = self._sessions.get(worker_id)
        if session is None or session.ended.done():
            return False
        session.outbox.put_nowait(order)
        return True

    def heartbeat(self, session: WorkerSession) -> None:
        self._renewals[session.worker_id] = session.session_id

    async def close(self, session: WorkerSession) -> None:
        """Forget a session whose stream ended and give up its lease at once."""
        if self._sessions.get(session.worker_id) is session:
            del self._sessions[session.worker_id]
        self._renewals.pop(session.worker_id, None)
        try:
            await self._db.write(
                worker_queries.release_presence, session.worker_id, session.session_id
            )
        except DeskfleetError as exc:
            # The lease lapses by itself; nothing is lost by not releasing it early.
            log.warning("could not release the lease of %s: %s", session.worker_id, exc)

    def cut(self, worker_id: str, reason: DeskfleetError) -> bool:
        """End this replica's stream of a worker, if it holds one."""
        session = self._sessions.get(worker_id)
        if session is None:
            return False
        session.end(reason)
        return True

    async def _flush_loop(self) -> None:
        last_check = 0.0
        failing_since: float | None = None
        last_warning = 0.0
        while True:
            await asyncio.sleep(self._config.lease_flush_interval)
            try:
                await self._flush()
                if time.monotonic() - last_check >= REVOCATION_CHECK_EVERY:
                    last_check = time.monotonic()
                    await self._cut_revoked()
            except DeskfleetError as exc:
                now = time.monotonic()
                failing_since = failing_since or now
                # One line when the store fails, then one every STORE_WARNING_EVERY seconds.
                if now - last_warning >= STORE_WARNING_EVERY:
                    last_warning = now
                    log.warning(
                        "cannot renew presence leases for %.0f s: %s", now - failing_since, exc
                    )
            else:
                if failing_since is not None:
                    log.info("presence leases renewed again")
                failing_since = None

    async def _flush(self) -> None:
        if not self._renewals:
            return
        batch, self._renewals = self._renewals, {}
        try:
            await self._db.write(_renew, list(batch.items()), time.time(), self._config.lease_ttl)
        except DeskfleetError:
            # Keep the renewals for the next flush (newer heartbeats win).
            self._renewals = {**batch, **self._renewals}
            raise

    async def _cut_revoked(self) -> None:
        if not self._sessions:
            return
        revoked = await self._db.read(worker_queries.revoked_among, list(self._sessions))
        for worker_id in revoked:
            self.cut(worker_id, RevokedError(f"worker {worker_id} has been revoked"))


def _renew(s: Session, renewals: list[tuple[str, str]], now: float, ttl: float) -> None:
    """Renew presence leases and, with them, the leases of the attempts those workers hold."""
    worker_queries.renew_leases(s, renewals, now, ttl)
    run_queries.renew_action_leases(s, [w for w, _ in renewals], now + ttl)
