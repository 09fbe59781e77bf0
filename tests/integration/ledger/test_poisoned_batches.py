"""One bad receipt never costs another worker's receipt its place (B3), in-process on the
ledger's rules, on SQLite and PostgreSQL: a result the coordinator cannot read back is that
receipt's refusal, not its batch's failure, and neither are the same bytes named twice.

The receipts here are built by hand, past the stream's own checks
(`streams/worker_bounds.receipt_refusal`, tests/unit/fleet/test_worker_bounds.py): these are
the defences behind them."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from coordinator.heart import ledger
from coordinator.heart.dispatch import Started, _apply_batch
from coordinator.model.orders import (
    DispatchOrder,
    IncomingArtifact,
    IncomingReceipt,
    Order,
    ReceiptVerdict,
)
from coordinator.store.engine import create_store_engine
from coordinator.store.models import ArtifactRow, Base, RunRow
from shared.receipts import content_sha256
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


def _claims(store: Store, runs: int) -> list[DispatchOrder]:
    """`runs` runs of one action each, every one dispatched (four slots a worker)."""
    for i in range((runs + 3) // 4):
        store.worker(f"w{i}")
    for _ in range(runs):
        store.submit(1)
    claims = in_flight(store)
    assert len(claims) == runs
    return claims


def _verdicts(orders: Sequence[Order]) -> dict[str, tuple[bool, str]]:
    return {o.action_id: (o.accepted, o.reason) for o in orders if isinstance(o, ReceiptVerdict)}


def _status(store: Store, claim: DispatchOrder) -> str:
    row: RunRow = store.read(lambda s: s.get(RunRow, claim.run_id))
    return row.status


UNREADABLE = {
    "NaN": '{"v": NaN}',
    "1e400": '{"v": 1e400}',
    "deep": "[" * 100_000 + "]" * 100_000,
    "5000 digits": '{"v": ' + "9" * 5000 + "}",
}


def test_a_result_the_coordinator_cannot_read_is_refused_and_the_receipts_around_it_count(
    store: Store,
) -> None:
    claims = _claims(store, 2 + len(UNREADABLE))
    good, bad = claims[:2], dict(zip(UNREADABLE, claims[2:], strict=True))
    batch: list[Message] = [receipt(good[0])]
    batch += [
        dataclasses.replace(receipt(claim), result_json=UNREADABLE[name])
        for name, claim in bad.items()
    ]
    batch.append(receipt(good[1]))
    verdicts = _verdicts(store.run(functools.partial(_apply_batch, batch=batch)))
    for claim in good:
        assert verdicts[claim.action_id] == (True, "")
        assert _status(store, claim) == ledger.SUCCEEDED
    for name, claim in bad.items():
        accepted, reason = verdicts[claim.action_id]
        assert not accepted and reason.startswith("result_json: not valid JSON"), (name, reason)
        assert "\n" not in reason and len(reason) <= 200, reason
        assert _status(store, claim) == ledger.RUNNING  # its attempt runs on: nothing recorded
    assert "out of range" in verdicts[bad["1e400"].action_id][1]


def test_a_receipt_naming_the_same_bytes_twice_is_recorded_with_one_artifact(
    store: Store,
) -> None:
    """Two artifacts of one transaction with the same sha256 in one run were two inserts of
    one row: the batch failed at its commit."""
    first, other = _claims(store, 2)
    data = b"\x89PNG same bytes"
    art = IncomingArtifact(content_sha256(data), "image/png", data, 1, 1)
    twice = dataclasses.replace(receipt(first), artifacts=(art, art))
    batch = [twice, receipt(other)]
    verdicts = _verdicts(store.run(functools.partial(_apply_batch, batch=batch)))
    assert verdicts == {first.action_id: (True, ""), other.action_id: (True, "")}
    rows = store.read(lambda s: s.query(ArtifactRow).filter_by(run_id=first.run_id).count())
    assert rows == 1
