"""A non-idempotent action with a postcondition, its worker and the coordinator both killed
mid-action, continues without a person: the restarted worker reports the attempt interrupted,
the coordinator checks the postcondition on it, and the action counts as done when its line
is there or runs once when it is not. Real coordinator and worker processes; the worker dies
at a test-only fault hook (shared/faults.py) right before or right after the append."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shared import faults
from tests.harness import (
    STOPPED,
    CoordinatorProcess,
    WorkerProcess,
    journal,
    submit,
    verify_journal,
    wait_run,
    write_plan,
)

LINE = {"name": "light.txt", "line": "lit in 1868"}


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[CoordinatorProcess]:
    # A lease long enough for the restarted worker to report before it lapses: the outcome is
    # known to be unknown from the worker's own action log, not from a silence.
    proc = CoordinatorProcess(tmp_path / "coord", lease=8.0).start()
    yield proc
    proc.stop()


@pytest.mark.parametrize(
    ("fault", "settled"),
    [
        (faults.WORKER_EXIT_AFTER_EFFECT, "action.observed"),
        (faults.WORKER_EXIT_BEFORE_EFFECT, "action.absent"),
    ],
)
def test_a_killed_append_with_a_postcondition_continues_without_a_person_and_writes_once(
    coordinator: CoordinatorProcess, tmp_path: Path, fault: str, settled: str
) -> None:
    worker = WorkerProcess(coordinator, "w", browser=False).start(fault=fault)
    try:
        worker.wait_online()
        plan = write_plan(
            tmp_path / "plan.json",
            [
                {
                    "kind": "diag.append",
                    "args": LINE,
                    "postcondition": {
                        "kind": "diag.has_line",
                        "args": LINE,
                        "expect": {"present": True},
                    },
                },
                {"kind": "diag.echo", "args": {"value": "after"}, "idempotent": True},
            ],
        )
        run = submit(coordinator, plan)
        assert worker.proc is not None and worker.proc.wait(30) == faults.EXIT_CODE
        coordinator.kill()  # kill -9, the worker already gone mid-action
        coordinator.start(port=coordinator.port)
        worker.start()  # unarmed: its action log says the attempt was interrupted
        done = wait_run(coordinator, run["id"], lambda r: r["status"] in STOPPED, 40)
        assert done["status"] == "SUCCEEDED", done["stopReason"]
        assert worker.scratch("light.txt").read_text() == "lit in 1868\n"  # written once
        events = journal(coordinator, run["id"])
        kinds = [e["kind"] for e in events]
        assert settled in kinds and "action.check" in kinds
        [check] = [e["data"] for e in events if e["kind"] == "action.check"]
        assert check["cause"] == "the worker stopped during the attempt"
        appends = [
            e for e in events if e["kind"] == "action.dispatched" and e["data"]["index"] == 0
        ]
        # The append, its check, and (only when the line was not there) the append once more.
        expected = ["diag.append", "diag.has_line"] + (
            ["diag.append"] if settled == "action.absent" else []
        )
        assert [e["data"]["kind"] for e in appends] == expected
        first = done["actions"][0]
        assert first["status"] == "SUCCEEDED"
        assert first["settledBy"] == ("observed" if settled == "action.observed" else "")
        assert verify_journal(coordinator, run["id"])["ok"] is True
    finally:
        worker.stop()


def test_a_check_whose_outcome_was_unknown_then_reported_running_stays_the_checks(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    """The check's attempt interrupted (the run handed back), then its worker saying it still
    runs it: the ledger took it back as the action's own attempt, and the check's receipt
    (`present: false`) made the never-run append SUCCEEDED. It is the check's receipt, and
    the append runs once more."""
    import json
    import time

    from shared.gen.deskfleet.v1 import worker_pb2
    from tests.harness.raw_worker import RawWorker

    worker = RawWorker(coordinator, "w")
    worker.connect()
    try:
        plan = write_plan(
            tmp_path / "plan.json",
            [
                {
                    "kind": "diag.append",
                    "args": LINE,
                    "idempotent": False,
                    "route": {"worker": worker.worker_id},
                    "postcondition": {
                        "kind": "diag.has_line", "args": LINE, "expect": {"present": True}
                    },
                }
            ],
        )  # fmt: skip
        run_id = submit(coordinator, plan)["id"]
        first = worker.expect("dispatch").dispatch
        worker.send(
            started=worker_pb2.ActionStarted(
                action_id=first.action_id, attempt_id=first.attempt_id, epoch=first.epoch
            )
        )
        time.sleep(0.3)
        worker.reconnect([(first, "interrupted")])
        check = worker.expect("dispatch").dispatch
        assert check.kind == "diag.has_line"
        worker.reconnect([(check, "interrupted")])
        wait_run(coordinator, run_id, lambda r: r["status"] == "HAND_BACK_TO_HUMAN", 15)
        worker.reconnect([(check, "running")])
        wait_run(coordinator, run_id, lambda r: r["status"] == "RUNNING", 15)
        now = time.time()
        worker.send(
            receipt=worker_pb2.Receipt(
                action_id=check.action_id, run_id=check.run_id, attempt_id=check.attempt_id,
                epoch=check.epoch, status="succeeded", started_at=now, finished_at=now,
                result_json=json.dumps({"name": LINE["name"], "present": False, "count": 0}),
            )
        )  # fmt: skip
        again = worker.expect("dispatch", timeout=15).dispatch
        assert (again.kind, again.epoch) == ("diag.append", check.epoch + 1)
        kinds = [e["kind"] for e in journal(coordinator, run_id)]
        assert "action.absent" in kinds and "action.observed" not in kinds, kinds
        assert coordinator.cli_json("runs", "show", run_id)["actions"][0]["status"] != "SUCCEEDED"
    finally:
        worker.close()
