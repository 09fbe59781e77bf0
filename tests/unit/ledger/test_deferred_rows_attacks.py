"""Receipts and journal events written at commit (`coordinator/store/deferred.py`), against
hostile or unlucky batches, in-process on the ledger's rules: two receipts for one attempt in
one batch record one; a batch whose queued rows fail only at its commit is recorded again
message by message, the good receipts landing and every journal's hash chain intact; reads in
the write transaction (a stopped run's view for its waiters, a journal check from a run kind's
hook, a statement on mapped classes that joins or nests the queued tables) see the rows the
transaction queued."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import exists, func, select
from sqlalchemy.orm import Session

from coordinator.heart import ledger, outcomes
from coordinator.heart.context import Context, RunKind
from coordinator.heart.dispatch import Started, _apply_batch, transaction
from coordinator.heart.ingest import Ingest
from coordinator.model.orders import DispatchOrder, IncomingReceipt, Order, ReceiptVerdict
from coordinator.runs.service import RunView, stopped_view
from coordinator.store import deferred, journal, runs as run_queries
from coordinator.store.models import ActionRow, JournalRow, ReceiptRow, RunRow
from tests.harness.ledger import Store, in_flight, ledger_store, receipt

Message = IncomingReceipt | Started
TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with ledger_store(tmp_path) as found:
        yield found


def _claims(store: Store, runs: int) -> list[DispatchOrder]:
    for i in range((runs + 3) // 4):
        store.worker(f"w{i}")
    for _ in range(runs):
        store.submit(1)
    claims = in_flight(store)
    assert len(claims) == runs
    return claims


def _verdicts(orders: Sequence[Order]) -> list[tuple[str, bool, str]]:
    return [(o.action_id, o.accepted, o.reason) for o in orders if isinstance(o, ReceiptVerdict)]


def _ledger_of(store: Store, run_id: str) -> dict[str, Any]:
    """What the store holds for the run: its head, journal kinds, receipts and their check."""

    def read(s: Session) -> dict[str, Any]:
        run = s.get(RunRow, run_id)
        assert run is not None
        checked = journal.verify(s, run)
        kinds = s.execute(
            select(JournalRow.kind).where(JournalRow.run_id == run_id).order_by(JournalRow.seq)
        ).scalars()
        receipts = s.execute(select(ReceiptRow).where(ReceiptRow.run_id == run_id)).scalars()
        return {
            "status": run.status,
            "last_seq": run.last_seq,
            "kinds": list(kinds),
            "receipts": [(r.action_id, r.worker_id, r.attempt_id, r.id) for r in receipts],
            "problems": checked.problems,
            "events": checked.events,
        }

    found: dict[str, Any] = store.read(read)
    return found


def test_two_receipts_for_one_attempt_in_one_batch_record_one(store: Store) -> None:
    """The second is 'already recorded' though the first's row is only queued: one receipt
    row, one receipt event, the action naming the row that was written, the chain intact."""
    claim, other = _claims(store, 2)
    first = dataclasses.replace(receipt(claim), result_json='{"n": 1}')
    again = dataclasses.replace(receipt(claim), result_json='{"n": 2}', status="failed")
    batch: list[Message] = [first, again, receipt(other), first]
    verdicts = _verdicts(store.run(functools.partial(_apply_batch, batch=batch)))
    assert verdicts == [
        (claim.action_id, True, ""),
        (claim.action_id, True, "already recorded"),
        (other.action_id, True, ""),
        (claim.action_id, True, "already recorded"),
    ]
    found = _ledger_of(store, claim.run_id)
    assert found["problems"] == ()
    assert found["kinds"].count("receipt") == 1
    [(action_id, worker_id, attempt_id, receipt_id)] = found["receipts"]
    assert (action_id, worker_id, attempt_id) == (
        claim.action_id,
        claim.worker_id,
        claim.attempt_id,
    )
    action: ActionRow = store.read(lambda s: s.get(ActionRow, claim.action_id))
    assert action.receipt_id == receipt_id
    assert action.status == ledger.SUCCEEDED  # the first receipt's, not the failed second
    row: ReceiptRow = store.read(lambda s: s.get(ReceiptRow, receipt_id))
    assert json.loads(row.body)["result"] == {"n": 1}
    assert _ledger_of(store, other.run_id)["problems"] == ()


def test_a_batch_failing_only_at_commit_is_recorded_apart_and_the_good_receipts_land(
    store: Store,
) -> None:
    """One run's hook queues a journal row that collides with an event already written: the
    statement that fails is the commit's, after every receipt of the batch was applied. The
    batch is recorded again message by message: the other receipts land, the bad one alone is
    refused, and no run's head passes what its journal holds."""
    good_a, poisoned, good_b = _claims(store, 3)

    def hook(s: Session, run: RunRow, action: ActionRow, result: Any, ctx: Context) -> None:
        if run.id == poisoned.run_id:
            first = run_queries.journal_after(s, run.id, 0, 1)[0]
            deferred.add(
                s,
                deferred.JOURNAL,
                {c.name: getattr(first, c.key) for c in deferred.JOURNAL.columns},
            )

    store.kinds["plan"] = RunKind(on_receipt=hook)
    refused: list[tuple[str, str]] = []
    recorded: list[tuple[str, bool, str]] = []

    async def record(batch: Sequence[Message]) -> None:
        recorded.extend(_verdicts(store.run(functools.partial(_apply_batch, batch=batch))))

    def refuse(message: Message, exc: Exception) -> None:
        refused.append((message.action_id, type(exc).__name__))

    ingest: Ingest[Message] = Ingest("receipts", record, refuse)
    asyncio.run(ingest([receipt(good_a), receipt(poisoned), receipt(good_b)]))

    assert ingest.batches_failed == 1
    assert [action_id for action_id, _ in refused] == [poisoned.action_id]
    assert refused[0][1] == "IntegrityError"
    assert sorted(recorded) == sorted([(good_a.action_id, True, ""), (good_b.action_id, True, "")])
    for claim in (good_a, good_b):
        found = _ledger_of(store, claim.run_id)
        assert found["problems"] == ()
        assert found["status"] == ledger.SUCCEEDED
        assert [r[0] for r in found["receipts"]] == [claim.action_id]
    bad = _ledger_of(store, poisoned.run_id)
    assert bad["problems"] == ()
    assert bad["receipts"] == []
    assert bad["events"] == bad["last_seq"]
    assert "receipt" not in bad["kinds"]
    action: ActionRow = store.read(lambda s: s.get(ActionRow, poisoned.action_id))
    assert action.status in ledger.IN_FLIGHT and not action.receipt_id


