"""Receipts and journal events written at their transaction's commit, against a hostile
worker on a real coordinator (streams opened by hand, `tests/harness/raw_worker.py`): the same
receipt sent again and again back to back, and receipts for another worker's attempt, around
that worker's own receipt, so that they share batches; and a receipt racing its run's cancel.
Each run ends with one receipt of its own claimant and a journal whose chain verifies."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.heart.outcomes import NOT_THE_CLAIMANT
from shared.gen.deskfleet.v1 import worker_pb2
from tests.harness import CoordinatorProcess, journal, submit, wait_run, write_plan
from tests.harness.raw_worker import RawWorker

pytestmark = pytest.mark.slow


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    return module_coordinator


@pytest.fixture
def raw(coordinator: CoordinatorProcess) -> Iterator[Callable[[str], RawWorker]]:
    made: list[RawWorker] = []

    def make(name: str) -> RawWorker:
        worker = RawWorker(coordinator, name)
        made.append(worker)
        return worker

    yield make
    for worker in made:
        worker.close()


def _receipt(d: worker_pb2.Dispatch, **kw: Any) -> worker_pb2.Receipt:
    now = time.time()
    fields: dict[str, Any] = {
        "action_id": d.action_id,
        "run_id": d.run_id,
        "attempt_id": d.attempt_id,
        "epoch": d.epoch,
        "status": "succeeded",
        "result_json": '{"echo": 1}',
        "started_at": now,
        "finished_at": now,
    }
    return worker_pb2.Receipt(**(fields | kw))


def _run_on(
    coordinator: CoordinatorProcess, worker: RawWorker, plan_dir: Path, tag: str
) -> tuple[str, worker_pb2.Dispatch]:
    plan = write_plan(
        plan_dir / f"plan-{tag}.json",
        [{"kind": "diag.echo", "args": {"value": 1}, "idempotent": True,
          "route": {"worker": worker.worker_id}}],
    )  # fmt: skip
    run_id = submit(coordinator, plan)["id"]
    d = worker.expect("dispatch", where=lambda m: m.dispatch.run_id == run_id).dispatch
    return run_id, d


def _verified(coordinator: CoordinatorProcess, run_id: str) -> dict[str, Any]:
    doc: dict[str, Any] = coordinator.cli_json("journal", "verify", run_id)
    return doc


def test_repeated_and_foreign_receipts_in_shared_batches_record_one_receipt_per_attempt(
    coordinator: CoordinatorProcess, raw: Callable[[str], RawWorker], tmp_path: Path
) -> None:
    hostile, good = raw("hostile-dup"), raw("good-dup")
    hostile.connect()
    good.connect()
    hostile_run, dh = _run_on(coordinator, hostile, tmp_path, "hostile")
    good_run, dg = _run_on(coordinator, good, tmp_path, "good")
    # Back to back on two streams: the ingest batches what arrives together.
    for i in range(6):
        hostile.send(receipt=_receipt(dh, result_json=f'{{"echo": {i}}}'))
        hostile.send(receipt=_receipt(dg, result_json='{"forged": true}'))
    good.send(receipt=_receipt(dg, result_json='{"echo": "good"}'))
    for _ in range(3):
        hostile.send(receipt=_receipt(dg, status="failed", error="forged"))

    ack = good.expect("receipt_ack", timeout=15).receipt_ack
    assert (ack.action_id, ack.accepted, ack.reason) == (dg.action_id, True, "")
    acks = [hostile.expect("receipt_ack", timeout=15).receipt_ack for _ in range(15)]
    own = [(a.accepted, a.reason) for a in acks if a.action_id == dh.action_id]
    foreign = [(a.accepted, a.reason) for a in acks if a.action_id == dg.action_id]
    assert own == [(True, "")] + [(True, "already recorded")] * 5
    assert foreign == [(False, NOT_THE_CLAIMANT)] * 9

    for run_id in (hostile_run, good_run):
        assert wait_run(coordinator, run_id, lambda r: r["status"] == "SUCCEEDED")
        verified = _verified(coordinator, run_id)
        assert verified["ok"] is True, verified
        assert verified["receiptsChecked"] == 1, verified
    good_events = journal(coordinator, good_run)
    receipts = [e["data"] for e in good_events if e["kind"] == "receipt"]
    assert len(receipts) == 1 and receipts[0]["attempt"] == dg.attempt_id
    refused = [e["data"] for e in good_events if e["kind"] == "receipt.refused"]
    assert [r["worker"] for r in refused] == [hostile.worker_id]  # journaled once
    hostile_receipts = [
        e["data"] for e in journal(coordinator, hostile_run) if e["kind"] == "receipt"
    ]
    assert [r["result"] for r in hostile_receipts] == [{"echo": 0}]


def test_a_receipt_racing_its_runs_cancel_leaves_one_verified_ledger(
    coordinator: CoordinatorProcess, raw: Callable[[str], RawWorker], tmp_path: Path
) -> None:
    """Whichever commits first, the run stops cancelled or succeeded, holds at most the one
    receipt, and its chain verifies; a repeat after the race changes nothing."""
    worker = raw("racer")
    worker.connect()
    run_id, d = _run_on(coordinator, worker, tmp_path, "race")
    worker.send(receipt=_receipt(d))
    coordinator.cli("runs", "cancel", run_id, check=False)
    first = worker.expect("receipt_ack", timeout=15).receipt_ack
    worker.send(receipt=_receipt(d, result_json='{"echo": 2}'))
    second = worker.expect("receipt_ack", timeout=15).receipt_ack
    stopped = wait_run(coordinator, run_id, lambda r: r["status"] in ("CANCELLED", "SUCCEEDED"))
    verified = _verified(coordinator, run_id)
    assert verified["ok"] is True, verified
    events = journal(coordinator, run_id)
    receipts = [e["data"] for e in events if e["kind"] == "receipt"]
    assert verified["receiptsChecked"] == len(receipts) <= 1, (verified, receipts)
    if first.accepted:
        assert [r["result"] for r in receipts] == [{"echo": 1}]
        assert (second.accepted, second.reason) == (True, "already recorded")
    else:
        assert receipts == [] and stopped["status"] == "CANCELLED"
