"""Recovery that loses nothing: killed workers, a killed coordinator, leases, timeouts, chaos."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from shared import faults
from shared.receipts import encode_result
from tests.harness import (
    STOPPED,
    CoordinatorProcess,
    WorkerProcess,
    journal,
    submit,
    verify_journal,
    wait_run,
    wait_until,
    write_plan,
)
from worker_agent.action_log import LOG_NAME, read_frames


@pytest.fixture(scope="module")
def worker_browser() -> bool:
    """These tests' workers never browse: they start without Chromium (--no-headless)."""
    return False


def _started(run: dict) -> bool:
    return run["actions"][0]["status"] == "STARTED"


def test_a_worker_killed_mid_action_loses_its_lease_and_an_idempotent_action_moves_on(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    first, second = workers("first"), workers("second")
    first.wait_online()
    second.wait_online()
    plan = write_plan(
        tmp_path / "plan.json", [{"kind": "diag.sleep", "args": {"seconds": 2}, "idempotent": True}]
    )
    run = wait_run(coordinator, submit(coordinator, plan)["id"], _started)
    victim = first if run["actions"][0]["workerId"] == first.worker_id else second
    survivor = second if victim is first else first
    victim.signal(signal.SIGKILL)
    done = wait_run(coordinator, run["id"], lambda r: r["status"] in STOPPED, 30)
    assert done["status"] == "SUCCEEDED"
    assert done["actions"][0]["workerId"] == survivor.worker_id
    assert done["actions"][0]["epoch"] == 2
    unknown = [e["data"] for e in journal(coordinator, run["id"]) if e["kind"] == "action.unknown"]
    assert [u["cause"] for u in unknown] == ["its claimant stopped responding (lease expired)"]


def test_a_non_idempotent_action_with_an_unknown_outcome_is_handed_back_not_retried(
    tmp_path: Path,
) -> None:
    # A lease long enough for the restarted worker to report before the lease lapses, so the
    # outcome is known to be unknown from the worker's own action log.
    coordinator = CoordinatorProcess(tmp_path / "coord", lease=8.0).start()
    worker = WorkerProcess(coordinator, "w", browser=False).start()
    try:
        _hand_back_then_retry(coordinator, worker, tmp_path)
    finally:
        worker.stop()
        coordinator.stop()


def _hand_back_then_retry(
    coordinator: CoordinatorProcess, worker: WorkerProcess, tmp_path: Path
) -> None:
    worker.wait_online()
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"kind": "diag.sleep", "args": {"seconds": 3}, "idempotent": False},
            {"kind": "diag.echo", "args": {}, "idempotent": True},
        ],
    )
    run = wait_run(coordinator, submit(coordinator, plan)["id"], _started)
    worker.signal(signal.SIGKILL)
    worker.proc.wait()  # type: ignore[union-attr]
    worker.start()  # its action log says the attempt was interrupted
    handed = wait_run(coordinator, run["id"], lambda r: r["status"] in STOPPED, 20)
    assert handed["status"] == "HAND_BACK_TO_HUMAN"
    assert handed["stopReason"].startswith("unknown_outcome: action 0 (diag.sleep")
    assert "the worker stopped during the attempt" in handed["stopReason"]
    assert handed["waiting"]["code"] == "unknown_outcome"
    time.sleep(2)  # nothing retries it by itself
    again = wait_run(coordinator, run["id"], lambda r: True)  # its state now
    assert again["status"] == "HAND_BACK_TO_HUMAN" and again["actions"][0]["attempts"] == 1
    # A person decides: retry runs it again, then the run finishes.
    coordinator.cli("runs", "retry", run["id"])
    done = wait_run(coordinator, run["id"], lambda r: r["status"] in STOPPED, 30)
    assert done["status"] == "SUCCEEDED" and done["actions"][0]["attempts"] == 2


def test_receipts_finished_while_the_coordinator_was_down_are_replayed_not_redone(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    worker = workers("w")
    worker.wait_online()
    out = worker.scratch("effects.txt")
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"kind": "diag.sleep", "args": {"seconds": 1.5}, "idempotent": False},
            {"kind": "diag.append", "args": {"name": "effects.txt", "line": "after"}},
        ],
    )
    run = wait_run(coordinator, submit(coordinator, plan)["id"], _started)
    port = coordinator.port
    coordinator.kill()
    time.sleep(2.5)  # the sleep finishes; its receipt waits in the worker's outbox
    coordinator.start(port=port)
    done = wait_run(coordinator, run["id"], lambda r: r["status"] in STOPPED, 40)
    assert done["status"] == "SUCCEEDED", done["stopReason"]
    events = journal(coordinator, run["id"])
    dispatched = [e["data"]["index"] for e in events if e["kind"] == "action.dispatched"]
    assert dispatched == [0, 1]  # nothing was sent twice
    assert out.read_text() == "after\n"
    assert verify_journal(coordinator, run["id"])["ok"] is True


