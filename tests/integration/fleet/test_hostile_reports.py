"""A hostile worker's receipts and starts against a real coordinator (streams opened by hand,
`tests/harness/raw_worker.py`), beside a good worker's.

What it may not do: stall the receipts of other workers with one the coordinator cannot
record (B3: times that are no number, a result it cannot read back, NUL where PostgreSQL text
cannot hold it), make the store fail a batch with an id no id has (B8), or write without end
into a run it once touched, charged to the run's owner (B7): its refused reports are
journaled once per action, sender and reason, cost the owner nothing, and past a limit end
its stream.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from coordinator.admin_cli.render import as_dict
from shared.gen.deskfleet.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    desktop_pb2,
    desktop_pb2_grpc,
    worker_pb2,
)
from tests.harness import (
    BIN,
    CoordinatorProcess,
    base_env,
    journal,
    submit,
    wait_run,
    wait_until,
    write_plan,
)
from tests.harness.raw_worker import HEADLESS, RawWorker

pytestmark = pytest.mark.slow

LIMIT = "refused reports limit max_refused_reports=100 per 60 s:"


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    return module_coordinator


@pytest.fixture
def raw(coordinator: CoordinatorProcess) -> Iterator[Callable[..., RawWorker]]:
    made: list[RawWorker] = []

    def make(name: str, on: CoordinatorProcess | None = None) -> RawWorker:
        worker = RawWorker(on or coordinator, name)
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
    coordinator: CoordinatorProcess,
    worker: RawWorker,
    plan_dir: Path,
    token: Path | None = None,
    **limits: Any,
) -> tuple[str, worker_pb2.Dispatch]:
    """A run of one action routed to `worker` (as `token`'s owner), and its dispatch."""
    plan = write_plan(
        plan_dir / f"plan-{worker.worker_id}.json",
        [{"kind": "diag.echo", "args": {"value": 1}, "idempotent": True,
          "route": {"worker": worker.worker_id}}],
        **({"limits": limits} if limits else {}),
    )  # fmt: skip
    run_id = submit(coordinator, plan, token_file=token)["id"]
    d = worker.expect("dispatch", where=lambda m: m.dispatch.run_id == run_id).dispatch
    return run_id, d


def _acks(worker: RawWorker, n: int) -> list[worker_pb2.ReceiptAck]:
    return [worker.expect("receipt_ack", timeout=30).receipt_ack for _ in range(n)]


# ------------------------------------------------------------- B3: one bad receipt, no more


UNREADABLE = [
    '{"v": NaN}',
    '{"v": 1e400}',
    "[" * 100_000 + "]" * 100_000,
    '{"v": ' + "9" * 5000 + "}",
]


def test_receipts_the_coordinator_cannot_record_cost_a_good_workers_receipt_nothing(
    coordinator: CoordinatorProcess, raw: Callable[..., RawWorker], tmp_path: Path
) -> None:
    """The hostile worker's receipts for its own current attempt, with times that are no
    number or a result that cannot be read back, sent around a good worker's receipt: each is
    answered refused naming its field, and the good worker's run succeeds. (A NaN time once
    failed every batch it was in: a good worker's plan of 11 actions did 1 in 90 s.)"""
    hostile, good = raw("hostile"), raw("good")
    hostile.connect()
    good.connect()
    hostile_run, dh = _run_on(coordinator, hostile, tmp_path)
    good_run, dg = _run_on(coordinator, good, tmp_path)
    bad = [_receipt(dh, started_at=float("nan")) for _ in range(20)]
    bad += [_receipt(dh, finished_at=float("inf")) for _ in range(20)]
    bad += [_receipt(dh, result_json=text) for text in UNREADABLE for _ in range(5)]
    for r in bad[:30]:
        hostile.send(receipt=r)
    good.send(receipt=_receipt(dg))
    for r in bad[30:]:
        hostile.send(receipt=r)
    ack = good.expect("receipt_ack", timeout=15).receipt_ack
    assert (ack.action_id, ack.accepted) == (dg.action_id, True)
    assert wait_run(coordinator, good_run, lambda r: r["status"] == "SUCCEEDED")
    reasons = [a.reason for a in _acks(hostile, len(bad))]
    assert reasons[:20] == ["started_at: a finite number of seconds (got nan)"] * 20
    assert reasons[20:40] == ["finished_at: a finite number of seconds (got inf)"] * 20
    assert all(r.startswith("result_json: not valid JSON") for r in reasons[40:]), reasons[40:]
    assert all("\n" not in r and len(r) <= 200 for r in reasons)
    # Nothing of it was recorded; its own real receipt still is (its stream was not ended:
    # 60 refusals are within the limit).
    assert wait_run(coordinator, hostile_run, lambda r: True)["status"] == "RUNNING"
    hostile.send(receipt=_receipt(dh))
    assert hostile.expect("receipt_ack").receipt_ack.accepted
    assert wait_run(coordinator, hostile_run, lambda r: r["status"] == "SUCCEEDED")


@pytest.fixture
def pg_coordinator(pg_store: tuple[str, Path], tmp_path: Path) -> Iterator[CoordinatorProcess]:
    url, credentials = pg_store
    coordinator = CoordinatorProcess(tmp_path / "pg", url)
    shutil.copy(credentials / "admin.token", coordinator.admin_token_file)
    shutil.copy(credentials / "secrets.key", coordinator.secrets_key_file)
    coordinator.start()
    yield coordinator
    coordinator.stop()


@pytest.mark.postgres
def test_on_postgresql_nul_in_a_receipt_or_an_id_costs_no_other_worker_anything(
    pg_coordinator: CoordinatorProcess, raw: Callable[..., RawWorker], tmp_path: Path
) -> None:
    """NUL, which PostgreSQL text cannot hold, in an error, an action id, a start or a kill
    switch acknowledgement, around a good worker's receipt and acknowledgement: each is
    refused before it reaches the store, and the good worker's count (B3, B8)."""
    coordinator = pg_coordinator
    hostile, good = raw("hostile", coordinator), raw("good", coordinator)
    hostile.connect()
    good.connect()
    _, dh = _run_on(coordinator, hostile, tmp_path)
    good_run, dg = _run_on(coordinator, good, tmp_path)
    nul_error = _receipt(dh, status="failed", error="bad\x00")
    nul_id = _receipt(dh, action_id="act_\x00", run_id="run_\x00")
    nul_start = worker_pb2.ActionStarted(action_id="act_\x00", attempt_id=dh.attempt_id)
    for i in range(40):  # 80 refused reports: the stream stays within its limit
        hostile.send(receipt=nul_error if i % 2 else nul_id)
        hostile.send(started=nul_start)
        if i == 20:
            good.send(receipt=_receipt(dg))
    ack = good.expect("receipt_ack", timeout=15).receipt_ack
    assert (ack.action_id, ack.accepted) == (dg.action_id, True)
    assert wait_run(coordinator, good_run, lambda r: r["status"] == "SUCCEEDED")
    reasons = {a.reason for a in _acks(hostile, 40)}
    assert reasons == {
        "error: U+0000 at 3 is no character the store's text can hold",
        "action_id: an id holds only 0-9, a-z and _ (U+0000 at 4)",
    }

    # Kill switch acknowledgements: 300 with NUL ids around each real one, three times (one
    # such batch lost the real acknowledgement in 2 of 3 runs).
    for _ in range(3):
        kill = coordinator.cli_json("kill", "engage", "--worker", good.worker_id, "--reason", "t")
        good.expect("kill", where=lambda m, k=kill["id"]: m.kill.kill_id == k)
        for i in range(150):
            hostile.send(kill_ack=worker_pb2.KillAck(kill_id=f"kill_\x00{i}", engaged=True))
        good.send(kill_ack=worker_pb2.KillAck(kill_id=kill["id"], engaged=True))
        for i in range(150):
            hostile.send(kill_ack=worker_pb2.KillAck(kill_id=f"kill_\x00{i}", engaged=True))

        def acked(kill_id: str = kill["id"]) -> bool:
            return bool(_switch(coordinator, kill_id)["acknowledged"] == [good.worker_id])

        wait_until(acked, 15, 0.2, "the good worker's acknowledgement")
        coordinator.cli("kill", "release", "--id", kill["id"], "--reason", "t")

    # A hello that says it holds an attempt whose id holds NUL is refused, naming it.
    liar = raw("liar", coordinator)
    held = worker_pb2.HeldAction(action_id="act_\x00", attempt_id="att", state="running")
    liar.open(worker_pb2.Hello(advertisement=HEADLESS.to_proto(), held=[held]))
    with pytest.raises(grpc.RpcError) as caught:
        liar.expect("welcome", timeout=15)
    error: Any = caught.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "held[0].action_id: an id holds only 0-9, a-z and _ (U+0000 at 4)"
    log = coordinator.log.read_text()
    assert "could not record" not in log and "PostgreSQL text fields" not in log


def _switch(coordinator: CoordinatorProcess, kill_id: str) -> dict[str, Any]:
    channel = coordinator.channel()
    assert channel is not None
    reply = desktop_pb2_grpc.KillSwitchServiceStub(channel).Status(
        desktop_pb2.KillStatusRequest(include_released=True),
        metadata=coordinator.admin_metadata(),
        timeout=30,
    )
    switch: dict[str, Any] = next(s for s in as_dict(reply)["switches"] if s["id"] == kill_id)
    return switch


# ------------------------------------------------- B7: refused reports, journaled once, bounded


def _owner(coordinator: CoordinatorProcess, name: str, where: Path) -> Path:
    token = where / f"{name}.token"
    token.write_text(coordinator.cli_json("users", "create", name)["token"])
    return token


def _stored_bytes(coordinator: CoordinatorProcess, name: str) -> int:
    channel = coordinator.channel()
    assert channel is not None
    answer = admin_pb2_grpc.AdminServiceStub(channel).GetUserLimits(
        admin_pb2.GetUserLimitsRequest(name=name),
        metadata=coordinator.admin_metadata(),
        timeout=30,
    )
    return int(answer.stored_bytes)


def _ended_for_its_refusals(worker: RawWorker) -> str:
    error: Any = worker.ended(timeout=60)
    assert error is not None, "the stream was not ended"
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error.details()
    details: str = error.details()
    assert details.startswith(LIMIT) and "\n" not in details, details
    return details


def test_a_flood_of_refused_reports_adds_two_events_costs_the_owner_nothing_and_ends_the_streams(
    coordinator: CoordinatorProcess, raw: Callable[..., RawWorker], tmp_path: Path
) -> None:
    """1,000 stale receipts from the worker that finished the action of bob's run and 1,000
    starts of it from another worker: bob's journal grew by 3,000 events and his stored bytes
    by 629 KB for 3,000 stale receipts once; now each sender's first refusal is journaled,
    bob is charged nothing, and both streams are ended."""
    bob = _owner(coordinator, "bob-b7", tmp_path)
    once, foreign, marker = raw("once-trusted"), raw("foreign"), raw("marker")
    for worker in (once, foreign, marker):
        worker.connect()
    run_id, d = _run_on(coordinator, once, tmp_path, bob)
    once.send(started=worker_pb2.ActionStarted(action_id=d.action_id, attempt_id=d.attempt_id))
    once.send(receipt=_receipt(d))
    assert once.expect("receipt_ack").receipt_ack.accepted
    wait_run(coordinator, run_id, lambda r: r["status"] == "SUCCEEDED", token_file=bob)
    events = len(journal(coordinator, run_id, token_file=bob))
    stored = _stored_bytes(coordinator, "bob-b7")

    for i in range(1000):
        once.send(receipt=_receipt(d, attempt_id="att_x", epoch=d.epoch + 1 + i, status="failed"))
        foreign.send(
            started=worker_pb2.ActionStarted(action_id=d.action_id, attempt_id=d.attempt_id)
        )
    said = {_ended_for_its_refusals(once), _ended_for_its_refusals(foreign)}
    assert {s.rsplit("(the last: ", 1)[1] for s in said} <= {"stale_epoch)", "not_claimant)"}
    # Every message taken before the streams ended has been ingested once another worker's
    # receipt, sent after them, is answered (one ingest, in order).
    _, dm = _run_on(coordinator, marker, tmp_path)
    marker.send(receipt=_receipt(dm))
    assert marker.expect("receipt_ack").receipt_ack.accepted

    added = journal(coordinator, run_id, token_file=bob, after=events)
    assert sorted((e["kind"], e["data"]["worker"]) for e in added) == [
        ("receipt.refused", once.worker_id),
        ("started.refused", foreign.worker_id),
    ]
    assert _stored_bytes(coordinator, "bob-b7") == stored
    assert wait_run(coordinator, run_id, lambda r: True, token_file=bob)["status"] == "SUCCEEDED"
    ended = [
        line for line in coordinator.log.read_text().splitlines() if "ended the stream" in line
    ]
    assert 1 <= len(ended) <= 2, ended  # logged at a bounded rate


def test_a_workers_late_reports_on_attempts_taken_back_are_not_held_against_its_stream(
    raw: Callable[..., RawWorker], tmp_path: Path
) -> None:
    """With the limit at 1, a worker whose attempts time out (a cancel, then a new attempt)
    sends the late start and receipt of each: none is counted, its stream lives on and its
    run succeeds. Two reports on attempts it never held then end it."""
    coordinator = CoordinatorProcess(
        tmp_path / "limited", serve_args=("--max-refused-reports", "1")
    ).start()
    try:
        slow = raw("slow", coordinator)
        slow.connect()
        run_id, d = _run_on(coordinator, slow, tmp_path, action_timeout_seconds=1.0)
        for _ in range(2):  # two attempts time out; the third is answered in time
            cancel = slow.expect("cancel", timeout=15).cancel
            assert (cancel.action_id, cancel.attempt_id) == (d.action_id, d.attempt_id)
            late = slow.expect("dispatch", timeout=15).dispatch
            slow.send(
                started=worker_pb2.ActionStarted(action_id=d.action_id, attempt_id=d.attempt_id)
            )
            slow.send(receipt=_receipt(d))
            stale = slow.expect("receipt_ack").receipt_ack
            assert not stale.accepted and stale.reason.startswith("stale epoch"), stale.reason
            d = late
        slow.send(started=worker_pb2.ActionStarted(action_id=d.action_id, attempt_id=d.attempt_id))
        slow.send(receipt=_receipt(d))
        assert slow.expect("receipt_ack").receipt_ack.accepted
        assert wait_run(coordinator, run_id, lambda r: r["status"] == "SUCCEEDED")
        assert slow.error is None
        for epoch in (50, 51):
            slow.send(receipt=_receipt(d, attempt_id="att_never", epoch=epoch))
        error: Any = slow.ended(timeout=30)
        assert error is not None and error.code() == grpc.StatusCode.PERMISSION_DENIED
        assert error.details().startswith(
            "refused reports limit max_refused_reports=1 per 60 s: the coordinator refused 2"
        ), error.details()
    finally:
        coordinator.stop()


def test_the_refused_reports_limit_is_a_serve_setting(tmp_path: Path) -> None:
    done = subprocess.run(
        [BIN / "deskfleet-coordinator", "serve", "--db", "sqlite:///x.db",
         "--max-refused-reports", "-1"],
        capture_output=True, text=True, timeout=60, env=base_env(tmp_path), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "deskfleet-coordinator: --max-refused-reports: 0 (no limit) or more"
    ]
