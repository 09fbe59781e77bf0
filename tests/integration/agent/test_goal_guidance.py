"""A person's guidance to a goal, on a real coordinator with a hand-driven desktop worker
(`tests/harness/raw_worker.py`) and the scripted provider (a replayed model: no model service
is reachable here).

A goal ran every call of a model turn before it looked at new guidance: a correction sent
while the first of two `type`s ran still let the second type what the person had just said
not to. Now the calls not started wait for a model call that has read the correction.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.harness import STOPPED, CoordinatorProcess, journal, wait_run
from tests.harness.desktop_goals import (
    CURSOR,
    DESKTOP,
    approved_desktop_goal,
    new_owner,
    receipt,
)
from tests.harness.raw_worker import RawWorker


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    return module_coordinator


def _typing(text: str) -> dict[str, Any]:
    return {"name": "computer", "arguments": {"action": "type", "text": text}}


def test_guidance_during_a_turns_first_call_holds_the_rest_for_a_model_call_that_read_it(
    coordinator: CoordinatorProcess,
) -> None:
    owner = new_owner(coordinator, "dana")
    worker = RawWorker(coordinator, "desk")
    worker.connect(DESKTOP)
    try:
        steps = [
            CURSOR,
            {"tool_calls": [_typing("left"), _typing("right")]},
            {"text": "done as told", "tool_calls": []},
        ]
        goal = approved_desktop_goal(coordinator, worker, owner, steps)
        first = worker.expect("dispatch", timeout=20).dispatch
        assert first.kind == "desktop.type" and '"left"' in first.args_json
        guided = coordinator.cli_json(
            "runs", "guide", goal, "not the right window", token_file=owner
        )
        worker.send(receipt=receipt(first, {}))
        with pytest.raises(TimeoutError):
            late = worker.expect("dispatch", timeout=3).dispatch
            pytest.fail(f"{late.kind} {late.args_json} ran after the correction came in")
        done = wait_run(coordinator, goal, lambda r: r["status"] in STOPPED, 30, token_file=owner)
        assert done["status"] == "SUCCEEDED", done["stopReason"]

        events = journal(coordinator, goal, token_file=owner)
        results = [e["data"] for e in events if e["kind"] == "goal.tool_result"]
        held = results[-1]
        assert held["arguments"]["text"] == "right" and held["skipped"] == "guidance", held
        assert held["text"].startswith("not run: a person's guidance arrived")
        calls = [e for e in events if e["kind"] == "goal.model_call"]
        assert [c["data"]["guidance"] for c in calls] == [[], [], [guided["guidanceId"]]]
        (message,) = coordinator.cli_json("runs", "show", goal, token_file=owner)["guidance"]
        assert message["status"] == "delivered", message
        assert message["deliveredTo"] == f"model call 3 (journal #{calls[-1]['seq']})"
    finally:
        worker.close()


def test_guidance_no_model_call_took_is_not_received_when_the_goal_is_cancelled(
    coordinator: CoordinatorProcess,
) -> None:
    owner = new_owner(coordinator, "erin")
    worker = RawWorker(coordinator, "desk")
    worker.connect(DESKTOP)
    try:
        goal = approved_desktop_goal(
            coordinator, worker, owner, [CURSOR, {"tool_calls": [_typing("slowly")]}]
        )
        typed = worker.expect("dispatch", timeout=20).dispatch
        assert typed.kind == "desktop.type"
        coordinator.cli("runs", "guide", goal, "stop after this", token_file=owner)
        coordinator.cli("runs", "cancel", goal, token_file=owner)
        (message,) = coordinator.cli_json("runs", "show", goal, token_file=owner)["guidance"]
        assert message["status"] == "not_received", message
        assert message["deliveredTo"] == "the run stopped CANCELLED before a boundary took it"
        kinds = [e["kind"] for e in journal(coordinator, goal, token_file=owner)]
        assert "guidance.not_received" in kinds and "guidance.delivered" not in kinds
    finally:
        worker.close()
