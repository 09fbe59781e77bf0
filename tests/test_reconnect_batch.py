"""Workers that connect together are reconciled in one ledger transaction (in-process, on a
SQLite store): each gets what it would get alone, and the store is asked the same few
questions whatever the number of workers."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session

from coordinator import ledger, outcomes
from coordinator.dispatch import _Connect, _one_per_worker
from coordinator.ledger import Context
from coordinator.orders import CancelOrder, Held, Order
from coordinator.store.models import ActionRow
from tests.test_ledger_rules import Store, dispatched, in_flight, store  # noqa: F401


def _action(fleet: Store, action_id: str) -> ActionRow:
    row: ActionRow = fleet.read(lambda s: s.get(ActionRow, action_id))
    return row


def _reconcile(connects: list[tuple[str, tuple[Held, ...]]]) -> Any:
    def unit(s: Session, ctx: Context) -> list[Order]:
        ctx.capacity_changed = True
        return outcomes.reconcile_workers(s, connects, ctx)

    return unit


def test_each_worker_of_a_batch_is_reconciled_as_it_would_be_alone(
    store: Store,  # noqa: F811
) -> None:
    keeps, forgot, stranger = store.worker("keeps"), store.worker("forgot"), store.worker("x")
    for _ in range(2):
        store.submit(1)
    flying = {o.worker_id: o for o in in_flight(store)}
    assert set(flying) == {keeps, forgot}  # one attempt each: the least busy worker takes it
    kept, lost = flying[keeps], flying[forgot]
    unknown_to_ledger = Held("act_gone", "att_gone", 1, "running")
    orders = store.run(
        _reconcile(
            [
                (keeps, (Held(kept.action_id, kept.attempt_id, kept.epoch, "running"),)),
                (forgot, ()),  # never recorded its attempt: it goes out again
                (stranger, (unknown_to_ledger,)),
            ]
        )
    )
    assert _action(store, kept.action_id).attempt_id == kept.attempt_id  # still its attempt
    assert _action(store, kept.action_id).status == ledger.DISPATCHED
    again = [o for o in dispatched(orders) if o.action_id == lost.action_id]
    assert len(again) == 1 and again[0].attempt_id != lost.attempt_id  # sent again, once
    cancels = [o for o in orders if isinstance(o, CancelOrder)]
    assert [(c.worker_id, c.action_id) for c in cancels] == [(stranger, "act_gone")]


def test_an_interrupted_attempt_goes_once_to_another_worker_of_the_batch(
    store: Store,  # noqa: F811
) -> None:
    """The first worker's attempt was interrupted: it is retried, and the second worker of
    the batch, which said it holds nothing, takes the new attempt, sent once."""
    a = store.worker("a")
    run_id = store.submit(1)
    for _ in range(3):  # a's other slots: the retry goes to the least busy worker, b
        store.submit(1)
    flying = in_flight(store)
    [first] = [o for o in flying if o.run_id == run_id]
    assert {o.worker_id for o in flying} == {a}
    b = store.worker("b")
    held = tuple(
        Held(o.action_id, o.attempt_id, o.epoch, "interrupted" if o is first else "running")
        for o in flying
    )
    orders = store.run(_reconcile([(a, held), (b, ())]))
    [again] = dispatched(orders)
    assert again.action_id == first.action_id and again.attempt_id != first.attempt_id
    assert again.worker_id == b
    row = _action(store, first.action_id)
    assert (row.status, row.attempt_id, row.worker_id) == (ledger.DISPATCHED, again.attempt_id, b)
    assert store.run_row(run_id).status == ledger.RUNNING


def _statements(fleet: Store, unit: Any) -> int:
    """SQL statements the unit runs (the line's serving after it not counted)."""
    counted: list[str] = []

    def count(*args: Any) -> None:
        counted.append(args[2])

    with Session(fleet.engine, expire_on_commit=False) as s, s.begin(), s.no_autoflush:
        ctx = Context(lease_ttl=30.0, max_attempts=3, workers=fleet.index)
        event.listen(fleet.engine, "before_cursor_execute", count)
        try:
            unit(s, ctx)
            s.flush()
        finally:
            event.remove(fleet.engine, "before_cursor_execute", count)
    return len([c for c in counted if c.lstrip().upper().startswith("SELECT")])


def test_a_batch_reads_the_ledger_with_the_same_queries_for_2_or_20_workers(
    store: Store,  # noqa: F811
) -> None:
    workers = [store.worker(f"w{i}") for i in range(20)]
    for _ in range(20):
        store.submit(1)
    held = {
        o.worker_id: (Held(o.action_id, o.attempt_id, o.epoch, "running"),)
        for o in in_flight(store)
    }
    assert len(held) == 20

    def batch(n: int) -> list[tuple[str, tuple[Held, ...]]]:
        return [(w, held[w]) for w in workers[:n]]

    few, many = _statements(store, _reconcile(batch(2))), _statements(store, _reconcile(batch(20)))
    assert few == many, (few, many)


def _connects(*worker_ids: str) -> list[_Connect]:
    loop = asyncio.new_event_loop()
    try:
        return [_Connect(w, (), loop.create_future()) for w in worker_ids]
    finally:
        loop.close()


def test_a_worker_connecting_twice_is_reconciled_in_two_batches_in_order() -> None:
    queue = _connects("a", "b", "a", "c", "a")
    batch, left = _one_per_worker(queue, 10)
    assert [c.worker_id for c in batch] == ["a", "b", "c"]
    assert left == [queue[2], queue[4]]
    batch, left = _one_per_worker(left, 10)
    assert batch == [queue[2]] and left == [queue[4]]


def test_a_batch_takes_at_most_its_limit_in_arrival_order() -> None:
    queue = _connects(*(f"w{i}" for i in range(7)))
    batch, left = _one_per_worker(queue, 5)
    assert batch == queue[:5] and left == queue[5:]
