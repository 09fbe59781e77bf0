"""The dispatcher: turns ledger decisions into messages to workers, and worker messages back
into ledger transactions, batched so that many receipts share one commit (`heart/ingest.py`:
a failed batch is recorded again message by message, so that one never costs another).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from coordinator.heart import ledger, outcomes, slots
from coordinator.heart.context import Context, RunKind
from coordinator.heart.ingest import Ingest, one_line
from coordinator.model.orders import (
    CancelOrder,
    DispatchOrder,
    Held,
    IncomingReceipt,
    Order,
    ReceiptVerdict,
)
from coordinator.model.settings import CoordinatorConfig
from coordinator.observe.attempt_spans import AttemptSpans
from coordinator.observe.metrics import CoordinatorMetrics
from coordinator.store import Database, runs as run_queries
from coordinator.streams.journal_bus import JournalBus
from coordinator.streams.presence import Presence, Sent
from coordinator.streams.relay import Relay
from coordinator.streams.worker_bounds import RefusalLog, ReportBudgets
from coordinator.streams.worker_index import WorkerIndex
from shared import faults
from shared.errors import DeskfleetError
from shared.ids import new_id
from shared.logs import log_context

log = logging.getLogger(__name__)

# A timed-out attempt is finalized under its own short deadline, so that a slow store cannot
# leave it eligible to run again elsewhere while we wait.
FINALIZE_DEADLINE = 2.0
INGEST_BATCH = 256
# A batch of starts alone waits this long for a receipt to join it. A start is not urgent
# (leases are renewed by the heartbeat; it only moves the action to STARTED and journals it),
# while a quick action's receipt follows it within milliseconds: committed apart, the start's
# transaction (and its fsync) would sit in front of the receipt's on the one writer.
STARTED_GRACE = 0.05
CONNECT_BATCH = 500  # connects reconciled in one transaction, at most
RECONNECT_GRACE = 10.0


@dataclass(frozen=True)
class Started:
    worker_id: str
    action_id: str
    attempt_id: str


@dataclass(frozen=True)
class _Connect:
    """A worker's connect waiting for its reconciliation."""

    worker_id: str
    held: tuple[Held, ...]
    opened_at: float  # when the new stream began taking the worker's orders
    done: asyncio.Future[None]


def _one_per_worker(queue: list[_Connect], limit: int) -> tuple[list[_Connect], list[_Connect]]:
    """The next batch (at most `limit`, at most one connect per worker, in arrival order) and
    what is left: a worker that connected twice is reconciled twice, one after the other."""
    batch: list[_Connect] = []
    left: list[_Connect] = []
    seen: set[str] = set()
    for c in queue:
        if len(batch) < limit and c.worker_id not in seen:
            seen.add(c.worker_id)
            batch.append(c)
        else:
            left.append(c)
    return batch, left