def test_a_timed_out_attempt_is_fenced_off_from_its_successor(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    workers("w").wait_online()
    plan = write_plan(
        tmp_path / "plan.json",
        [{"kind": "diag.sleep", "args": {"seconds": 5}, "idempotent": True}],
        limits={"action_timeout_seconds": 1},
    )
    run = submit(coordinator, plan, wait=True)
    assert run["status"] == "FAILED"
    assert run["stopReason"] == (
        f"action 0 (diag.sleep, {run['actions'][0]['id']}) failed: 3 attempts exhausted"
        " (last: timed out after 1 s)"
    )
    events = journal(coordinator, run["id"])
    refused = [e["data"] for e in events if e["kind"] == "receipt.refused"]
    # The cancelled first attempts report back after a newer epoch holds the claim.
    assert refused and all(r["epoch"] < r["current_epoch"] for r in refused)
    assert not [e for e in events if e["kind"] == "receipt" and e["data"]["epoch"] < 3]


def test_retry_after_exhausted_recovery_continues_from_the_checkpoint(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    worker = workers("w")
    worker.wait_online()
    out = worker.scratch("once.txt")
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"kind": "diag.append", "args": {"name": "once.txt", "line": "x"}},
            {
                "kind": "diag.fail",
                "args": {"message": "down", "fail_attempts": 3},
                "idempotent": True,
            },
        ],
    )
    run = submit(coordinator, plan, wait=True)
    assert (
        run["status"] == "FAILED" and "failed (3 attempts): ActionFailed: down" in run["stopReason"]
    )
    used = run["attemptsUsed"]
    coordinator.cli("runs", "retry", run["id"])
    done = wait_run(coordinator, run["id"], lambda r: r["status"] in STOPPED)
    assert done["status"] == "SUCCEEDED"
    assert done["attemptsUsed"] == used + 1  # the budget was not replenished, only used
    assert out.read_text() == "x\n"  # the completed effect was not replayed


