"""The ledger in-process: a SQLite store in a directory, and transactions run with the
dispatcher's own body (`coordinator.heart.dispatch.transaction`), so that ledger rules are
checked in milliseconds without servers (tests/unit/ledger/)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from coordinator.heart import ledger, outcomes
from coordinator.heart.context import Context, RunKind
from coordinator.heart.dispatch import transaction
from coordinator.model.orders import DispatchOrder, IncomingReceipt, Order
from coordinator.runs.service import new_run
from coordinator.store.engine import create_store_engine
from coordinator.store.models import (
    ActionRow,
    Base,
    PresenceRow,
    ReplicaRow,
    RunRow,
    WorkerRow,
)
from coordinator.streams.journal_bus import JournalBus
from coordinator.streams.worker_index import WorkerIndex
from shared.ids import new_id

Unit = Callable[[Session, Context], list[Order]]


class Store:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.index = WorkerIndex()  # read again after each change of the fleet, as a replica does
        self.bus = JournalBus()
        self.kinds: dict[str, RunKind] = {}  # what kinds of run add to the rules, as at wiring

    def run(self, unit: Unit) -> list[Order]:
        """One transaction with the dispatcher's own body (`dispatch.transaction`): the unit,
        the line served, the orders routed and the stopped runs' views read. One replica
        holds every worker's stream here, so the relay keeps every order."""
        ctx = Context(lease_ttl=30.0, max_attempts=3, workers=self.index, kinds=self.kinds)
        with Session(self.engine, expire_on_commit=False) as s, s.begin(), s.no_autoflush:
            orders, _ = transaction(s, ctx, unit, _kept_here, self.bus.views_of_stops)
            return orders

    def worker(self, name: str) -> str:
        worker_id = new_id("wrk")
        now = time.time()
        with Session(self.engine) as s, s.begin():
            if s.get(ReplicaRow, "r1") is None:  # the replica holding the streams, alive
                s.add(
                    ReplicaRow(
                        name="r1",
                        address="127.0.0.1:1",
                        started_at=now,
                        seen_at=now,
                        lease_expires_at=now + 3600,
                    )
                )
            s.add(
                WorkerRow(
                    id=worker_id,
                    name=name,
                    secret_hash=new_id("h"),
                    state="active",
                    labels={},
                    allowed_capabilities=["headless"],
                    advertisement={},
                    enrolled_at=now,
                    enrollment_token_id="t",
                )
            )
            s.flush()  # no relationship orders the inserts: the presence row needs its worker
            s.add(
                PresenceRow(
                    worker_id=worker_id,
                    replica="r1",
                    session_id=new_id("ses"),
                    connected_at=now,
                    last_heartbeat_at=now,
                    lease_expires_at=now + 3600,
                )
            )
        with Session(self.engine) as s:
            self.index.read(s)
        return worker_id

    def submit(
        self,
        actions: int,
        *,
        stage_all: bool = False,
        idempotent: bool = True,
        stages: list[int] | None = None,
        kind: str = "diag.echo",
        args: dict[str, Any] | None = None,
        postcondition: dict[str, Any] | None = None,
    ) -> str:
        """A plan run of `actions` actions (diag.echo unless `kind` and `args` say otherwise,
        each with `postcondition` if given), in sequence, all in one stage or in the `stages`
        given; written as `Runs.submit` writes it."""
        run_id = new_id("run")
        stages = stages or [0 if stage_all else i for i in range(actions)]
        now = time.time()

        def unit(s: Session, ctx: Context) -> list[Order]:
            limits = {
                "max_actions": 3 * actions + 10,
                "max_seconds": 3600.0,
                "estimate_actions": 3 * actions + 10,
                "estimate_seconds": 3600.0,
                "action_timeout_seconds": 60.0,
            }
            run = new_run(
                run_id, "owner", "t", limits, kind="plan", spec={}, actions_total=actions, now=now
            )
            s.add(run)
            s.flush()
            rows = [
                ledger.new_action(
                    run_id,
                    i,
                    stages[i],
                    kind,
                    {"value": i} if args is None else args,
                    idempotent=idempotent,
                    route={},
                    intent="",
                    timeout=60.0,
                    postcondition=postcondition,
                )
                for i in range(actions)
            ]
            s.add_all(rows)
            s.flush()
            ledger.new_run_stages(s, run, rows, ctx)
            return ledger.advance(s, run, ctx)

        self.run(unit)
        return run_id

    def read(self, fn: Callable[[Session], Any]) -> Any:
        with Session(self.engine) as s:
            return fn(s)

    def run_row(self, run_id: str) -> RunRow:
        row: RunRow = self.read(lambda s: s.get(RunRow, run_id))
        return row


@contextlib.contextmanager
def ledger_store(path: Path) -> Iterator[Store]:
    """A fresh store in `path` (a SQLite file), its schema made, disposed of afterwards."""
    engine = create_store_engine(f"sqlite:///{path / 'ledger.db'}")
    Base.metadata.create_all(engine)
    try:
        yield Store(engine)
    finally:
        engine.dispose()


def _kept_here(s: Session, orders: list[Order], touched: set[str]) -> list[Order]:
    return orders


def dispatched(orders: list[Order]) -> list[DispatchOrder]:
    return [o for o in orders if isinstance(o, DispatchOrder)]


def receipt(
    order: DispatchOrder,
    status: str = "succeeded",
    epoch: int | None = None,
    result_json: str = '{"echo": 1}',
) -> Any:
    return IncomingReceipt(
        worker_id=order.worker_id,
        action_id=order.action_id,
        run_id=order.run_id,
        attempt_id=order.attempt_id,
        epoch=order.epoch if epoch is None else epoch,
        status=status,
        result_json=result_json,
        error="" if status == "succeeded" else "broken",
        started_at=time.time(),
        finished_at=time.time(),
    )


def apply_all(receipts: list[IncomingReceipt]) -> Unit:
    def unit(s: Session, ctx: Context) -> list[Order]:
        orders: list[Order] = []
        for r in receipts:
            orders += outcomes.apply_receipt(s, r, ctx)
        return orders

    return unit


def in_flight(store: Store) -> list[DispatchOrder]:
    """The dispatches of the store's in-flight actions, rebuilt for receipts."""

    def rows(s: Session) -> list[DispatchOrder]:
        found = s.query(ActionRow).filter(ActionRow.status.in_(ledger.IN_FLIGHT)).all()
        return [
            DispatchOrder(
                a.worker_id, a.id, a.run_id, a.attempt_id, a.epoch, a.attempts, a.kind,
                a.args, a.idempotent, a.timeout_seconds,
            )
            for a in found
        ]  # fmt: skip

    result: list[DispatchOrder] = store.read(rows)
    return result
