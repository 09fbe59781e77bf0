"""Guidance with an identity, on a real coordinator and worker: a send repeated with its
message id is one message, a message names the execution it was written for, and each says
where it stands (queued, delivered and to what, not received).

Each was broken once: the coordinator minted every message's id, so a send the CLI repeated
after a lost answer queued a second message and charged the quota twice; nothing checked that
a message was for the run's current attempt; a message the work never reached stayed "queued"
for ever.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shared import faults
from tests.harness import (
    BIN,
    STOPPED,
    CoordinatorProcess,
    WorkerProcess,
    base_env,
    journal,
    submit,
    wait_run,
    write_plan,
)
from tests.harness.plan_workers import no_browsers, shared_coordinator  # noqa: F401 (fixtures)


def _waiting_run(coordinator: CoordinatorProcess, path: Path) -> dict[str, Any]:
    """A run that waits (no worker can take its action) until the test ends it: at a boundary
    all along, so that guidance is delivered to it at once."""
    route = {"capability": "computer_use"}
    plan = write_plan(path, [{"kind": "diag.echo", "args": {}, "idempotent": True, "route": route}])
    return submit(coordinator, plan)


def _busy_run(coordinator: CoordinatorProcess, path: Path) -> dict[str, Any]:
    """A run whose first action is running on the worker: guidance waits for its end."""
    plan = write_plan(
        path,
        [
            {"kind": "diag.sleep", "args": {"seconds": 60}, "idempotent": True},
            {"kind": "diag.echo", "args": {}, "idempotent": True},
        ],
    )
    run = submit(coordinator, plan)
    wait_run(coordinator, run["id"], lambda r: r["actions"][0]["status"] == "STARTED")
    return run


def _queued_events(coordinator: CoordinatorProcess, run_id: str) -> list[dict[str, Any]]:
    return [e for e in journal(coordinator, run_id) if e["kind"] == "guidance.queued"]


def test_one_message_id_sent_twice_is_one_message(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    workers("w").wait_online()
    run = _busy_run(coordinator, tmp_path / "plan.json")
    first = coordinator.cli_json("runs", "guide", run["id"], "left window", "--message-id", "k1")
    again = coordinator.cli_json("runs", "guide", run["id"], "left window", "--message-id", "k1")
    assert not first.get("repeatedSend") and again["repeatedSend"] is True
    assert (again["guidanceId"], again["seq"]) == (first["guidanceId"], first["seq"])
    assert len(_queued_events(coordinator, run["id"])) == 1
    (message,) = coordinator.cli_json("runs", "show", run["id"])["guidance"]
    assert (message["messageId"], message["status"], message["text"]) == (
        "k1",
        "queued",
        "left window",
    )
    said = coordinator.cli("runs", "guide", run["id"], "left window", "--message-id", "k1")
    assert "was already queued" in said.stdout and "nothing sent twice" in said.stdout

    other = coordinator.cli(
        "runs", "guide", run["id"], "right window", "--message-id", "k1", check=False
    )
    assert other.returncode == 1
    assert "message_id 'k1' of run" in other.stderr and "already used for another" in other.stderr
    bad = coordinator.cli("runs", "guide", run["id"], "x", "--message-id", "a b", check=False)
    assert bad.returncode == 2 and "message_id: 1 to 128 of the characters" in bad.stderr
    # An approver's answer ends a goal's wait for approval: a sender cannot pose as one.
    posed = coordinator.cli(
        "runs", "guide", run["id"], "x", "--message-id", "approval-apr_1", check=False
    )
    assert posed.returncode == 2 and "are the coordinator's own" in posed.stderr
    # Without an id, each invocation is its own message.
    coordinator.cli("runs", "guide", run["id"], "left window")
    assert len(coordinator.cli_json("runs", "show", run["id"])["guidance"]) == 2


def test_a_cancelled_run_shows_its_queued_guidance_not_received(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    workers("w").wait_online()
    run = _busy_run(coordinator, tmp_path / "plan.json")
    coordinator.cli("runs", "guide", run["id"], "never read")
    coordinator.cli("runs", "cancel", run["id"])
    (message,) = coordinator.cli_json("runs", "show", run["id"])["guidance"]
    assert message["status"] == "not_received"
    assert message["deliveredTo"] == "the run stopped CANCELLED before a boundary took it"
    shown = coordinator.cli("runs", "show", run["id"]).stdout
    assert "guidance:   0 of 1 queued" in shown and "not_received" in shown


def test_the_execution_moves_at_a_retry_and_a_message_for_another_is_refused(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    workers("w").wait_online()
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"kind": "diag.fail", "args": {"message": "broken", "fail_attempts": 1}},
            {"kind": "diag.echo", "args": {}, "idempotent": True},
        ],
    )
    run = submit(coordinator, plan, wait=True)
    assert run["status"] == "FAILED" and run["execution"] == 1
    # Written for the execution it saw: it waits for the retry, which delivers it.
    coordinator.cli("runs", "guide", run["id"], "try once more", "--expected-execution", "1")
    retried = coordinator.cli_json("runs", "retry", run["id"])
    assert retried["execution"] == 2
    final = wait_run(coordinator, run["id"], lambda r: r["status"] in STOPPED)
    assert final["status"] == "SUCCEEDED"
    (message,) = coordinator.cli_json("runs", "show", run["id"])["guidance"]
    assert message["status"] == "delivered" and message["execution"] == 1
    assert message["deliveredTo"].startswith("the action boundary after 0 of 2 actions (journal #")

    waiting = _waiting_run(coordinator, tmp_path / "p2.json")
    stale = coordinator.cli(
        "runs", "guide", waiting["id"], "old news", "--expected-execution", "2", check=False
    )
    assert stale.returncode == 1
    assert f"run {waiting['id']} is at execution 1, not 2" in stale.stderr
    assert coordinator.cli_json("runs", "show", waiting["id"]).get("guidance", []) == []


def test_a_send_whose_answer_was_lost_is_repeated_as_the_same_message(tmp_path: Path) -> None:
    """The coordinator dies after it committed the message and before it answered: the CLI
    sends the same message again when it is back, and is told it was already queued."""
    coordinator = CoordinatorProcess(tmp_path / "c").start(fault=faults.EXIT_AFTER_GUIDANCE_COMMIT)
    try:
        run = _waiting_run(coordinator, tmp_path / "plan.json")
        env = base_env(coordinator.workdir) | {
            "DESKFLEET_COORDINATOR": coordinator.address,
            "DESKFLEET_TOKEN_FILE": str(coordinator.admin_token_file),
        }
        sender = subprocess.Popen(
            [BIN / "deskfleet", "runs", "guide", run["id"], "use the spare key"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert coordinator.proc is not None
        assert coordinator.proc.wait(30) == faults.EXIT_CODE
        coordinator.start(port=coordinator.port)
        out, err = sender.communicate(timeout=60)
        assert sender.returncode == 0, err
        assert "sending the same request again" in err
        assert "was already queued" in out, out
        (message,) = coordinator.cli_json("runs", "show", run["id"])["guidance"]
        # Delivered at once (the run waits at a boundary), and once.
        assert message["status"] == "delivered" and message["messageId"].startswith("cli-")
        assert len(_queued_events(coordinator, run["id"])) == 1
    finally:
        coordinator.kill()
