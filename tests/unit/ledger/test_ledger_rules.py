"""The ledger's rules in-process, on a SQLite store in a temporary directory: no servers.

Each test is one or a few ledger transactions, run the way the dispatcher runs them (the unit,
then `slots.serve`), so the rules are checked in milliseconds: worker slots and the line of
waiting runs, epoch fencing, retries and hand-backs.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.orm import Session

from coordinator.heart import dispatch, ledger, outcomes, slots
from coordinator.heart.context import Context
from coordinator.model.orders import Order, ReceiptVerdict
from coordinator.store import runs as run_queries
from coordinator.store.models import (
    ActionRow,
)
from tests.harness.ledger import Store, apply_all, dispatched, in_flight, receipt

# ------------------------------------------------------------------ slots and the line


def test_a_worker_takes_at_most_its_slots_and_the_rest_wait_saying_why(store: Store) -> None:
    store.worker("w")
    runs = [store.submit(2) for _ in range(6)]
    assert len(in_flight(store)) == ledger.MAX_PER_WORKER
    waiting = [store.run_row(r) for r in runs[ledger.MAX_PER_WORKER :]]
    assert {(w.status, w.waiting_code) for w in waiting} == {
        (ledger.WAITING_FOR_ENVIRONMENT, ledger.WORKERS_BUSY)
    }
    assert all(w.queued_at is not None for w in waiting)
    assert "in line for the next free slot" in waiting[0].waiting_detail


def test_a_batch_of_receipts_frees_its_own_slots_for_the_runs_in_line(store: Store) -> None:
    """The fleet-wide stall: receipts applied without autoflush still counted as busy."""
    store.worker("w")
    runs = [store.submit(2) for _ in range(6)]
    orders = store.run(apply_all([receipt(o) for o in in_flight(store)]))
    sent = dispatched(orders)
    assert len(sent) == ledger.MAX_PER_WORKER  # every freed slot is used again at once
    # The two runs that waited longest go first; then the runs whose receipts came in.
    assert [o.run_id for o in sent[:2]] == runs[4:6]


def test_a_run_with_many_units_takes_turns_with_a_later_run(store: Store) -> None:
    store.worker("w")
    big = store.submit(10, stage_all=True)  # in line first, ten units in one stage
    assert len(in_flight(store)) == ledger.MAX_PER_WORKER
    small = store.submit(1)
    assert store.run_row(small).waiting_code == ledger.WORKERS_BUSY
    first_two = in_flight(store)[:2]
    sent = dispatched(store.run(apply_all([receipt(o) for o in first_two])))
    # The big run, still in line from before the small one came, takes one slot and goes to
    # the back, behind the small run, which takes the other: six units left do not starve it.
    assert [o.run_id for o in sent] == [big, small]


def test_receipts_arriving_one_by_one_serve_runs_round_robin(store: Store) -> None:
    store.worker("w")
    runs = [store.submit(3) for _ in range(8)]
    order: list[str] = []
    for _ in range(20):
        flying = in_flight(store)
        if not flying:
            break
        sent = dispatched(store.run(apply_all([receipt(flying[0])])))
        order += [o.run_id for o in sent]
    # Each run's second action is dispatched before any run's third.
    seconds = [order.index(r) for r in runs]
    thirds = [i for i, r in enumerate(order) if order[: i + 1].count(r) == 2]
    assert max(seconds) < min(thirds)


def test_a_timed_out_attempt_frees_its_slot_for_the_line(store: Store) -> None:
    store.worker("w")
    [store.submit(1) for _ in range(4)]
    waiter = store.submit(1)
    stuck = in_flight(store)[0]

    def timeout(s: Session, ctx: Context) -> list[Order]:
        action = s.get(ActionRow, stuck.action_id)
        assert action is not None
        return outcomes.expire(s, action, "timed out after 60 s", ctx)

    sent = dispatched(store.run(timeout))
    assert waiter in [o.run_id for o in sent]


def test_a_worker_connecting_serves_the_line(store: Store) -> None:
    store.worker("a")
    [store.submit(1) for _ in range(4)]
    waiter = store.submit(1)
    b = store.worker("b")

    def connect(s: Session, ctx: Context) -> list[Order]:
        ctx.capacity_changed = True
        return outcomes.reconcile_workers(s, [outcomes.Reconnect(b, (), time.time())], ctx)

    sent = dispatched(store.run(connect))
    assert [(o.run_id, o.worker_id) for o in sent] == [(waiter, b)]
    assert store.run_row(waiter).queued_at is None


def _capacity_changed(s: Session, ctx: Context) -> list[Order]:
    ctx.capacity_changed = True
    return []


def test_the_line_is_read_a_page_at_a_time_and_served_in_the_same_order(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slots, "LINE_PAGE", 2)
    runs = [store.submit(3, stage_all=True) for _ in range(5)]  # no worker: all in line
    for i in range(3):
        store.worker(f"w{i}")  # 12 slots for 15 units
    sent = dispatched(store.run(_capacity_changed))
    # One unit a turn, oldest place first: through three pages, then the back of the line.
    assert [o.run_id for o in sent] == runs + runs + runs[:2]


def test_a_full_fleet_reads_one_page_of_a_long_line(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slots, "LINE_PAGE", 2)
    store.worker("w")
    [store.submit(1) for _ in range(10)]  # four run, six wait
    read: list[int] = []
    line_page = run_queries.line_page

    def spy(*args: Any) -> Any:
        rows = line_page(*args)
        read.append(len(rows))
        return rows

    monkeypatch.setattr(run_queries, "line_page", spy)
    assert dispatched(store.run(_capacity_changed)) == []
    assert read == [2]  # one page, although six runs wait


def test_a_new_runs_stages_are_taken_from_the_rows_just_written(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.worker("w")
    reads: list[str] = []
    for name in ("first_open_stage", "stage_actions", "next_stage", "open_stages_of"):
        real = getattr(run_queries, name)

        def spy(*args: Any, _real: Any = real, _name: str = name) -> Any:
            reads.append(_name)
            return _real(*args)

        monkeypatch.setattr(run_queries, name, spy)
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        statements.append(" ".join(statement.split()))

    def selects(*tables: str) -> list[str]:
        return [q for q in statements if q.startswith("SELECT") and any(t in q for t in tables)]

    event.listen(store.engine, "before_cursor_execute", seen)
    run_id = store.submit(4, stages=[3, 1, 1, 7])  # stages need not start at 0 nor follow on
    assert reads == []  # the submission read no stage from the store
    # Nor did it lock the run it had just written, or look for guidance nobody could have
    # given it yet (the line it joined is read, a page of ids).
    assert selects("WHERE runs.id =", "FROM guidance") == []
    first = in_flight(store)
    assert sorted(store.read(lambda s: [s.get(ActionRow, o.action_id).idx for o in first])) == [
        1,
        2,
    ]
    # The stages then follow in order, each found through the store as receipts come in.
    store.run(apply_all([receipt(o) for o in first]))
    (second,) = in_flight(store)
    assert store.read(lambda s: s.get(ActionRow, second.action_id).idx) == 0
    store.run(apply_all([receipt(second)]))
    (third,) = in_flight(store)
    assert store.read(lambda s: s.get(ActionRow, third.action_id).idx) == 3
    store.run(apply_all([receipt(third)]))
    assert in_flight(store) == [] and store.run_row(run_id).status == ledger.SUCCEEDED
    event.remove(store.engine, "before_cursor_execute", seen)
    # Its change of state to SUCCEEDED measured from when it was written, with no look through
    # the journal for when it entered its state.
    assert selects("FROM journal") == []


@pytest.mark.parametrize("workers", [1, 2])
def test_the_runs_a_serving_gives_slots_to_are_locked_and_read_together(
    store: Store, workers: int
) -> None:
    """The runs in line that take the freed slots are locked, and their stages read, as one
    group: the statements of a batch's transaction do not grow with the runs it serves."""
    for i in range(workers):
        store.worker(f"w{i}")
    slots_ = workers * ledger.MAX_PER_WORKER
    runs = [store.submit(2) for _ in range(3 * slots_)]
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        statements.append(" ".join(statement.split()))

    batch = [receipt(o) for o in in_flight(store)]
    event.listen(store.engine, "before_cursor_execute", seen)
    sent = dispatched(store.run(functools.partial(dispatch._apply_batch, batch=batch)))
    event.remove(store.engine, "before_cursor_execute", seen)
    # The runs that waited longest take the slots, one unit each.
    assert [o.run_id for o in sent] == runs[slots_ : 2 * slots_]
    selects = [q for q in statements if q.startswith("SELECT")]
    one_run_locks = [q for q in selects if "FROM runs" in q and "WHERE runs.id = " in q]
    assert one_run_locks == []
    # The receipts' runs and actions, their stages and guidance, the line, the served runs
    # and their stages and guidance, the slot counts: the same few for 4 runs served or 8.
    assert len(selects) <= 10, selects


