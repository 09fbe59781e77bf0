"""The relay: orders for workers whose stream another replica holds, and run wake-ups,
carried between replicas through the shared store.

An order that replica B decides for a worker streaming to replica A is written to
`deliveries` in the same transaction as the decision, so it exists exactly when the decision
does. On PostgreSQL a NOTIFY, sent by the server at commit, wakes A at once; every replica
also polls its deliveries, so a lost notification (or a dropped LISTEN connection) only delays
an order. No replica ever waits for another: reads come from the store.

The relay also keeps this replica's row in `replicas` fresh; a replica whose row goes stale is
dead, and the others take over what only it was doing (goal loops).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from coordinator.model.orders import (
    CancelOrder,
    DispatchOrder,
    KillPush,
    Order,
    ReceiptVerdict,
    RotateOrder,
)
from coordinator.model.settings import CoordinatorConfig
from coordinator.store import (
    Database,
    desktop as desktop_queries,
    replicas as queries,
    workers as worker_queries,
)
from coordinator.store.engine import Dialect
from coordinator.store.models import DeliveryRow, ReplicaRow, RunRow
from coordinator.streams.journal_bus import JournalBus
from coordinator.streams.presence import Presence
from shared.desktop_scope import Grant
from shared.errors import DeskfleetError, FailedPreconditionError

if TYPE_CHECKING:
    from coordinator.streams.worker_index import IndexUpdates

log = logging.getLogger(__name__)

DELIVERIES = "deskfleet_deliveries"
RUNS = "deskfleet_runs"
LISTEN_RETRY = 2.0
# Orders for a dead replica are dropped after this long: its workers reconcile on reconnect.
UNDELIVERABLE_AFTER = 60.0

_KINDS: dict[str, type[Any]] = {
    "dispatch": DispatchOrder,
    "cancel": CancelOrder,
    "verdict": ReceiptVerdict,
    "kill": KillPush,
    "rotate": RotateOrder,
}
_NAMES = {cls: name for name, cls in _KINDS.items()}


class ReplicaNameTakenError(FailedPreconditionError):
    pass


OrderT = TypeVar("OrderT", bound=Order)


def encode(order: Order) -> str:
    fields = dataclasses.asdict(order)
    if isinstance(order, DispatchOrder):
        # Secret values never rest in the store outside their own table: the sending replica
        # reads them again, from the names, when it takes the order.
        fields["secrets"] = sorted(order.secrets)
        fields["scope"] = None if order.scope is None else order.scope.to_json()
    return json.dumps({"type": _NAMES[type(order)], **fields})


def decode(s: Session, body: str) -> Order:
    fields = json.loads(body)
    cls = _KINDS[fields.pop("type")]
    if cls is DispatchOrder:
        names: list[str] = fields.pop("secrets")
        fields["secrets"] = _secret_values(s, fields["run_id"], names)
        scope = fields.pop("scope", None)
        fields["scope"] = None if scope is None else Grant.from_json(scope)
    order: Order = cls(**fields)
    return order


def _secret_values(s: Session, run_id: str, names: list[str]) -> dict[str, str]:
    if not names:
        return {}
    run = s.get(RunRow, run_id)
    values = {}
    for name in names:
        row = desktop_queries.secret(s, run.owner_id, name) if run is not None else None
        if row is not None:
            values[name] = row.value
    return values


class Relay:
    """Forwards orders to other replicas and takes the ones forwarded to this replica."""

    def __init__(
        self,
        db: Database,
        presence: Presence,
        bus: JournalBus,
        config: CoordinatorConfig,
        index: IndexUpdates,
    ) -> None:
        self._db = db
        self._presence = presence
        self._index = index
        self._bus = bus
        self._config = config
        self._started = time.time()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        # Set by the dispatcher: sends orders to streams on this replica.
        self.receiver: Callable[[list[Order]], None] = lambda orders: None
        self.listening = False

    @property
    def name(self) -> str:
        return self._config.replica

    @property
    def replica_ttl(self) -> float:
        """How long a replica may stay silent before the others count it dead; also its lease,
        the presence lease of every worker streaming to it."""
        return max(3 * self._config.relay_poll_interval, self._config.lease_ttl)

    async def __aenter__(self) -> Relay:
        await self._refuse_a_namesake()

        def first_beat(s: Session) -> list[tuple[str, float, float]]:
            queries.beat(
                s, self.name, self._config.listen, self._started, time.time(), self.replica_ttl
            )
            stale = queries.clear_presence(s, self.name)
            if stale:
                log.info("%d streams held by this replica's previous process are gone", stale)
            return worker_queries.replica_leases(s)

        # Routing knows this replica's lease before the first worker connects to it.
        self._index.index.set_leases(await self._db.write(first_beat))
        self._tasks = [asyncio.create_task(self._poll_loop(), name="relay-poll")]
        if self._db.dialect is Dialect.POSTGRESQL:
            self._tasks.append(asyncio.create_task(self._listen_loop(), name="relay-listen"))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        # A replica that stops cleanly says so: the others take over without waiting.
        with contextlib.suppress(DeskfleetError):
            await self._db.write(queries.forget, self.name)

    async def _refuse_a_namesake(self) -> None:
        """Two live replicas with one name would take each other's orders: refuse to start
        while a replica of this name still beats (a crashed one stops moving its row)."""

        def seen(s: Session) -> float | None:
            row = s.get(ReplicaRow, self.name)
            return row.seen_at if row is not None else None

        first = await self._db.read(seen)
        if first is None or time.time() - first > self.replica_ttl:
            return
        await asyncio.sleep(1.5 * self._config.relay_poll_interval)
        if await self._db.read(seen) != first:
            raise ReplicaNameTakenError(
                f"another replica named {self.name!r} is running on this store;"
                " give each replica its own --replica NAME"
            )

    # ----------------------------------------------------------------- inside transactions

    def route(
        self, s: Session, orders: Sequence[OrderT], touched: Iterable[str], here: frozenset[str]
    ) -> list[OrderT]:
        """Keep the orders for streams on this replica (`here`, taken on the event loop before
        the transaction); write the rest for their replicas.

        Runs inside the transaction that decided the orders.
        """
        away = [o for o in orders if o.worker_id not in here]
        local = [o for o in orders if o.worker_id in here]
        if away:
            holders = queries.holders(s, (o.worker_id for o in away))
            rows = []
            for order in away:
                replica = holders.get(order.worker_id, "")
                if replica and replica != self.name:
                    rows.append(
                        DeliveryRow(
                            replica=replica,
                            worker_id=order.worker_id,
                            body=encode(order),
                            created_at=time.time(),
                        )
                    )
                else:
                    local.append(order)  # not streaming anywhere: the reconnect reconciles it
            if rows:
                queries.add_deliveries(s, rows)
                if self._db.dialect is Dialect.POSTGRESQL:
                    queries.notify(s, DELIVERIES, sorted({r.replica for r in rows}))
        if self._db.dialect is Dialect.POSTGRESQL:
            queries.notify(s, RUNS, queries.chunks(sorted(touched)))
        return local

    # ------------------------------------------------------------------ taking deliveries

    async def _poll_loop(self) -> None:
        beats = 0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._config.relay_poll_interval)
            self._wake.clear()
            try:
                await self.take()
                beats += 1
                if beats % 10 == 0:
                    await self._db.write(self._housekeeping)
                    # A worker change whose notification was lost (or never sent: a change
                    # made by a process that is not a replica) reaches routing here.
                    self._index.mark(None)
            except DeskfleetError as exc:
                log.warning("could not take orders relayed to this replica: %s", exc)

    async def take(self) -> int:
        """Send the orders other replicas left for streams on this one; returns how many."""

        def unit(s: Session) -> tuple[list[Order], list[tuple[str, float, float]]]:
            now = time.time()
            queries.beat(s, self.name, self._config.listen, self._started, now, self.replica_ttl)
            orders = [decode(s, row.body) for row in queries.take_deliveries(s, self.name)]
            return orders, worker_queries.replica_leases(s)

        orders, leases = await self._db.write(unit)
        self._index.index.set_leases(leases)  # workers are online while their replica's lease runs
        if orders:
            self.receiver(orders)
        return len(orders)

    def _housekeeping(self, s: Session) -> None:
        now = time.time()
        dropped = queries.drop_undeliverable(
            s, queries.live(s, now, self.replica_ttl), now - UNDELIVERABLE_AFTER
        )
        if dropped:
            log.info("dropped %d orders for replicas that stopped", dropped)

    async def live_replicas(self) -> set[str]:
        return await self._db.read(queries.live, time.time(), self.replica_ttl)

    async def _listen_loop(self) -> None:
        import psycopg

        conninfo = make_url(self._db.url).set(drivername="postgresql").render_as_string(False)
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    conninfo, autocommit=True, connect_timeout=5
                ) as conn:
                    await conn.execute(f"LISTEN {DELIVERIES}")
                    await conn.execute(f"LISTEN {RUNS}")
                    await conn.execute(f"LISTEN {queries.WORKERS}")
                    self.listening = True
                    self._wake.set()  # whatever was written while we were not listening
                    self._index.mark(None)  # the same for workers
                    async for note in conn.notifies():
                        if note.channel == DELIVERIES:
                            if note.payload == self.name:
                                self._wake.set()
                        elif note.channel == queries.WORKERS:
                            self._index.mark(note.payload.split())
                        else:
                            self._bus.notify(set(note.payload.split()))
            except (psycopg.Error, OSError) as exc:
                if self.listening:
                    log.warning("lost the store's notifications (%s); polling meanwhile", exc)
            self.listening = False
            await asyncio.sleep(LISTEN_RETRY)
