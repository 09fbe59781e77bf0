"""A worker's refused reports cost the run they name next to nothing (B7), in-process on the
ledger's rules, on SQLite and PostgreSQL: the journal holds the first refusal of each
(action, sender, reason) and the metrics count them all; none is charged to the run's owner;
each is noted for the budget of the sender's stream (`streams/worker_bounds.ReportBudget`)."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from coordinator.heart import ledger
from coordinator.heart.context import Context
from coordinator.heart.dispatch import INGEST_BATCH, Started, _apply_batch
from coordinator.model.orders import DispatchOrder, IncomingReceipt, Order
from coordinator.store import quotas
from coordinator.store.engine import create_store_engine
from coordinator.store.models import Base, JournalRow
from tests.harness.ledger import Store, in_flight, receipt

Message = IncomingReceipt | Started


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "postgresql":
        url: str = request.getfixturevalue("pg_url")
    else:
        url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = create_store_engine(url)
    Base.metadata.create_all(engine)
    yield Store(engine)
    engine.dispose()


class _Seen:
    """What the transactions of a flood noted and charged."""

    def __init__(self) -> None:
        self.refused: list[Any] = []  # `model.notes.ReportRefused`
        self.charged = 0  # bytes noted for the owners' usage

    def run(self, store: Store, messages: list[Message]) -> list[Order]:
        def unit(s: Session, ctx: Context) -> list[Order]:
            orders = _apply_batch(s, ctx, batch=messages)
            self.refused += [e for e in ctx.notes.events if type(e).__name__ == "ReportRefused"]
            self.charged += sum(n.stored_bytes for n in quotas.notes(s).values())
            return orders

        return store.run(unit)


def _journal(store: Store, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    def read(s: Session) -> list[tuple[str, dict[str, Any]]]:
        rows = s.execute(
            select(JournalRow.kind, JournalRow.data)
            .where(JournalRow.run_id == run_id)
            .order_by(JournalRow.seq)
        )
        return [(kind, json.loads(data)) for kind, data in rows]

    found: list[tuple[str, dict[str, Any]]] = store.read(read)
    return found


def _finished_run(store: Store) -> tuple[DispatchOrder, str]:
    """A run whose one action its worker finished, and another enrolled worker."""
    one, other = store.worker("w1"), store.worker("w2")
    store.submit(1)
    [claim] = in_flight(store)
    store.run(functools.partial(_apply_batch, batch=[receipt(claim)]))
    assert store.run_row(claim.run_id).status == ledger.SUCCEEDED
    return claim, (other if claim.worker_id == one else one)


def test_a_thousand_stale_receipts_and_foreign_starts_write_two_events_charged_to_no_one(
    store: Store,
) -> None:
    claim, other = _finished_run(store)
    before = _journal(store, claim.run_id)
    stale = [
        dataclasses.replace(
            receipt(claim, status="failed"), attempt_id="att_x", epoch=claim.epoch + i
        )
        for i in range(1, 1001)
    ]
    foreign = [Started(other, claim.action_id, claim.attempt_id) for _ in range(1000)]
    flood: list[Message] = [m for pair in zip(stale, foreign, strict=True) for m in pair]
    seen = _Seen()
    for at in range(0, len(flood), INGEST_BATCH):
        seen.run(store, flood[at : at + INGEST_BATCH])
    added = _journal(store, claim.run_id)[len(before) :]
    assert [kind for kind, _ in added] == ["receipt.refused", "started.refused"]
    (_, stale_event), (_, start_event) = added
    assert (stale_event["worker"], stale_event["epoch"]) == (claim.worker_id, claim.epoch + 1)
    assert stale_event["reason"] == f"stale epoch {claim.epoch + 1}; the current claim is epoch 1"
    assert start_event["worker"] == other
    assert seen.charged == 0  # neither the two events nor the rest cost the owner a byte
    # Every one is counted (the metrics, the streams' budgets); two were journaled.
    assert len(seen.refused) == 2000
    assert {(r.report, r.reason) for r in seen.refused} == {
        ("receipt", "stale_epoch"),
        ("start", "not_claimant"),
    }
    assert [(r.report, r.worker_id) for r in seen.refused if r.journaled] == [
        ("receipt", claim.worker_id),
        ("start", other),
    ]
    assert store.run_row(claim.run_id).status == ledger.SUCCEEDED


def test_each_sender_and_reason_gets_its_first_refusal_journaled(store: Store) -> None:
    """The first of each (action, sender, reason) is in the run's journal, where the run's
    owner reads who tried what; the same one repeated, in one batch or later, is not."""
    one, two, three = store.worker("w1"), store.worker("w2"), store.worker("w3")
    store.submit(1)
    [claim] = in_flight(store)
    others = [w for w in (one, two, three) if w != claim.worker_id]
    forged = [dataclasses.replace(receipt(claim), worker_id=w) for w in others]
    stale = [dataclasses.replace(receipt(claim), worker_id=w, epoch=9) for w in others]
    late = Started(claim.worker_id, claim.action_id, "att_older")
    seen = _Seen()
    seen.run(store, [*forged, *forged, *stale, late])
    seen.run(store, [*forged, *stale, late])
    refused = [
        (k, d["worker"], d["reason"]) for k, d in _journal(store, claim.run_id) if "refused" in k
    ]
    assert sorted(refused) == sorted(
        [
            ("receipt.refused", w, "this worker does not hold the claim on the attempt")
            for w in others
        ]
        + [("receipt.refused", w, "stale epoch 9; the current claim is epoch 1") for w in others]
    )
    # A late start of the claimant itself is counted, never journaled (its attempt moved on).
    assert [r.reason for r in seen.refused if r.report == "start"] == ["not_in_flight"] * 2
    assert seen.charged == 0
    # The claimant's own receipt is recorded, and charged as ever.
    seen.run(store, [receipt(claim)])
    assert seen.charged > 0 and store.run_row(claim.run_id).status == ledger.SUCCEEDED


def test_a_refusal_noted_in_a_transaction_that_rolls_back_is_noted_again(store: Store) -> None:
    """The first refusal's mark is written with its journal event, in the same transaction:
    rolled back, the next try journals it."""
    claim, other = _finished_run(store)
    start = Started(other, claim.action_id, claim.attempt_id)

    def rolled_back(s: Session, ctx: Context) -> list[Order]:
        _apply_batch(s, ctx, batch=[start])
        raise RuntimeError("the transaction fails after the refusal")

    with pytest.raises(RuntimeError):
        store.run(rolled_back)
    assert not [k for k, _ in _journal(store, claim.run_id) if k == "started.refused"]
    _Seen().run(store, [start])
    assert [k for k, _ in _journal(store, claim.run_id) if k == "started.refused"] == [
        "started.refused"
    ]