class Dispatcher:
    def __init__(
        self,
        db: Database,
        presence: Presence,
        bus: JournalBus,
        config: CoordinatorConfig,
        relay: Relay,
        index: WorkerIndex,
        metrics: CoordinatorMetrics | None = None,
        kinds: Mapping[str, RunKind] | None = None,
    ) -> None:
        self._index = index
        self.metrics = metrics or CoordinatorMetrics(config.replica)
        self._kinds = dict(kinds or {})  # what research, desktop and goal runs add to the rules
        self._db = db
        self._presence = presence
        self._bus = bus
        self._relay = relay
        relay.receiver = self.deliver
        self._config = config
        self._inbox: asyncio.Queue[IncomingReceipt | Started] = asyncio.Queue()
        self._timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._resends: set[asyncio.Task[None]] = set()  # see `_resend`
        self._started = time.monotonic()
        self._started_wall = time.time()  # leases expiring after this plus a lease are our own
        self._spans = AttemptSpans()
        self._connects: list[_Connect] = []
        self._connect_wake = asyncio.Event()
        # The refused reports of each worker stream on this replica, past a limit it ends.
        self.reports = ReportBudgets(config.max_refused_reports)
        self._unrecorded = RefusalLog("worker messages that could not be recorded")
        self._ingest = Ingest[IncomingReceipt | Started](
            "worker messages", self._record, self._unrecordable
        )

    async def __aenter__(self) -> Dispatcher:
        self._tasks = [
            asyncio.create_task(self._ingest_loop(), name="receipt-ingest"),
            asyncio.create_task(self._sweep_loop(), name="recovery-sweep"),
            asyncio.create_task(self._line_loop(), name="line-check"),
            asyncio.create_task(self._connect_loop(), name="reconnect-reconcile"),
        ]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for task in [*self._tasks, *self._resends]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._resends, return_exceptions=True)
        self._tasks = []
        for c in self._connects:
            c.done.cancel()  # their streams are ending with the server
        self._connects = []
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._spans.close()

    def context(self) -> Context:
        return Context(
            lease_ttl=self._config.lease_ttl,
            max_attempts=self._config.max_attempts,
            workers=self._index,
            kinds=self._kinds,
        )

    async def run_unit(self, unit: Callable[[Session, Context], list[Order]]) -> None:
        """Run a ledger transaction, then send what it decided and wake the run's watchers.

        Every unit ends by giving free worker slots to the runs in line (`slots.serve`), so
        that a slot freed or a run queued in it is acted on in the same transaction. Orders for
        streams on other replicas are handed to the relay inside the transaction.
        """
        ctx = self.context()
        here = self._presence.connected_ids()
        views: dict[str, Any] = {}

        def route(s: Session, orders: list[Order], touched: set[str]) -> list[Order]:
            return self._relay.route(s, orders, touched, here)

        def with_relay(s: Session, ctx: Context) -> list[Order]:
            routed, stopped = transaction(s, ctx, unit, route, self._bus.views_of_stops)
            views.clear()
            views.update(stopped)
            return routed

        orders = await self._db.write(with_relay, ctx)
        if faults.armed(faults.EXIT_AFTER_RECEIPT_COMMIT):  # tests only: shared/faults.py
            verdicts = sum(isinstance(o, ReceiptVerdict) for o in orders)
            faults.crash(faults.EXIT_AFTER_RECEIPT_COMMIT, verdicts)
        self.metrics.observe(ctx.notes)
        for refused in ctx.notes.refused_reports():
            self.reports.refused(
                refused.worker_id, refused.action_id, refused.attempt_id, refused.reason
            )
        self.deliver(orders, ctx.touched, ctx.stopped, views)

    def deliver(
        self,
        orders: Iterable[Order],
        touched: Iterable[str] = (),
        stopped: Iterable[str] | None = None,
        views: Mapping[str, Any] | None = None,
    ) -> None:
        held_back: list[DispatchOrder] = []
        for order in orders:
            if not isinstance(order, DispatchOrder):
                if isinstance(order, ReceiptVerdict):
                    if order.accepted:
                        self._disarm(order.action_id, order.attempt_id)
                    self._spans.finished(
                        order.action_id, order.attempt_id, ok=order.accepted, detail=order.reason
                    )
                elif isinstance(order, CancelOrder):
                    # Its worker is told the attempt is no longer its own: a late report on it
                    # is the worker's due, not one its stream is refused for.
                    self.reports.given(order.worker_id, order.action_id, order.attempt_id)
                self._presence.send(order.worker_id, order)
                continue
            self.metrics.dispatched(order.ready_at)
            order = self._spans.dispatched(order)
            sent = self._presence.send(order.worker_id, order)
            if sent is not Sent.SENT:
                self._not_sent(order, sent, held_back)
                continue
            # Armed only once the attempt is on a stream: one that never left has nothing to
            # time out, and a timer left behind would end its span as a timeout much later.
            self._arm_timeout(order)
            if log.isEnabledFor(logging.DEBUG):
                with log_context(
                    run_id=order.run_id,
                    action_id=order.action_id,
                    attempt_id=order.attempt_id,
                    worker_id=order.worker_id,
                    trace_id=order.trace_id,
                ):
                    log.debug("dispatching attempt %s of %s", order.attempt, order.kind)
        if held_back:
            self._resend(held_back)
        self._bus.notify(set(touched), None if stopped is None else set(stopped), views)

    def _not_sent(self, order: DispatchOrder, sent: Sent, held_back: list[DispatchOrder]) -> None:
        if sent is Sent.CLAIMED_BEFORE_STREAM:
            # Claimed before the worker's current stream opened, so not sent on it; its
            # connect's reconcile may have read the ledger before this claim was committed,
            # so the attempt is sent again (as a new one) unless that reconcile already did.
            held_back.append(order)
            cause = "claimed before the worker reconnected; sent again as a new attempt"
        else:
            # The stream went away after the claim (or is on a replica that stopped): the
            # worker's reconnect, or the lease, reconciles this attempt.
            log.info("worker %s left before dispatch of %s", order.worker_id, order.action_id)
            cause = "the worker left before the attempt was sent"
        self._spans.finished(order.action_id, order.attempt_id, ok=False, detail=cause)

    def _resend(self, orders: Sequence[DispatchOrder]) -> None:
        """Send again, in one transaction, the attempts one `deliver` held back. Their runs are
        locked in id order, as a receipt batch locks its runs, so the two cannot deadlock."""
        ordered = sorted(orders, key=lambda o: (o.run_id, o.action_id))

        def unit(s: Session, ctx: Context) -> list[Order]:
            out: list[Order] = []
            for order in ordered:
                run = run_queries.run_for_update(s, order.run_id)
                if run is not None:
                    out += outcomes.resend_unsent(s, run, order.action_id, order.attempt_id, ctx)
            return out

        async def resend() -> None:
            try:
                await self.run_unit(unit)
            except DeskfleetError as exc:  # the attempts' leases run out and recover them
                log.warning("could not send %d attempt(s) again: %s", len(ordered), exc)

        task = asyncio.create_task(resend(), name=f"resend-{ordered[0].action_id}")
        self._resends.add(task)
        task.add_done_callback(self._resends.discard)

    # ------------------------------------------------------------------ worker messages

    def on_receipt(self, receipt: IncomingReceipt) -> None:
        self._inbox.put_nowait(receipt)

    def on_started(self, started: Started) -> None:
        self._inbox.put_nowait(started)

    async def on_connect(self, worker_id: str, held: Sequence[Held], opened_at: float) -> None:
        """Reconcile the worker's attempts, then give runs in line a chance to use it.
        `opened_at`: when its new stream began taking orders (attempts claimed since then
        were sent on it and are not the hello's to account for).

        The connects that arrive together (a fleet coming back to a restarted coordinator)
        share one transaction and one serving of the line; this returns once the worker's
        has committed, and raises what the store raised."""
        done = asyncio.get_running_loop().create_future()
        self._connects.append(_Connect(worker_id, tuple(held), opened_at, done))
        self._connect_wake.set()
        await done

    async def _connect_loop(self) -> None:
        while True:
            await self._connect_wake.wait()
            self._connect_wake.clear()
            while self._connects:
                batch, self._connects = _one_per_worker(self._connects, CONNECT_BATCH)
                await self._reconcile(batch)

    async def _reconcile(self, batch: list[_Connect]) -> None:
        connects = [
            outcomes.Reconnect(c.worker_id, c.held, c.opened_at) for c in batch if not c.done.done()
        ]

        def unit(s: Session, ctx: Context) -> list[Order]:
            ctx.capacity_changed = True
            return outcomes.reconcile_workers(s, connects, ctx)

        try:
            if connects:
                await self.run_unit(unit)
        except Exception as exc:
            # Each stream ends with the error and its worker connects again.
            for c in batch:
                if not c.done.done():
                    c.done.set_exception(exc)
        else:
            for c in batch:
                if not c.done.done():
                    c.done.set_result(None)

    async def capacity_added(self) -> None:
        """A worker can take work again (undrained): serve the runs in line."""

        def unit(s: Session, ctx: Context) -> list[Order]:
            ctx.capacity_changed = True
            return []

        await self.run_unit(unit)

    async def advance(self, run_ids: Sequence[str]) -> None:
        def unit(s: Session, ctx: Context) -> list[Order]:
            orders: list[Order] = []
            for run_id in run_ids:
                run = run_queries.run_for_update(s, run_id)
                if run is not None:
                    orders += ledger.advance(s, run, ctx)
            return orders

        await self.run_unit(unit)

    async def _ingest_loop(self) -> None:
        while True:
            batch = [await self._inbox.get()]
            self._take_arrived(batch)
            if all(isinstance(item, Started) for item in batch):
                # Cancelling a queue's get loses no item: it is taken only once the get returns.
                with contextlib.suppress(TimeoutError):
                    batch.append(await asyncio.wait_for(self._inbox.get(), STARTED_GRACE))
                self._take_arrived(batch)
            try:
                await self._ingest(batch)
            except Exception:  # a defect of ours: the fleet's next messages still get in
                log.exception("the ingest of %d worker messages failed", len(batch))

    async def _record(self, batch: Sequence[IncomingReceipt | Started]) -> None:
        await self.run_unit(functools.partial(_apply_batch, batch=batch))

    def _unrecordable(self, item: IncomingReceipt | Started, exc: Exception) -> None:
        """A message that fails alone: refused (a receipt answered so, and forgotten by its
        worker), counted, and logged at a bounded rate (with the traceback of a defect)."""
        if isinstance(exc, DeskfleetError):
            reason = one_line(exc)
            defect = None
        else:
            reason = "internal error"
            defect = exc
        what = "receipt" if isinstance(item, IncomingReceipt) else "start"
        logged = self._unrecorded.note(item.worker_id, f"{what} of {item.action_id}: {reason}")
        if logged and defect is not None:
            reason = f"internal error (ref {new_id('err')})"  # the line that says what
            log.error("a worker's %s could not be recorded: %s", what, reason, exc_info=defect)
        self.metrics.refused_reports.labels(what, "unrecordable").inc()
        self.reports.refused(item.worker_id, item.action_id, item.attempt_id, "unrecordable")
        if isinstance(item, IncomingReceipt):
            verdict = ReceiptVerdict(
                item.worker_id,
                item.action_id,
                item.attempt_id,
                False,
                f"the coordinator could not record this receipt: {reason}",
            )
            # Straight to its stream: the attempt is still in flight in the ledger (its span
            # and timeout go on), and a worker that moved to another replica sends it again.
            self._presence.send(item.worker_id, verdict)

    def _take_arrived(self, batch: list[IncomingReceipt | Started]) -> None:
        """Whatever arrived while the previous batch was being committed joins this one."""
        while not self._inbox.empty() and len(batch) < INGEST_BATCH:
            batch.append(self._inbox.get_nowait())

    # ------------------------------------------------------------------ timeouts and sweep

    def _arm_timeout(self, order: DispatchOrder) -> None:
        key = (order.action_id, order.attempt_id)
        loop = asyncio.get_running_loop()
        self._timers[key] = loop.call_later(
            order.timeout_seconds,
            lambda: asyncio.ensure_future(self._finalize_timeout(order)),
        )

    def _disarm(self, action_id: str, attempt_id: str) -> None:
        timer = self._timers.pop((action_id, attempt_id), None)
        if timer is not None:
            timer.cancel()

    async def _finalize_timeout(self, order: DispatchOrder) -> None:
        self._timers.pop((order.action_id, order.attempt_id), None)
        cause = f"timed out after {order.timeout_seconds:g} s"
        self._spans.finished(order.action_id, order.attempt_id, ok=False, detail=cause)

        def unit(s: Session, ctx: Context) -> list[Order]:
            action = run_queries.action(s, order.action_id)
            if action is None or action.attempt_id != order.attempt_id:
                return []
            return outcomes.expire(s, action, cause, ctx)

        try:
            await asyncio.wait_for(self.run_unit(unit), FINALIZE_DEADLINE)
        except (TimeoutError, DeskfleetError) as exc:
            # The sweep finalizes it later from the ledger; the lease keeps it from running twice.
            log.warning("could not finalize the timeout of %s: %s", order.action_id, exc)

    async def _line_loop(self) -> None:
        """The backstop of `slots`: serve a non-empty line now and then (one indexed read)."""
        while True:
            await asyncio.sleep(self._config.line_check_interval)
            try:
                if not await self._db.read(run_queries.line_is_empty):
                    await self.capacity_added()
            except DeskfleetError as exc:
                log.warning("could not serve the line of waiting runs: %s", exc)

    async def _sweep_loop(self) -> None:
        while True:
            try:
                await self.sweep()
            except DeskfleetError as exc:
                log.warning("recovery sweep failed: %s", exc)
            await asyncio.sleep(self._config.sweep_interval)

    async def sweep(self) -> None:
        """Resume saved work: expired leases, overdue attempts, runs with nothing in flight."""
        # Right after a start, workers are still reconnecting (with backoff) to report what
        # they hold: leases a previous process granted then say nothing about the claimants
        # yet. A lease granted or renewed by this process (it expires later than the start
        # plus one lease) lapsed because its worker left this replica's streams: it is due at
        # once, or work claimed just after a start would wait out the grace for a dead worker.
        grace = max(2 * self._config.lease_ttl, RECONNECT_GRACE)
        leases_due = time.monotonic() - self._started >= grace
        granted_after = None if leases_due else self._started_wall + self._config.lease_ttl

        def unit(s: Session, ctx: Context) -> list[Order]:
            orders: list[Order] = []
            for action in run_queries.expired_in_flight(s, ctx.now, granted_after):
                orders += outcomes.expire(
                    s,
                    action,
                    "its claimant stopped responding (lease expired)",
                    ctx,
                    recovery="sweep",
                )
            if leases_due:
                for action in run_queries.overdue_in_flight(s, ctx.now, ctx.lease_ttl):
                    orders += outcomes.expire(
                        s,
                        action,
                        f"timed out after {action.timeout_seconds:g} s",
                        ctx,
                        recovery="sweep",
                    )
            for run in run_queries.runs_in(s, ledger.ACTIVE):
                locked = run_queries.run_for_update(s, run.id)
                if locked is not None:
                    orders += ledger.advance(s, locked, ctx)
            return orders

        await self.run_unit(unit)


