"""A batch of worker messages applied as the dispatcher applies it (`_apply_batch`, then the
line is served), in-process on a SQLite store: the rules per receipt are those of
`outcomes.apply_receipt`; here, that a whole batch reads its runs and actions with one query
each and keeps the exactly-once and fencing rules when messages of one batch meet."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.orm import Session

from coordinator.heart import ledger, slots
from coordinator.heart.context import RunKind
from coordinator.heart.dispatch import Started, _apply_batch
from coordinator.model.orders import IncomingReceipt, Order, ReceiptVerdict
from coordinator.store.engine import create_store_engine
from coordinator.store.models import (
    ActionRow,
    Base,
    GuidanceRow,
    JournalRow,
    ReceiptRow,
    RunRow,
)
from tests.harness.ledger import Store, dispatched, in_flight, receipt


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """The rules tests' store, on SQLite and on PostgreSQL (where the batch's runs are
    locked with FOR UPDATE)."""
    if request.param == "postgresql":
        url: str = request.getfixturevalue("pg_url")
    else:
        url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = create_store_engine(url)
    Base.metadata.create_all(engine)
    yield Store(engine)
    engine.dispose()


def batch(*items: IncomingReceipt | Started) -> Any:
    return functools.partial(_apply_batch, batch=list(items))


def verdicts(orders: list[Order]) -> list[tuple[bool, str]]:
    return [(o.accepted, o.reason) for o in orders if isinstance(o, ReceiptVerdict)]


class Statements:
    """The SQL statements sent while counting."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.commits = 0

    def matching(self, pattern: str) -> list[str]:
        return [st for st in self.sent if re.search(pattern, " ".join(st.split()))]


