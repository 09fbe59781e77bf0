"""The enrolled fleet as admins see it: status counts, worker rows, revoke and drain."""

from __future__ import annotations

import base64
import binascii
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session

from coordinator.model import capabilities
from coordinator.model.orders import Order, RotateOrder
from coordinator.model.workers import WorkerView, view_of
from coordinator.security import audit
from coordinator.security.principals import Authenticator
from coordinator.streams.presence import Presence

if TYPE_CHECKING:
    from coordinator.heart.context import Context
    from coordinator.heart.dispatch import Dispatcher
    from coordinator.streams.worker_index import IndexUpdates, ReplicaCounts
from coordinator.store import Database, replicas as replica_queries, workers as worker_queries
from shared.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    RevokedError,
)


@dataclass(frozen=True)
class WorkerPage:
    workers: tuple[WorkerView, ...]
    next_page_token: str  # empty on the last page


@dataclass(frozen=True)
class FleetStatus:
    """Counts over the whole fleet (by replica too), and one page of its workers."""

    headless_online: int
    computer_use_online: int
    workers: tuple[WorkerView, ...]
    next_page_token: str = ""
    online: int = 0
    replicas: tuple[ReplicaCounts, ...] = ()


DEFAULT_PAGE = 100
MAX_PAGE = 1000
_TOKEN_PREFIX = "w1."


def page_size(limit: int) -> int:
    """A request's `limit`: 0 means the default; more than MAX_PAGE is refused."""
    if limit < 0 or limit > MAX_PAGE:
        raise InvalidArgumentError(
            f"limit: between 1 and {MAX_PAGE} rows a page (0: {DEFAULT_PAGE})"
        )
    return limit or DEFAULT_PAGE


def page_token(enrolled_at: float, worker_id: str) -> str:
    """The opaque position after a worker, in the order pages walk (enrolled_at, id)."""
    raw = json.dumps([enrolled_at, worker_id], separators=(",", ":")).encode()
    return _TOKEN_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_page_token(token: str) -> tuple[float, str] | None:
    """The position a token names; None for the first page. A token this coordinator did not
    issue is refused."""
    if not token:
        return None
    refused = InvalidArgumentError(
        "page_token: not a token from a previous page (pass next_page_token back unchanged)"
    )
    if not token.startswith(_TOKEN_PREFIX) or len(token) > 400:
        raise refused
    body = token[len(_TOKEN_PREFIX) :]
    try:
        value = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (ValueError, binascii.Error) as exc:
        raise refused from exc
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not isinstance(value[0], int | float)
        or isinstance(value[0], bool)
        or not isinstance(value[1], str)
    ):
        raise refused
    return float(value[0]), value[1]


def worker_filter(
    *,
    include_revoked: bool = False,
    state: str = "",
    capability: str = "",
    replica: str = "",
    online: bool | None = None,
    text: str = "",
) -> worker_queries.WorkerFilter:
    """The filters of a worker list, checked: an unknown state or capability is refused."""
    if state and state not in STATES:
        raise InvalidArgumentError(f"state: one of {', '.join(STATES)} (got {state!r})")
    if capability and capability not in capabilities.ALL:
        raise InvalidArgumentError(
            f"capability: one of {', '.join(capabilities.ALL)} (got {capability!r})"
        )
    if len(replica) > 200:
        raise InvalidArgumentError("replica: a replica name is at most 200 characters")
    if len(text) > 200:
        raise InvalidArgumentError("text: at most 200 characters")
    return worker_queries.WorkerFilter(
        include_revoked, state, capability, replica, online, text.strip()
    )


STATES = ("active", "draining", "revoked")


