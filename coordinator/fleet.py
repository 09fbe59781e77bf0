"""The enrolled fleet as admins see it: status counts, worker rows, revoke and drain."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session

from coordinator import audit, capabilities
from coordinator.orders import Order, RotateOrder
from coordinator.presence import Presence
from coordinator.principals import Authenticator

if TYPE_CHECKING:
    from coordinator.dispatch import Dispatcher
    from coordinator.ledger import Context
from coordinator.store import Database
from coordinator.store import workers as worker_queries
from coordinator.store.models import PresenceRow, WorkerRow
from shared.advertisement import Advertisement, Capability
from shared.errors import FailedPreconditionError, NotFoundError, RevokedError


@dataclass(frozen=True)
class WorkerView:
    id: str
    name: str
    labels: dict[str, str]
    state: str
    advertisement: Advertisement
    allowed_capabilities: tuple[str, ...]
    enrolled_at: float
    online: bool
    last_heartbeat: float | None
    lease_expires_at: float | None
    replica: str

    @property
    def capabilities(self) -> tuple[Capability, ...]:
        """Every known capability as it stands for routing: measured, and granted by the token."""
        out = []
        for name in capabilities.ALL:
            measured = self.advertisement.capability(name)
            if measured is None:
                out.append(Capability(name, False, "not reported (the worker has not connected)"))
            elif (
                measured.available
                and self.allowed_capabilities
                and (name not in self.allowed_capabilities)
            ):
                out.append(Capability(name, False, "not granted by the enrollment token"))
            else:
                out.append(measured)
        return tuple(out)

    def offers(self, capability: str) -> bool:
        """Whether new work needing `capability` may be routed here now."""
        if not self.online or self.state != "active":
            return False
        return any(c.name == capability and c.available for c in self.capabilities)


@dataclass(frozen=True)
class FleetStatus:
    headless_online: int
    computer_use_online: int
    workers: tuple[WorkerView, ...]


def view_of(worker: WorkerRow, presence: PresenceRow | None, now: float) -> WorkerView:
    online = presence is not None and presence.lease_expires_at > now and worker.state != "revoked"
    return WorkerView(
        id=worker.id,
        name=worker.name,
        labels=dict(worker.labels),
        state=worker.state,
        advertisement=Advertisement.from_json(worker.advertisement),
        allowed_capabilities=tuple(worker.allowed_capabilities),
        enrolled_at=worker.enrolled_at,
        online=online,
        last_heartbeat=presence.last_heartbeat_at if presence else None,
        lease_expires_at=presence.lease_expires_at if presence else None,
        replica=presence.replica if presence and online else "",
    )


class Fleet:
    def __init__(
        self, db: Database, presence: Presence, auth: Authenticator, dispatcher: Dispatcher
    ) -> None:
        self._db = db
        self._presence = presence
        self._auth = auth
        self._dispatcher = dispatcher

    async def status(self) -> FleetStatus:
        """Counts of workers that can take work now, read from the shared store."""
        workers = await self.list(include_revoked=False)
        return FleetStatus(
            headless_online=sum(w.offers(capabilities.HEADLESS) for w in workers),
            computer_use_online=sum(w.offers(capabilities.COMPUTER_USE) for w in workers),
            workers=tuple(workers),
        )

    async def list(self, *, include_revoked: bool) -> list[WorkerView]:
        now = time.time()
        rows = await self._db.read(
            worker_queries.workers_with_presence, include_revoked=include_revoked
        )
        return [view_of(w, p, now) for w, p in rows]

    async def get(self, worker_id: str) -> WorkerView:
        now = time.time()
        rows = await self._db.read(
            worker_queries.workers_with_presence, include_revoked=True, worker_id=worker_id
        )
        if not rows:
            raise NotFoundError(f"no worker {worker_id!r}")
        return view_of(*rows[0], now)

    async def revoke(self, worker_id: str, by: audit.Actor) -> WorkerView:
        """Refuse the worker's credential from now on and cut its stream at once."""

        def mark(s: Session) -> None:
            worker = worker_queries.worker_by_id(s, worker_id)
            if worker is None:
                raise NotFoundError(f"no worker {worker_id!r}")
            if worker.state != "revoked":
                worker_queries.set_state(s, worker_id, "revoked", revoked_at=time.time())
                audit.record(s, by, "worker.revoke", worker_id, name=worker.name)

        await self._db.write(mark)
        self._auth.forget(worker_id)
        self._presence.cut(worker_id, RevokedError(f"worker {worker_id} has been revoked"))
        return await self.get(worker_id)

    async def rotate(
        self, worker_id: str, by: audit.Actor, *, while_offline: bool = False
    ) -> WorkerView:
        """Ask the worker to replace its credential: at once on its stream, wherever it is
        connected, or, only if `while_offline` says so, in its next welcome.

        A welcome hands the new credential to whoever connects first with the current one, so
        rotating an offline worker is no remedy for a stolen credential: revoke and enroll."""

        def mark(s: Session, ctx: Context) -> list[Order]:
            worker = worker_queries.worker_by_id(s, worker_id)
            if worker is None:
                raise NotFoundError(f"no worker {worker_id!r}")
            if worker.state == "revoked":
                raise FailedPreconditionError(f"worker {worker_id} is revoked; enroll it again")
            online = worker_id in ctx.online(s)
            if not online and not while_offline:
                raise FailedPreconditionError(
                    f"worker {worker_id} is not connected: its new credential would go to"
                    " whoever next connects with the current one (if that may be stolen, revoke"
                    " the worker and enroll it again); to rotate anyway, use --while-offline"
                )
            worker.rotation_requested = True
            audit.record(
                s, by, "worker.rotate", worker_id, name=worker.name, while_offline=not online
            )
            return [RotateOrder(worker_id)]

        await self._dispatcher.run_unit(mark)
        return await self.get(worker_id)

    async def drain(self, worker_id: str, by: audit.Actor, *, draining: bool) -> WorkerView:
        def mark(s: Session) -> None:
            worker = worker_queries.worker_by_id(s, worker_id)
            if worker is None:
                raise NotFoundError(f"no worker {worker_id!r}")
            if worker.state == "revoked":
                raise FailedPreconditionError(f"worker {worker_id} is revoked; enroll it again")
            worker_queries.set_state(s, worker_id, "draining" if draining else "active")
            action = "worker.drain" if draining else "worker.undrain"
            audit.record(s, by, action, worker_id, name=worker.name)

        await self._db.write(mark)
        if not draining:
            # Its slots are free again: runs in line take them now, not at the next sweep.
            await self._dispatcher.capacity_added()
        return await self.get(worker_id)