@contextmanager
def counting(store: Store) -> Iterator[Statements]:
    found = Statements()

    def sent(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        found.sent.append(statement)

    def committed(conn: Any) -> None:
        found.commits += 1

    event.listen(store.engine, "before_cursor_execute", sent)
    event.listen(store.engine, "commit", committed)
    try:
        yield found
    finally:
        event.remove(store.engine, "before_cursor_execute", sent)
        event.remove(store.engine, "commit", committed)


def test_a_batch_reads_its_runs_and_actions_with_one_query_each(store: Store) -> None:
    for i in range(4):
        store.worker(f"w{i}")
    runs = [store.submit(3) for _ in range(16)]
    flying = in_flight(store)
    assert len(flying) == 16
    with counting(store) as seen:
        orders = store.run(batch(*(receipt(o) for o in flying)))
    assert verdicts(orders) == [(True, "")] * 16
    assert sorted(o.run_id for o in dispatched(orders)) == sorted(runs)  # each run's next unit
    # Actions by id and runs by id (the locks): one statement each for all 16 receipts.
    assert len(seen.matching(r"^SELECT actions\.id.* FROM actions WHERE actions\.id (IN|=)")) == 1
    assert len(seen.matching(r"^SELECT runs\.id.* FROM runs WHERE runs\.id")) == 1
    assert len(seen.matching(r"^INSERT INTO receipts")) == 1  # one multi-row insert
    assert seen.commits == 1


def test_a_receipt_sent_twice_in_one_batch_is_recorded_once(store: Store) -> None:
    store.worker("w")
    run_id = store.submit(2)
    [first] = in_flight(store)
    orders = store.run(batch(receipt(first), receipt(first)))
    assert verdicts(orders) == [(True, ""), (True, "already recorded")]
    assert len(dispatched(orders)) == 1
    recorded = store.read(
        lambda s: s.query(ReceiptRow).filter(ReceiptRow.action_id == first.action_id).count()
    )
    assert recorded == 1
    assert store.run_row(run_id).actions_succeeded == 1


def test_a_stale_and_an_unknown_receipt_in_a_batch_leave_the_others_alone(store: Store) -> None:
    store.worker("w")
    a, b = store.submit(1), store.submit(1)
    first, second = sorted(in_flight(store), key=lambda o: o.run_id == b)
    bogus = IncomingReceipt(**{**receipt(first).__dict__, "action_id": "act_nothing"})
    other_run = IncomingReceipt(**{**receipt(first).__dict__, "run_id": b})
    with counting(store) as seen:
        orders = store.run(
            batch(receipt(second, epoch=second.epoch + 1), bogus, other_run, receipt(first))
        )
    # The action that does not exist is looked for once, with the others.
    assert len(seen.matching(r"^SELECT actions\.id.* FROM actions WHERE actions\.id (IN|=)")) == 1
    assert [ok for ok, _ in verdicts(orders)] == [False, False, False, True]
    assert "stale epoch" in verdicts(orders)[0][1]
    assert verdicts(orders)[1][1] == verdicts(orders)[2][1] == "unknown action"
    assert store.run_row(a).status == ledger.SUCCEEDED
    assert store.run_row(b).status == ledger.RUNNING


def test_a_start_and_its_receipt_in_one_batch_end_the_attempt(store: Store) -> None:
    store.worker("w")
    run_id = store.submit(1)
    [first] = in_flight(store)
    start = Started(first.worker_id, first.action_id, first.attempt_id)
    store.run(batch(start, receipt(first)))
    action = store.read(lambda s: s.get(ActionRow, first.action_id))
    assert action.status == "SUCCEEDED" and action.receipt_id
    assert store.run_row(run_id).status == ledger.SUCCEEDED
    # A start that comes after its receipt changes nothing.
    store.run(batch(start))
    assert store.read(lambda s: s.get(ActionRow, first.action_id)).status == "SUCCEEDED"


def test_guidance_waiting_for_a_run_is_delivered_at_its_receipt_in_a_batch(store: Store) -> None:
    store.worker("w")
    guided = store.submit(2)
    store.submit(2)  # and a run with no guidance: no look of its own
    with Session(store.engine) as s, s.begin():
        s.add(
            GuidanceRow(
                id="gdn_1", run_id=guided, author_id="owner", text="look left", created_at=0.0
            )
        )
    with counting(store) as seen:
        store.run(batch(*(receipt(o) for o in in_flight(store))))
    assert len(seen.matching(r"^SELECT DISTINCT guidance\.run_id")) == 1  # one look for the batch
    assert len(seen.matching(r"^SELECT guidance\.id")) == 1  # the guided run's messages

    def delivered(s: Session) -> list[tuple[str, str]]:
        rows = s.query(JournalRow).filter(JournalRow.kind == "guidance.delivered").all()
        return [(r.run_id, r.data) for r in rows]

    [(run_id, data)] = store.read(delivered)
    assert run_id == guided and "look left" in data
    assert store.read(lambda s: s.get(GuidanceRow, "gdn_1")).delivered_at is not None


def test_a_batch_reads_its_runs_stages_with_one_statement(store: Store) -> None:
    """Each receipt's run finds its stage done and the next one open, and the run's turn in
    line finds the same stage: one statement for the batch, none per receipt."""
    for i in range(4):
        store.worker(f"w{i}")
    sequential = [store.submit(3) for _ in range(6)]
    single = store.submit(1)
    parallel = store.submit(2, stage_all=True)  # both units in flight, one receipt comes
    flying = in_flight(store)
    first_of_parallel = next(o for o in flying if o.run_id == parallel)
    arriving = [o for o in flying if o.run_id != parallel] + [first_of_parallel]
    with counting(store) as seen:
        orders = store.run(batch(*(receipt(o) for o in arriving)))
    assert verdicts(orders) == [(True, "")] * len(arriving)
    assert len(seen.matching(r"^SELECT actions\.id.* FROM actions JOIN \(SELECT")) == 1
    assert all("JOIN" in st for st in seen.matching(r"min\(actions\.stage\)"))
    assert not seen.matching(r"FROM actions WHERE actions\.run_id = \S+ AND actions\.stage =")
    # Each sequential run dispatched its second unit; the others have nothing to dispatch.
    sent = dispatched(orders)
    assert sorted(o.run_id for o in sent) == sorted(sequential)
    second = store.read(
        lambda s: {a.id for a in s.query(ActionRow).filter(ActionRow.idx == 1).all()}
    )
    assert all(o.action_id in second for o in sent)
    assert store.run_row(single).status == ledger.SUCCEEDED
    assert store.run_row(parallel).status == ledger.RUNNING
    # The next batch finds the third stage from its own read ahead, and the runs end after it.
    store.run(batch(*(receipt(o) for o in sent)))
    last = dispatched(store.run(batch(*(receipt(o) for o in in_flight(store)))))
    assert last == []
    assert {store.run_row(r).status for r in sequential} == {ledger.SUCCEEDED}


def test_a_unit_added_to_a_stage_in_the_transaction_is_dispatched_first(store: Store) -> None:
    """A receipt hook may add a unit to the stage its receipt finished (a thorough research
    run's fetches join the search's stage): the stage read ahead for the batch is then stale,
    and the run must dispatch the added unit, not move on to the next stage."""
    store.worker("w")
    run_id = store.submit(2)
    [first] = in_flight(store)

    def add_unit(
        s: Session, run: RunRow, action: ActionRow, result: Any, ctx: ledger.Context
    ) -> None:
        s.add(
            ledger.new_action(
                run.id,
                run.actions_total,
                action.stage,
                "diag.added",
                {},
                idempotent=True,
                route={},
                intent="",
                timeout=60.0,
            )
        )
        run.actions_total += 1
        s.flush()  # as research's hook does: the stage's rows are read from the store

    ctx = ledger.Context(
        lease_ttl=30.0,
        max_attempts=3,
        workers=store.index,
        kinds={"plan": RunKind(on_receipt=add_unit)},
    )
    with Session(store.engine, expire_on_commit=False) as s, s.begin():
        orders = batch(receipt(first))(s, ctx)
        with s.no_autoflush:
            orders += slots.serve(s, ctx)
    [sent] = dispatched(orders)
    assert sent.kind == "diag.added"
    assert store.run_row(run_id).status == ledger.RUNNING
