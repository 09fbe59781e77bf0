"""A real run's timeline: a retried action's timeline adds up, and a waiting run shows where
it waits and for how long. The timeline of synthetic journals is
tests/unit/runs/test_timeline.py."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from tests.harness import CoordinatorProcess, WorkerProcess, journal, submit, write_plan


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    """One coordinator for the module's real runs: each test reads its own run and worker."""
    return module_coordinator


def _at(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_a_real_run_with_a_retried_action_has_a_timeline_that_adds_up(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    worker = workers("w")
    worker_id = worker.wait_online()["id"]
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"kind": "diag.sleep", "args": {"seconds": 0.3}, "idempotent": True},
            {
                "kind": "diag.fail",
                "args": {"message": "not yet", "fail_attempts": 1},
                "idempotent": True,
            },
            {"kind": "diag.sleep", "args": {"seconds": 0.2}, "idempotent": True},
        ],
        title="timed",
    )
    run = submit(coordinator, plan, wait=True)
    assert run["status"] == "SUCCEEDED"
    shown = coordinator.cli_json("runs", "show", run["id"])
    assert (shown["id"], shown["status"]) == (run["id"], "SUCCEEDED")
    t = shown["timeline"]

    # Durations add up: the states span exactly the run's wall time, submission to stop.
    assert math.isclose(sum(s["seconds"] for s in t["states"]), t["wallSeconds"], abs_tol=1e-6)
    events = journal(coordinator, run["id"])
    submitted = _at(events[0]["at"])
    ended = _at(events[-1]["at"])
    assert (events[0]["kind"], events[-1]["kind"]) == ("run.submitted", "run.state")
    assert math.isclose(t["wallSeconds"], ended - submitted, abs_tol=1e-3)
    assert t["states"][-1]["state"] == "SUCCEEDED" and t["states"][-1]["leftAt"] is None
    assert t["endedAt"] is not None and t["live"] is False
    # The sleeps happened inside it (never an assertion on how fast: only a lower bound).
    assert t["wallSeconds"] >= 0.5

    # Every attempt, with its worker and number; the failed one's retry and its cause.
    attempts = [(a["index"], a["kind"], a["attempt"], a["status"]) for a in t["actions"]]
    assert attempts == [
        (0, "diag.sleep", 1, "SUCCEEDED"),
        (1, "diag.fail", 1, "FAILED"),
        (1, "diag.fail", 2, "SUCCEEDED"),
        (2, "diag.sleep", 1, "SUCCEEDED"),
    ]
    assert {a["worker"] for a in t["actions"]} == {worker_id}
    assert t["actions"][0]["seconds"] >= 0.3 and t["actions"][3]["seconds"] >= 0.2
    ids = [a["id"] for a in shown["actions"]]
    assert [a["id"] for a in t["actions"]] == [ids[0], ids[1], ids[1], ids[2]]
    assert [(r["actionId"], r["attempt"]) for r in t["retries"]] == [(ids[1], 1)]
    assert "not yet" in t["retries"][0]["cause"]
    assert _at(t["retries"][0]["at"]) >= _at(t["actions"][1]["finishedAt"])

    # The stop reason is the run's.
    assert t["stopReason"] == shown["stopReason"] == "completed: every action succeeded"

    # People read the same thing.
    text = coordinator.cli("runs", "show", run["id"]).stdout
    assert "timeline" in text and "SUCCEEDED" in text
    assert "retry of action 1 after attempt 1" in text and "not yet" in text
    assert worker_id in text


def test_a_waiting_run_shows_where_it_waits_and_for_how_long(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    # Labels no worker has: a headless worker of another test can take it neither.
    zone = f"nowhere-{uuid.uuid4().hex[:8]}"
    route = {"capability": "headless", "labels": {"zone": zone}}
    plan = write_plan(
        tmp_path / "plan.json", [{"kind": "diag.echo", "args": {"value": 1}, "route": route}]
    )
    run = submit(coordinator, plan)
    first = coordinator.cli_json("runs", "show", run["id"])["timeline"]
    assert first["live"] is True and first["endedAt"] is None and first["stopReason"] == ""
    [waiting] = first["states"]
    assert waiting["state"] == "WAITING_FOR_ENVIRONMENT"
    assert waiting["reason"].startswith("no_eligible_worker: needs capability headless")
    assert waiting["leftAt"] is None and first["actions"] == []
    assert math.isclose(waiting["seconds"], first["wallSeconds"], abs_tol=1e-6)
    text = coordinator.cli("runs", "show", run["id"]).stdout
    assert "WAITING_FOR_ENVIRONMENT" in text and "no_eligible_worker" in text

    coordinator.cli("runs", "cancel", run["id"])
    shown = coordinator.cli_json("runs", "show", run["id"])
    t = shown["timeline"]
    assert [s["state"] for s in t["states"]] == ["WAITING_FOR_ENVIRONMENT", "CANCELLED"]
    assert t["stopReason"] == shown["stopReason"] and t["stopReason"].startswith("cancelled by")
    assert math.isclose(sum(s["seconds"] for s in t["states"]), t["wallSeconds"], abs_tol=1e-6)
    assert t["wallSeconds"] >= first["wallSeconds"]
    json.dumps(shown)  # one JSON document, nothing that cannot be written back