def test_chaos_killing_the_coordinator_loses_no_receipt_and_repeats_no_effect(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    both = [workers("a"), workers("b")]
    for worker in both:
        worker.wait_online()
    rng = random.Random(20261130)
    runs = []
    for r in range(4):
        actions = []
        for i in range(8):
            if i % 2 == 0:
                actions.append(
                    {
                        "kind": "diag.append",
                        "args": {"name": f"{r}-{i}.txt", "line": "done"},
                    }
                )
            else:
                actions.append({"kind": "diag.sleep", "args": {"seconds": 0.2}, "idempotent": True})
        runs.append(submit(coordinator, write_plan(tmp_path / f"plan{r}.json", actions))["id"])
    port = coordinator.port
    for _ in range(4):
        time.sleep(rng.uniform(0.3, 1.2))
        coordinator.kill()
        time.sleep(rng.uniform(0.1, 1.0))
        coordinator.start(port=port)
    finals = [
        wait_run(coordinator, run_id, lambda r: r["status"] in STOPPED, 90) for run_id in runs
    ]
    succeeded_appends = 0
    for r, final in enumerate(finals):
        assert final["status"] in ("SUCCEEDED", "HAND_BACK_TO_HUMAN"), final["stopReason"]
        events = journal(coordinator, final["id"])
        receipts = {e["data"]["action"]: e["data"] for e in events if e["kind"] == "receipt"}
        for action in final["actions"]:
            i = action["index"]
            if action["kind"] == "diag.sleep":
                if final["status"] == "SUCCEEDED":
                    assert action["status"] == "SUCCEEDED"
                continue
            # Whichever worker ran it wrote in its own scratch directory: count both.
            paths = [w.scratch(f"{r}-{i}.txt") for w in both]
            lines = [x for p in paths if p.exists() for x in p.read_text().splitlines()]
            if action["status"] == "SUCCEEDED":
                # Ran exactly once, and its receipt is in the journal.
                assert lines == ["done"], (final["id"], i)
                assert receipts[action["id"]]["status"] == "succeeded"
                succeeded_appends += 1
            else:
                assert final["status"] == "HAND_BACK_TO_HUMAN"
                assert f"action {i} (diag.append, {action['id']})" in final["stopReason"]
                assert len(lines) <= 1  # never repeated blindly
        assert verify_journal(coordinator, final["id"])["ok"] is True
    assert succeeded_appends >= 8  # the test did real work, not only hand-backs


def _unacknowledged(worker: WorkerProcess) -> set[tuple[str, str]]:
    """The receipts in the worker's action log that no acknowledgement follows (read only)."""
    pending: set[tuple[str, str]] = set()
    data = (worker.state_dir / "actions" / LOG_NAME).read_bytes()
    for _, _, payload in read_frames(data):
        record = json.loads(payload)
        if record["op"] == "receipt":
            pending.add((record["action_id"], record["attempt_id"]))
        elif record["op"] == "ack":
            pending.discard(tuple(record["key"]))
    return pending


def test_chaos_the_coordinator_dies_between_a_receipt_commit_and_its_ack(tmp_path: Path) -> None:
    """The receipt is in the store but the worker never heard so: after a restart on the same
    store and port the worker replays it, and the run ends with every receipt exactly once."""
    coordinator = CoordinatorProcess(tmp_path / "coord").start()
    worker = WorkerProcess(coordinator, "w", browser=False).start()
    try:
        worker.wait_online()
        port = coordinator.port
        coordinator.stop()  # the same store and port, now with the fault armed
        coordinator.start(port=port, fault=faults.EXIT_AFTER_RECEIPT_COMMIT)
        worker.wait_online()
        actions = []
        for i in range(6):
            if i % 2 == 0:
                actions.append({"kind": "diag.append", "args": {"name": f"{i}.txt", "line": "x"}})
            else:
                actions.append({"kind": "diag.echo", "args": {"value": i}, "idempotent": True})
        run_id = submit(coordinator, write_plan(tmp_path / "plan.json", actions))["id"]
        assert coordinator.proc is not None
        assert coordinator.proc.wait(30) == faults.EXIT_CODE  # died right after the commit
        # The first receipt is in the store, and still unacknowledged in the worker's log.
        db = sqlite3.connect(coordinator.workdir / "fleet.db")
        [(committed,)] = db.execute("SELECT action_id FROM receipts").fetchall()
        assert {a for a, _ in _unacknowledged(worker)} == {committed}
        coordinator.start(port=port)
        done = wait_run(coordinator, run_id, lambda r: r["status"] in STOPPED, 60)
        assert done["status"] == "SUCCEEDED", done["stopReason"]
        assert [a["status"] for a in done["actions"]] == ["SUCCEEDED"] * 6
        events = journal(coordinator, run_id)
        receipts = [e["data"]["action"] for e in events if e["kind"] == "receipt"]
        assert sorted(receipts) == sorted(a["id"] for a in done["actions"])  # each exactly once
        rows = db.execute("SELECT action_id, COUNT(*) FROM receipts GROUP BY action_id").fetchall()
        assert sorted(rows) == sorted((a["id"], 1) for a in done["actions"])
        for i in range(0, 6, 2):
            assert worker.scratch(f"{i}.txt").read_text() == "x\n"  # no effect repeated
        assert verify_journal(coordinator, run_id)["ok"] is True
        # The replayed receipt was acknowledged this time, like every other.
        wait_until(lambda: not _unacknowledged(worker), 10, 0.1, "every receipt acknowledged")
        db.close()
    finally:
        worker.stop()
        coordinator.stop()


def _as_older_layout(worker: WorkerProcess) -> int:
    """Rewrite a stopped worker's action log as an older worker left it: one JSON file per
    unacknowledged receipt in outbox/, per started record in started/. How many receipts."""
    root = worker.state_dir / "actions"
    records: dict[tuple[str, str, str], dict[str, object]] = {}
    for _, _, payload in read_frames((root / LOG_NAME).read_bytes()):
        record = json.loads(payload)
        op = record.pop("op")
        if op in ("ack", "forget"):
            a, t = record["key"]
            records.pop(("receipt", a, t), None)
            records.pop(("started", a, t), None)
        else:
            records[(op, record["action_id"], record["attempt_id"])] = record
    for (op, a, t), record in records.items():
        if op == "started" and ("receipt", a, t) in records:
            continue
        directory = root / ("outbox" if op == "receipt" else "started")
        directory.mkdir(exist_ok=True)
        (directory / f"{a}.{t}.json").write_text(encode_result(record))
    (root / LOG_NAME).unlink()
    return sum(1 for op, _, _ in records if op == "receipt")


def test_a_worker_upgraded_in_place_replays_its_older_outbox_once(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    worker = workers("w")
    worker.wait_online()
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"kind": "diag.append", "args": {"name": "before.txt", "line": "x"}},
            {"kind": "diag.sleep", "args": {"seconds": 1}, "idempotent": False},
            {"kind": "diag.append", "args": {"name": "after.txt", "line": "y"}},
        ],
    )
    run = wait_run(
        coordinator,
        submit(coordinator, plan)["id"],
        lambda r: r["actions"][1]["status"] == "STARTED",
    )
    port = coordinator.port
    coordinator.kill()
    time.sleep(2)  # the sleep finishes; its receipt waits, unacknowledged
    worker.stop()
    assert _as_older_layout(worker) == 1
    coordinator.start(port=port)
    worker.start()
    done = wait_run(coordinator, run["id"], lambda r: r["status"] in STOPPED, 40)
    assert done["status"] == "SUCCEEDED", done["stopReason"]
    events = journal(coordinator, run["id"])
    receipts = [e["data"]["action"] for e in events if e["kind"] == "receipt"]
    assert sorted(receipts) == sorted(a["id"] for a in done["actions"])  # each exactly once
    dispatched = [e["data"]["index"] for e in events if e["kind"] == "action.dispatched"]
    assert dispatched == [0, 1, 2]  # the sleep's receipt came from the older outbox
    assert worker.scratch("before.txt").read_text() == "x\n"
    assert worker.scratch("after.txt").read_text() == "y\n"
    actions = worker.state_dir / "actions"
    assert not (actions / "outbox").exists() and not (actions / "started").exists()
    wait_until(lambda: not _unacknowledged(worker), 10, 0.1, "every receipt acknowledged")
    assert verify_journal(coordinator, run["id"])["ok"] is True