class Fleet:
    def __init__(
        self,
        db: Database,
        presence: Presence,
        auth: Authenticator,
        dispatcher: Dispatcher,
        index: IndexUpdates,
    ) -> None:
        self._db = db
        self._presence = presence
        self._index = index
        self._auth = auth
        self._dispatcher = dispatcher

    async def status(self, limit: int = 0, token: str = "") -> FleetStatus:
        """The fleet's counts, from this replica's worker index (constant time, whatever the
        fleet's size), and one page of the enrolled workers from the store."""
        size, after = page_size(limit), parse_page_token(token)
        page = await self._db.read(
            lambda s: _page(s, worker_queries.WorkerFilter(), after, size, time.time())
        )
        # After the page: the counts then include every change the page shows of this replica.
        counts = await self._index.counts()
        return FleetStatus(
            headless_online=sum(c.headless for c in counts),
            computer_use_online=sum(c.computer_use for c in counts),
            workers=page.workers,
            next_page_token=page.next_page_token,
            online=sum(c.online for c in counts),
            replicas=tuple(counts),
        )

    async def page(
        self, where: worker_queries.WorkerFilter, limit: int = 0, token: str = ""
    ) -> WorkerPage:
        """One page of the workers `where` selects, in enrollment order."""
        size, after = page_size(limit), parse_page_token(token)
        return await self._db.read(lambda s: _page(s, where, after, size, time.time()))

    async def resolve(self, ref: str) -> str:
        """The id of the worker `ref` names: its id or its unique name (store.workers.resolve)."""
        row = await self._db.read(lambda s: worker_queries.resolve(s, ref, time.time()))
        return row.id

    async def get(self, ref: str) -> WorkerView:
        worker_id = await self.resolve(ref)
        now = time.time()
        rows = await self._db.read(
            worker_queries.workers_with_presence, include_revoked=True, worker_id=worker_id
        )
        if not rows:
            raise NotFoundError(f"no worker {worker_id!r}")
        return view_of(*rows[0], now)

    async def revoke(self, ref: str, by: audit.Actor) -> WorkerView:
        """Refuse the worker's credential from now on and cut its stream at once."""
        worker_id = await self.resolve(ref)

        def mark(s: Session) -> None:
            worker = worker_queries.worker_by_id(s, worker_id)
            if worker is None:
                raise NotFoundError(f"no worker {worker_id!r}")
            if worker.state != "revoked":
                worker_queries.set_state(s, worker_id, "revoked", revoked_at=time.time())
                audit.record(s, by, "worker.revoke", worker_id, name=worker.name)
                replica_queries.announce_workers(s, [worker_id])

        await self._db.write(mark)
        await self._index.refresh([worker_id])  # no new work for it from here on
        self._auth.forget(worker_id)
        self._presence.cut(worker_id, RevokedError(f"worker {worker_id} has been revoked"))
        return await self.get(worker_id)

    async def rotate(self, ref: str, by: audit.Actor, *, while_offline: bool = False) -> WorkerView:
        """Ask the worker to replace its credential: at once on its stream, wherever it is
        connected, or, only if `while_offline` says so, in its next welcome.

        A welcome hands the new credential to whoever connects first with the current one, so
        rotating an offline worker is no remedy for a stolen credential: revoke and enroll."""
        worker_id = await self.resolve(ref)

        def mark(s: Session, ctx: Context) -> list[Order]:
            worker = worker_queries.worker_by_id(s, worker_id)
            if worker is None:
                raise NotFoundError(f"no worker {worker_id!r}")
            if worker.state == "revoked":
                raise FailedPreconditionError(f"worker {worker_id} is revoked; enroll it again")
            online = ctx.is_online(s, worker_id)
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

    async def drain(self, ref: str, by: audit.Actor, *, draining: bool) -> WorkerView:
        worker_id = await self.resolve(ref)

        def mark(s: Session) -> None:
            worker = worker_queries.worker_by_id(s, worker_id)
            if worker is None:
                raise NotFoundError(f"no worker {worker_id!r}")
            if worker.state == "revoked":
                raise FailedPreconditionError(f"worker {worker_id} is revoked; enroll it again")
            worker_queries.set_state(s, worker_id, "draining" if draining else "active")
            action = "worker.drain" if draining else "worker.undrain"
            audit.record(s, by, action, worker_id, name=worker.name)
            replica_queries.announce_workers(s, [worker_id])

        await self._db.write(mark)
        await self._index.refresh([worker_id])
        if not draining:
            # Its slots are free again: runs in line take them now, not at the next sweep.
            await self._dispatcher.capacity_added()
        return await self.get(worker_id)


def _page(
    s: Session,
    where: worker_queries.WorkerFilter,
    after: tuple[float, str] | None,
    size: int,
    now: float,
) -> WorkerPage:
    rows, more = worker_queries.workers_page(s, where, after, size, now)
    views = tuple(view_of(w, p, now) for w, p in rows)
    token = page_token(views[-1].enrolled_at, views[-1].id) if more and views else ""
    return WorkerPage(views, token)
