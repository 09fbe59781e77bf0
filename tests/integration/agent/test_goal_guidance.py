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

from tests.harness import STOPPED, CoordinatorProcess, journal, wait_run, wait_until
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


def test_guidance_on_a_desktop_approval_grants_nothing_and_reaches_the_goals_next_call(
    coordinator: CoordinatorProcess,
) -> None:
    owner = new_owner(coordinator, "fern")
    worker = RawWorker(coordinator, "desk")
    worker.connect(DESKTOP)
    try:
        recall = {"tool_calls": [{"name": "recall", "arguments": {"text": "window"}}]}
        model = coordinator.script(
            "approval-guided.json", [CURSOR, recall, {"text": "will ask again", "tool_calls": []}]
        )
        goal = coordinator.cli_json(
            "goal", "click it", "--desktop", worker.worker_id, "--model", model, token_file=owner
        )["id"]
        (approval,) = wait_until(
            lambda: coordinator.cli_json("approvals", "list")["approvals"], 30, 0.2, "an approval"
        )
        text = "not that window: use the left one"
        guided = coordinator.cli_json("approvals", "guide", approval["id"], text)
        assert guided["status"] == "guided" and guided["answer"] == text
        again = coordinator.cli_json("approvals", "guide", approval["id"], text)  # sent again
        assert again["status"] == "guided"
        done = wait_run(coordinator, goal, lambda r: r["status"] in STOPPED, 30, token_file=owner)
        assert done["status"] == "SUCCEEDED", done["stopReason"]
        with pytest.raises(TimeoutError):
            dispatch = worker.expect("dispatch", timeout=1).dispatch
            pytest.fail(f"{dispatch.kind} ran though nothing was approved")

        events = journal(coordinator, goal, token_file=owner)
        (held,) = [e["data"] for e in events if e["kind"] == "goal.tool_result"][:1]
        assert held["is_error"] and held["text"].startswith("not run: a person answered")
        (message,) = coordinator.cli_json("runs", "show", goal, token_file=owner)["guidance"]
        assert message["messageId"] == f"approval-{approval['id']}"
        assert message["text"].endswith(text) and message["status"] == "delivered"
        calls = [e["data"] for e in events if e["kind"] == "goal.model_call"]
        assert calls[1]["guidance"] == [message["id"]]
        # The request was asked anew for its own approval, never approved (and withdrawn when
        # the goal ended).
        (child,) = coordinator.cli_json("runs", "list", "--parent", goal, token_file=owner)["runs"]
        kinds = [e["kind"] for e in journal(coordinator, child["id"], token_file=owner)]
        assert "approval.guided" in kinds and "approval.granted" not in kinds
        asked = [
            e["data"]
            for e in journal(coordinator, child["id"], token_file=owner)
            if e["kind"] == "approval.requested"
        ]
        assert len(asked) == 2 and asked[1]["again"] is True
    finally:
        worker.close()


def test_an_approval_is_discussed_and_advised_and_neither_answers_it(
    coordinator: CoordinatorProcess,
) -> None:
    owner = new_owner(coordinator, "gale")
    stranger = new_owner(coordinator, "hugo")
    worker = RawWorker(coordinator, "desk")
    worker.connect(DESKTOP)
    try:
        model = coordinator.script("discussed.json", [CURSOR])
        goal = coordinator.cli_json(
            "goal", "press the key", "--desktop", worker.worker_id, "--model", model,
            token_file=owner,
        )["id"]  # fmt: skip
        (approval,) = wait_until(
            lambda: coordinator.cli_json("approvals", "list")["approvals"], 30, 0.2, "an approval"
        )
        coordinator.cli("approvals", "discuss", approval["id"], "is this the lab machine?")
        coordinator.cli(
            "approvals", "discuss", approval["id"], "yes, the left screen", token_file=owner
        )
        theirs = coordinator.cli(
            "approvals", "discuss", approval["id"], token_file=stranger, check=False
        )
        assert theirs.returncode == 4 and "no approval" in theirs.stderr

        advisor = coordinator.script("advisor.json", [{"text": "Narrow it to one display."}])
        advice = coordinator.cli_json("approvals", "advise", approval["id"], "--model", advisor)
        assert advice["kind"] == "advice" and advice["text"] == "Narrow it to one display."
        broken = coordinator.script("broken.json", [{"error": "overloaded"}])
        failed = coordinator.cli(
            "approvals", "advise", approval["id"], "--model", broken, check=False
        )
        assert failed.returncode == 5 and "overloaded" in failed.stderr

        found = coordinator.cli_json("approvals", "discuss", approval["id"])
        assert found["goalRequest"] == "press the key"
        assert [(n["kind"], n["text"]) for n in found["notes"]] == [
            ("message", "is this the lab machine?"),
            ("message", "yes, the left screen"),
            ("advice", "Narrow it to one display."),
        ]
        assert found["approval"]["status"] == "pending"  # advice and talk answered nothing
        shown = coordinator.cli("approvals", "discuss", approval["id"]).stdout
        assert "advice from model scripted:advisor.json" in shown
        (child,) = coordinator.cli_json("runs", "list", "--parent", goal, token_file=owner)["runs"]
        kinds = [e["kind"] for e in journal(coordinator, child["id"], token_file=owner)]
        assert kinds.count("approval.advice") == 1 and kinds.count("approval.advice_failed") == 1
        assert "approval.granted" not in kinds
        coordinator.cli("runs", "cancel", goal, token_file=owner)
    finally:
        worker.close()


def test_a_desktop_run_answered_with_guidance_still_refuses_its_acts(
    coordinator: CoordinatorProcess,
) -> None:
    owner = new_owner(coordinator, "iris")
    worker = RawWorker(coordinator, "desk")
    worker.connect(DESKTOP)
    try:
        run = coordinator.cli_json(
            "desktop", "request", "--worker", worker.worker_id, "--action", "key", token_file=owner
        )
        (approval,) = coordinator.cli_json("approvals", "list")["approvals"]
        coordinator.cli("approvals", "guide", approval["id"], "wait for the backup first")
        act = coordinator.cli(
            "desktop", "act", run["id"], "key", "--key", "Return", "--json",
            token_file=owner, check=False,
        )  # fmt: skip
        assert '"code": "not_approved"' in act.stdout, act.stdout
        with pytest.raises(TimeoutError):
            worker.expect("dispatch", timeout=1)
        shown = coordinator.cli_json("runs", "show", run["id"], token_file=owner)
        (message,) = shown["guidance"]
        assert message["text"].endswith("wait for the backup first")
        (asked_again,) = coordinator.cli_json("approvals", "list")["approvals"]
        assert asked_again["id"] != approval["id"] and asked_again["status"] == "pending"
        coordinator.cli("runs", "cancel", run["id"], token_file=owner)
    finally:
        worker.close()
