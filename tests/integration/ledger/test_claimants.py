"""Only the claimant reports on an attempt (30.3), in-process on the ledger's rules: a receipt
or a start from another enrolled worker is refused, journaled as refused and changes nothing,
whether it comes alone, in a batch beside real ones, or as a reconnecting worker's hello that
lists another worker's attempt. The claimant's own report is still taken afterwards."""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from coordinator.heart import ledger, outcomes
from coordinator.heart.context import Context
from coordinator.heart.dispatch import Started, _apply_batch
from coordinator.model.orders import CancelOrder, DispatchOrder, Held, Order, ReceiptVerdict
from coordinator.store.engine import create_store_engine
from coordinator.store.models import ActionRow, Base, JournalRow, ReceiptRow
from tests.harness.ledger import Store, apply_all, in_flight, receipt


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """The rules tests' store, on SQLite and on PostgreSQL."""
    if request.param == "postgresql":
        url: str = request.getfixturevalue("pg_url")
    else:
        url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = create_store_engine(url)
    Base.metadata.create_all(engine)
    yield Store(engine)
    engine.dispose()


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


def _action(store: Store, action_id: str) -> ActionRow:
    row: ActionRow = store.read(lambda s: s.get(ActionRow, action_id))
    return row


def _verdicts(orders: list[Order]) -> list[tuple[str, bool, str]]:
    return [(o.worker_id, o.accepted, o.reason) for o in orders if isinstance(o, ReceiptVerdict)]


def _claim_and_other(store: Store) -> tuple[DispatchOrder, str]:
    """One run of one action on one of two workers: its dispatch, and the other worker."""
    workers = {store.worker("w1"), store.worker("w2")}
    store.submit(1)
    [claim] = in_flight(store)
    [other] = workers - {claim.worker_id}
    return claim, other


def test_a_receipt_from_another_worker_is_refused_journaled_and_changes_nothing(
    store: Store,
) -> None:
    claim, other = _claim_and_other(store)
    forged = dataclasses.replace(receipt(claim), worker_id=other, result_json='{"forged": true}')
    before = _action(store, claim.action_id)
    orders = store.run(apply_all([forged]))
    assert _verdicts(orders) == [(other, False, outcomes.NOT_THE_CLAIMANT)]
    assert not [o for o in orders if isinstance(o, DispatchOrder)]
    after = _action(store, claim.action_id)
    assert (after.status, after.receipt_id, after.lease_expires_at) == (
        ledger.DISPATCHED,
        "",
        before.lease_expires_at,
    )
    run = store.run_row(claim.run_id)
    assert (run.status, run.actions_succeeded) == (ledger.RUNNING, 0)
    assert store.read(lambda s: s.query(ReceiptRow).count()) == 0
    [(kind, refused)] = [e for e in _journal(store, claim.run_id) if "refused" in e[0]]
    assert kind == "receipt.refused"
    assert refused["worker"] == other and refused["reason"] == outcomes.NOT_THE_CLAIMANT
    assert (refused["attempt"], refused["epoch"]) == (claim.attempt_id, claim.epoch)

    # The claimant's own receipt is taken, and its result is the one recorded.
    orders = store.run(apply_all([receipt(claim)]))
    assert _verdicts(orders) == [(claim.worker_id, True, "")]
    assert store.run_row(claim.run_id).status == ledger.SUCCEEDED
    [row] = store.read(lambda s: s.query(ReceiptRow).all())
    assert row.worker_id == claim.worker_id and '"forged"' not in row.body


def test_a_start_from_another_worker_is_refused_journaled_and_changes_nothing(
    store: Store,
) -> None:
    claim, other = _claim_and_other(store)
    before = _action(store, claim.action_id)
    start = functools.partial(
        _apply_batch, batch=[Started(other, claim.action_id, claim.attempt_id)]
    )
    assert store.run(start) == []
    after = _action(store, claim.action_id)
    assert (after.status, after.lease_expires_at) == (ledger.DISPATCHED, before.lease_expires_at)
    events = _journal(store, claim.run_id)
    assert [k for k, _ in events if k == "action.started"] == []
    [refused] = [d for k, d in events if k == "started.refused"]
    assert refused["worker"] == other and refused["reason"] == outcomes.NOT_THE_CLAIMANT

    own = functools.partial(
        _apply_batch, batch=[Started(claim.worker_id, claim.action_id, claim.attempt_id)]
    )
    store.run(own)
    assert _action(store, claim.action_id).status == ledger.STARTED


def test_a_forged_receipt_in_a_batch_leaves_the_real_ones_alone(store: Store) -> None:
    claim, other = _claim_and_other(store)
    forged = dataclasses.replace(receipt(claim), worker_id=other)
    batch = functools.partial(_apply_batch, batch=[forged, receipt(claim), forged])
    orders = store.run(batch)
    assert _verdicts(orders) == [
        (other, False, outcomes.NOT_THE_CLAIMANT),
        (claim.worker_id, True, ""),
        (other, False, outcomes.NOT_THE_CLAIMANT),
    ]
    assert store.run_row(claim.run_id).status == ledger.SUCCEEDED


def test_a_hello_listing_another_workers_attempt_changes_nothing(store: Store) -> None:
    claim, other = _claim_and_other(store)
    before = _action(store, claim.action_id)
    events_before = _journal(store, claim.run_id)
    for state in ("interrupted", "running", "finished"):
        held = (Held(claim.action_id, claim.attempt_id, claim.epoch, state),)

        def connect(s: Session, ctx: Context, held: tuple[Held, ...] = held) -> list[Order]:
            return outcomes.reconcile_workers(
                s, [outcomes.Reconnect(other, held, time.time())], ctx
            )

        orders = store.run(connect)
        # Nothing goes to the claimant; a "running" entry is only cancelled on the worker
        # that named it.
        assert all(o.worker_id == other for o in orders), orders
        assert all(isinstance(o, CancelOrder) for o in orders), orders
        after = _action(store, claim.action_id)
        assert (after.status, after.attempt_id, after.epoch, after.lease_expires_at) == (
            before.status,
            before.attempt_id,
            before.epoch,
            before.lease_expires_at,
        ), state
    assert _journal(store, claim.run_id) == events_before
    assert store.run_row(claim.run_id).status == ledger.RUNNING
