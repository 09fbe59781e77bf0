"""One bad receipt never costs another worker's receipt its place (B3), in-process on the
ledger's rules, on SQLite and PostgreSQL: a result the coordinator cannot read back is that
receipt's refusal, not its batch's failure; and a batch whose transaction fails anyway is
recorded again by the dispatcher one message per transaction, the message that still fails
alone refused, the others recorded (a store outage refuses nothing:
tests/unit/ledger/test_ingest_apart.py).

The receipts here are built by hand, past the stream's own checks
(`streams/worker_bounds.receipt_refusal`, tests/unit/fleet/test_worker_bounds.py): these are
the defences behind them."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from sqlalchemy.orm import Session

from coordinator.heart import ledger
from coordinator.heart.context import Context, RunKind
from coordinator.heart.dispatch import Dispatcher, Started, _apply_batch
from coordinator.model.orders import (
    DispatchOrder,
    IncomingArtifact,
    IncomingReceipt,
    Order,
    ReceiptVerdict,
)
from coordinator.model.settings import CoordinatorConfig
from coordinator.store import Database
from coordinator.store.engine import create_store_engine
from coordinator.store.models import ActionRow, ArtifactRow, Base, RunRow
from coordinator.streams.journal_bus import JournalBus
from coordinator.streams.presence import Presence, WorkerSession
from coordinator.streams.relay import Relay
from coordinator.streams.worker_index import IndexUpdates
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


class _Dispatching:
    """The dispatcher in process over the store (one replica holding every worker's stream):
    messages go in as the gateway hands them over, verdicts come out of the streams."""

    def __init__(self, store: Store) -> None:
        self.url = str(store.engine.url.render_as_string(hide_password=False))
        self.store = store
        self._verdicts: dict[str, ReceiptVerdict] = {}

    async def __aenter__(self) -> _Dispatching:
        self.db = Database(self.url)
        self.presence = Presence(cast(Any, None), cast(Any, None), cast(Any, None))
        config = CoordinatorConfig(db_url=self.url)
        bus = JournalBus()
        relay = Relay(self.db, self.presence, bus, config, IndexUpdates(self.db, self.store.index))
        self.dispatcher = Dispatcher(
            self.db, self.presence, bus, config, relay, self.store.index, kinds=self.store.kinds
        )
        await self.dispatcher.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.dispatcher.aclose()
        await self.db.close()

    def stream(self, worker_id: str) -> WorkerSession:
        """An open stream of the worker, as `Presence.open` keeps it (without its writes)."""
        session = WorkerSession(worker_id, f"ses_{worker_id}")
        self.presence._sessions[worker_id] = session
        return session

    def send(self, *messages: Message) -> None:
        """Handed over together: they are in one batch."""
        for m in messages:
            if isinstance(m, Started):
                self.dispatcher.on_started(m)
            else:
                self.dispatcher.on_receipt(m)

    async def verdict(self, session: WorkerSession, action_id: str) -> ReceiptVerdict:
        """The verdict on the receipt of this action, from the worker's stream (the stream's
        other orders, other verdicts among them, are kept for the next call)."""
        while action_id not in self._verdicts:
            order = await asyncio.wait_for(session.outbox.get(), 20)
            if isinstance(order, ReceiptVerdict):
                self._verdicts[order.action_id] = order
        return self._verdicts.pop(action_id)


def _poison_run(store: Store, run_id: str) -> None:
    """A defect of ours for one run only: its kind's receipt hook raises."""

    def hook(s: Session, run: RunRow, action: ActionRow, result: Any, ctx: Context) -> None:
        if run.id == run_id:
            raise RuntimeError("the hook of this run is broken\nsecond line")

    store.kinds["plan"] = RunKind(on_receipt=hook)


async def test_a_batch_that_fails_is_recorded_message_by_message_and_only_the_bad_one_is_refused(
    store: Store,
) -> None:
    """And the defect kills nothing: the next batch is recorded (it once ended the ingest
    for good, every later receipt of the fleet left unanswered)."""
    good, poisoned, late, after = _claims(store, 4)
    _poison_run(store, poisoned.run_id)
    async with _Dispatching(store) as d:
        streams = {c.worker_id: d.stream(c.worker_id) for c in (good, poisoned, late, after)}
        d.send(
            Started(good.worker_id, good.action_id, good.attempt_id),
            receipt(good),
            receipt(poisoned),
            receipt(late),
        )
        for claim in (good, late):
            assert (await d.verdict(streams[claim.worker_id], claim.action_id)).accepted
        refused = await d.verdict(streams[poisoned.worker_id], poisoned.action_id)
        assert not refused.accepted
        assert refused.reason.startswith(
            "the coordinator could not record this receipt: internal error (ref err_"
        ), refused.reason
        assert "\n" not in refused.reason and "hook" not in refused.reason  # no defect's words
        d.send(receipt(after))
        assert (await d.verdict(streams[after.worker_id], after.action_id)).accepted
    assert [_status(store, c) for c in (good, poisoned, late, after)] == [
        ledger.SUCCEEDED,
        ledger.RUNNING,  # its attempt runs on, and times out as any unanswered one
        ledger.SUCCEEDED,
        ledger.SUCCEEDED,
    ]


@pytest.mark.postgres
async def test_on_postgresql_a_nul_that_gets_past_the_checks_costs_only_its_own_receipt(
    pg_url: str,
) -> None:
    """NUL in an error reached the action row: PostgreSQL refused the batch's commit, and the
    receipts of other workers in that batch were never acknowledged (B3)."""
    engine = create_store_engine(pg_url)
    Base.metadata.create_all(engine)
    store = Store(engine)
    try:
        first, bad, last = _claims(store, 3)
        nul = dataclasses.replace(receipt(bad, status="failed"), error="bad\x00")
        async with _Dispatching(store) as d:
            streams = {c.worker_id: d.stream(c.worker_id) for c in (first, bad, last)}
            d.send(receipt(first), nul, receipt(last))
            for claim in (first, last):
                assert (await d.verdict(streams[claim.worker_id], claim.action_id)).accepted
            refused = await d.verdict(streams[bad.worker_id], bad.action_id)
            assert not refused.accepted and refused.reason.startswith(
                "the coordinator could not record this receipt: internal error (ref err_"
            ), refused.reason
        assert [_status(store, c) for c in (first, bad, last)] == [
            ledger.SUCCEEDED,
            ledger.RUNNING,
            ledger.SUCCEEDED,
        ]
    finally:
        engine.dispose()