# ------------------------------------------------------------------ fencing, retry, hand-back


def test_a_stale_epoch_is_refused_and_takes_no_slot_back(store: Store) -> None:
    store.worker("w")
    [store.submit(1) for _ in range(4)]
    waiter = store.submit(1)
    flying = in_flight(store)[0]
    orders = store.run(apply_all([receipt(flying, epoch=flying.epoch - 1)]))
    [verdict] = [o for o in orders if isinstance(o, ReceiptVerdict)]
    assert not verdict.accepted and "stale epoch" in verdict.reason
    assert dispatched(orders) == []
    assert store.run_row(waiter).status == ledger.WAITING_FOR_ENVIRONMENT


def test_a_failed_idempotent_action_is_retried_with_a_new_epoch(store: Store) -> None:
    store.worker("w")
    run_id = store.submit(1)
    [first] = in_flight(store)
    [again] = dispatched(store.run(apply_all([receipt(first, "failed")])))
    assert (again.action_id, again.epoch, again.attempt) == (first.action_id, 2, 2)
    assert store.run_row(run_id).status == ledger.RUNNING


def test_an_unknown_outcome_of_a_non_idempotent_action_is_handed_back(store: Store) -> None:
    store.worker("w")
    run_id = store.submit(2, idempotent=False)
    [first] = in_flight(store)

    def lost(s: Session, ctx: Context) -> list[Order]:
        action = s.get(ActionRow, first.action_id)
        assert action is not None
        return outcomes.expire(s, action, "its claimant stopped responding", ctx)

    assert dispatched(store.run(lost)) == []
    run = store.run_row(run_id)
    assert run.status == ledger.HAND_BACK_TO_HUMAN
    assert run.waiting_code == ledger.UNKNOWN_OUTCOME and run.queued_at is None