Unit = Callable[[Session, Context], list[Order]]
Route = Callable[[Session, list[Order], set[str]], list[Order]]
StopViews = Callable[[Session, Collection[str]], dict[str, Any]]


def transaction(
    s: Session, ctx: Context, unit: Unit, route: Route, stop_views: StopViews
) -> tuple[list[Order], dict[str, Any]]:
    """The body of every ledger transaction (`Dispatcher.run_unit`; the in-process tests call
    it too): the unit, then the free worker slots given to the runs in line (`slots.serve`),
    so that a slot freed or a run queued in the unit is acted on in the same transaction; the
    orders for streams on other replicas handed to the relay (`route` keeps the local ones);
    and the views of the runs it stopped, read for their waiters here, who then answer with
    them instead of each reading the run again once woken."""
    ctx.reset()
    orders = unit(s, ctx)
    orders += slots.serve(s, ctx)
    routed = route(s, orders, ctx.touched)
    return routed, stop_views(s, ctx.stopped)


def _apply_batch(
    s: Session, ctx: Context, *, batch: Sequence[IncomingReceipt | Started]
) -> list[Order]:
    orders: list[Order] = []
    # One flush at commit instead of one before every query: the inserts of a whole batch
    # then go out as a few multi-row statements. Rows this batch changed are read back from
    # the session's identity map, so the ledger still sees its own changes.
    with s.no_autoflush:
        receipts = [item for item in batch if isinstance(item, IncomingReceipt)]
        run_queries.lock_for_messages(
            s,
            {r.run_id for r in receipts},
            {item.action_id for item in batch},
            {item.action_id for item in batch if isinstance(item, Started)},
        )
        # Each receipt's run then finds its stage done and the next one open without a read.
        ledger.read_stages_ahead(s, {r.run_id for r in receipts}, ctx)
        for item in batch:
            if isinstance(item, Started):
                orders += outcomes.apply_started(
                    s, item.worker_id, item.action_id, item.attempt_id, ctx
                )
            else:
                orders += outcomes.apply_receipt(s, item, ctx)
        # The slots these receipts freed go to the runs in line (`run_unit` ends with that).
    return orders
