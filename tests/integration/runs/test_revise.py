"""A person changes direction: revise a plan run whose automatic recovery is spent, or answer
a spent estimate with guidance, on a real coordinator and worker.

Before, a run stopped for a person could only be retried as it was or abandoned.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.harness import (
    STOPPED,
    CoordinatorProcess,
    WorkerProcess,
    journal,
    submit,
    wait_run,
    write_plan,
)
from tests.harness.plan_workers import no_browsers, shared_coordinator  # noqa: F401 (fixtures)


def test_revise_keeps_what_ran_replaces_the_rest_once_and_counts_on(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    worker = workers("w")
    worker.wait_online()
    out = worker.scratch("lines.txt")
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"kind": "diag.append", "args": {"name": "lines.txt", "line": "first"}},
            {"kind": "diag.fail", "args": {"message": "wrong way"}},
            {"kind": "diag.echo", "args": {}, "idempotent": True},
        ],
    )
    run = submit(coordinator, plan, wait=True)
    assert run["status"] == "FAILED" and out.read_text() == "first\n"
    attempts = run["attemptsUsed"]

    with_limits = write_plan(
        tmp_path / "limits.json",
        [{"kind": "diag.echo", "args": {}, "idempotent": True}],
        limits={"max_actions": 99},
    )
    refused = coordinator.cli("runs", "revise", run["id"], str(with_limits), check=False)
    assert refused.returncode == 2 and "limits carry over from the run" in refused.stderr

    new_part = write_plan(
        tmp_path / "revised.json",
        [
            {"kind": "diag.append", "args": {"name": "lines.txt", "line": "second"}},
            {"kind": "diag.echo", "args": {"value": "done"}, "idempotent": True},
        ],
    )
    revised = coordinator.cli_json("runs", "revise", run["id"], str(new_part))
    assert revised["execution"] == 2
    final = wait_run(coordinator, run["id"], lambda r: r["status"] in STOPPED)
    assert final["status"] == "SUCCEEDED", final["stopReason"]
    assert out.read_text() == "first\nsecond\n"  # the append that ran never ran again
    assert final["attemptsUsed"] == attempts + 2  # counted on, nothing replenished
    kinds_and_states = [(a["kind"], a["status"]) for a in final["actions"]]
    assert kinds_and_states == [
        ("diag.append", "SUCCEEDED"),
        ("diag.fail", "SKIPPED"),
        ("diag.echo", "SKIPPED"),
        ("diag.append", "SUCCEEDED"),
        ("diag.echo", "SUCCEEDED"),
    ]
    assert final["actions"][1]["error"].startswith("replaced by the revised plan of admin")
    (event,) = [e["data"] for e in journal(coordinator, run["id"]) if e["kind"] == "run.revised"]
    assert [r["kind"] for r in event["replaced"]] == ["diag.fail", "diag.echo"]

    again = coordinator.cli("runs", "revise", run["id"], str(new_part), check=False)
    assert again.returncode == 1 and "was revised already" in again.stderr


def test_a_running_run_or_a_goal_is_not_revised(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    route = {"capability": "computer_use"}
    waiting = submit(
        coordinator,
        write_plan(
            tmp_path / "w.json",
            [{"kind": "diag.echo", "args": {}, "idempotent": True, "route": route}],
        ),
    )
    new_part = write_plan(
        tmp_path / "n.json", [{"kind": "diag.echo", "args": {}, "idempotent": True}]
    )
    running = coordinator.cli("runs", "revise", waiting["id"], str(new_part), check=False)
    assert running.returncode == 1 and "only a FAILED or HAND_BACK_TO_HUMAN run" in running.stderr
    coordinator.cli("runs", "cancel", waiting["id"])
    missing = coordinator.cli("runs", "revise", "run_nope", str(new_part), check=False)
    assert missing.returncode == 4


def test_a_spent_estimate_takes_guidance_as_a_third_answer_and_continue_and_stop_as_aliases(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    workers("w").wait_online()

    def spent(name: str) -> dict:
        plan = write_plan(
            tmp_path / f"{name}.json",
            [{"kind": "diag.echo", "args": {"value": i}, "idempotent": True} for i in range(6)],
            limits={"max_actions": 8, "estimate_actions": 1},
        )
        run = submit(coordinator, plan, wait=True)
        assert run["status"] == "HAND_BACK_TO_HUMAN"
        assert "guide it (runs guide) to change direction" in run["waiting"]["detail"]
        return run

    guided = spent("guided")
    coordinator.cli("runs", "guide", guided["id"], "finish the echoes, then stop")
    done = wait_run(coordinator, guided["id"], lambda r: r["status"] in STOPPED)
    assert done["status"] == "SUCCEEDED" and done["execution"] == 2
    (message,) = (
        done.get("guidance") or coordinator.cli_json("runs", "show", guided["id"])["guidance"]
    )
    assert message["status"] == "delivered"

    continued = spent("continued")
    coordinator.cli("runs", "continue", continued["id"])
    done = wait_run(coordinator, continued["id"], lambda r: r["status"] in STOPPED)
    assert done["status"] == "SUCCEEDED"
    stopped = spent("stopped")
    assert coordinator.cli_json("runs", "stop", stopped["id"])["status"] == "CANCELLED"