def test_a_run_stopped_by_a_receipt_is_handed_to_its_waiters_with_that_receipt(
    store: Store,
) -> None:
    """The view is read in the transaction that stopped the run, beside receipts of other
    runs: it shows the action finished with the receipt just queued and that receipt's trace."""
    claim, other = _claims(store, 2)
    store.bus.stop_view = stopped_view
    store.bus.subscribe_stop(claim.run_id)
    traced = dataclasses.replace(receipt(claim), traceparent=TRACE)
    batch: list[Message] = [receipt(other), traced]
    views: dict[str, Any] = {}

    def body(s: Session, ctx: Context) -> list[Order]:
        orders, stopped = transaction(
            s,
            ctx,
            functools.partial(_apply_batch, batch=batch),
            lambda s, orders, touched: orders,
            store.bus.views_of_stops,
        )
        views.update(stopped)
        return orders

    store.run(body)
    view: RunView = views[claim.run_id]
    assert view.run.status == ledger.SUCCEEDED
    [action] = view.actions
    assert action.status == ledger.SUCCEEDED and action.receipt_id
    assert view.receipt_traces == {action.receipt_id: TRACE}
    assert other.run_id not in views  # no waiter
    found = _ledger_of(store, claim.run_id)
    assert found["receipts"][0][3] == action.receipt_id
    assert found["problems"] == ()


def test_a_journal_check_inside_the_receipts_transaction_sees_its_own_rows(
    store: Store,
) -> None:
    """A run kind's receipt hook that walks the run's journal and receipts (as a report
    built from them does) finds the chain whole up to the run's head, this receipt included."""
    [claim] = _claims(store, 1)
    seen: list[tuple[int, int, int, tuple[str, ...], str | None]] = []

    def hook(s: Session, run: RunRow, action: ActionRow, result: Any, ctx: Context) -> None:
        checked = journal.verify(s, run)
        row = run_queries.receipt(s, action.receipt_id)
        seen.append(
            (
                checked.events,
                run.last_seq,
                checked.receipts,
                checked.problems,
                row.sha256 if row is not None else None,
            )
        )

    store.kinds["plan"] = RunKind(on_receipt=hook)
    store.run(functools.partial(_apply_batch, batch=[receipt(claim)]))
    [(events, head, receipts, problems, sha256)] = seen
    assert problems == ()
    assert events == head and receipts == 1
    found = _ledger_of(store, claim.run_id)
    assert sha256 is not None and found["problems"] == ()


def test_a_statement_on_mapped_classes_that_joins_or_nests_queued_tables_sees_their_rows(
    store: Store,
) -> None:
    """The session hook stands in for autoflush: it writes the queued rows before a statement
    that may read their tables. In a write transaction that autoflushes (not the ingest's), a
    statement selecting a mapped class (actions, runs) that joins receipts or reads the journal
    in a subquery read the transaction's own receipt and events when they were ORM objects."""
    [claim] = _claims(store, 1)
    ctx = Context(lease_ttl=30.0, max_attempts=3, workers=store.index, kinds=store.kinds)
    ctx.reset()
    with Session(store.engine, expire_on_commit=False) as s, s.begin():
        [verdict] = outcomes.apply_receipt(s, receipt(claim), ctx)[:1]
        assert isinstance(verdict, ReceiptVerdict) and verdict.accepted
        joined = s.execute(
            select(ActionRow.id).join(ReceiptRow, ReceiptRow.action_id == ActionRow.id)
        ).all()
        nested = s.execute(
            select(ActionRow).where(
                exists(select(ReceiptRow.id).where(ReceiptRow.action_id == ActionRow.id))
            )
        ).all()
        head, events = s.execute(
            select(
                RunRow.last_seq,
                select(func.count())
                .where(JournalRow.run_id == RunRow.id)
                .correlate(RunRow)
                .scalar_subquery(),
            ).where(RunRow.id == claim.run_id)
        ).one()
        seen = {"joined": len(joined), "nested": len(nested), "events": events}
    assert seen == {"joined": 1, "nested": 1, "events": head}
