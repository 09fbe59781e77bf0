"""A goal's tree under a kill switch, a cancel and a model that names its calls or their fields
badly (and a zoom's region, which must reach the worker in the goal's space), on a
real coordinator with a hand-driven desktop worker (`tests/harness/raw_worker.py`) and the
scripted provider (a replayed model: no model service is reachable here).

Each was broken once: a switch engaged on a goal left its desktop child typing (the `type`
reached the worker 3 s after the switch); a goal cancelled while its model answered started a
child and sent its fetch; two calls of one turn with one id made a goal rebuilt after kill -9
end SUCCEEDED with the second `type` unresolved.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from shared import desktop_scope
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


def test_a_kill_switch_on_a_goal_covers_its_desktop_child(
    coordinator: CoordinatorProcess,
) -> None:
    owner = new_owner(coordinator, "alice")
    worker = RawWorker(coordinator, "desk")
    worker.connect(DESKTOP)
    try:
        typing = {"name": "computer", "arguments": {"action": "type", "text": "rm -rf"}}
        goal = approved_desktop_goal(
            coordinator, worker, owner, [CURSOR, {"sleep": 3, "tool_calls": [typing]}]
        )
        time.sleep(0.5)  # the model is thinking about its `type`
        coordinator.cli("kill", "engage", "--run", goal, "--reason", "stop it", token_file=owner)
        with pytest.raises(TimeoutError):
            dispatch = worker.expect("dispatch", timeout=6).dispatch
            pytest.fail(f"{dispatch.kind} {dispatch.args_json} reached the worker under the switch")
        done = wait_run(coordinator, goal, lambda r: r["status"] in STOPPED, 30, token_file=owner)
        assert done["status"] == "HAND_BACK_TO_HUMAN"
        assert done["stopReason"].startswith("kill_switch:"), done
        # The child's approval is suspended, and the owner's own act on it is refused.
        (child,) = coordinator.cli_json("runs", "list", "--parent", goal, token_file=owner)["runs"]
        assert child["status"] == "WAITING_FOR_AUTHORITY", child
        act = coordinator.cli(
            "desktop", "act", child["id"], "key", "--key", "Return", "--json",
            token_file=owner, check=False,
        )  # fmt: skip
        assert json.loads(act.stdout)["code"] == "kill_switch", act.stdout
        with pytest.raises(TimeoutError):
            worker.expect("dispatch", timeout=2)
        # The switch names the desktop worker as one it must reach.
        (switch,) = coordinator.cli_json("kill", "status")["switches"]
        assert switch["unacknowledged"] == [worker.worker_id] or switch["acknowledged"]
    finally:
        worker.close()


def test_a_goal_cancelled_while_its_model_answers_starts_nothing(
    coordinator: CoordinatorProcess,
) -> None:
    owner = new_owner(coordinator, "bob")
    worker = RawWorker(coordinator, "w1")
    worker.connect()
    try:
        fetch = {"name": "fetch", "arguments": {"url": "http://example.com/"}}
        model = coordinator.script("slow.json", [{"sleep": 2, "tool_calls": [fetch]}])
        goal = coordinator.cli_json("goal", "fetch it", "--model", model, token_file=owner)["id"]
        time.sleep(0.5)
        coordinator.cli("runs", "cancel", goal, token_file=owner)
        with pytest.raises(TimeoutError):
            worker.expect("dispatch", timeout=5)
        assert (
            coordinator.cli_json("runs", "list", "--parent", goal, token_file=owner)["runs"] == []
        )
        kinds = [e["kind"] for e in journal(coordinator, goal, token_file=owner)]
        after = kinds[kinds.index("run.state") + 1 :]
        assert "run.child" not in after and "goal.model_call" not in after, kinds
    finally:
        worker.close()


def test_one_call_id_given_twice_in_a_turn_runs_none_of_them(
    coordinator: CoordinatorProcess,
) -> None:
    """The results of a turn's calls are keyed by their ids: two calls with one id would get
    one result between them. Refused before anything runs, and the same after a restart."""
    owner = new_owner(coordinator, "carol")
    worker = RawWorker(coordinator, "desk")
    worker.connect(DESKTOP)
    try:

        def typing(text: str) -> dict[str, Any]:
            return {"id": "dup", "name": "computer", "arguments": {"action": "type", "text": text}}

        goal = approved_desktop_goal(
            coordinator,
            worker,
            owner,
            [CURSOR, {"tool_calls": [typing("AAAA"), typing("BBBB")]}, {"text": "all typed"}],
        )
        done = wait_run(coordinator, goal, lambda r: r["status"] in STOPPED, 30, token_file=owner)
        assert done["status"] == "HAND_BACK_TO_HUMAN", done
        assert done["stopReason"] == (
            "model_error: tool call id dup was given twice; none of its calls ran"
        )
        with pytest.raises(TimeoutError):
            worker.expect("dispatch", timeout=1)
    finally:
        worker.close()


def test_a_computer_field_the_desktop_does_not_take_is_refused_not_dropped(
    coordinator: CoordinatorProcess,
) -> None:
    """A provider's field with no neutral counterpart (the keys a model holds during a click)
    reaches the model as a refusal: dropped, a ctrl+click would have landed as a plain click."""
    owner = new_owner(coordinator, "dave")
    worker = RawWorker(coordinator, "desk")
    worker.connect(DESKTOP)
    try:
        ctrl_click = {
            "name": "computer",
            "arguments": {"action": "left_click", "x": 5, "y": 6, "keys": ["CTRL"]},
        }
        goal = approved_desktop_goal(
            coordinator, worker, owner, [CURSOR, {"tool_calls": [ctrl_click]}, {"text": "done"}]
        )
        done = wait_run(coordinator, goal, lambda r: r["status"] in STOPPED, 30, token_file=owner)
        assert done["status"] == "HAND_BACK_TO_HUMAN", done  # it stopped after a failed call
        with pytest.raises(TimeoutError):
            worker.expect("dispatch", timeout=0.5)
        results = [
            e["data"]
            for e in journal(coordinator, goal, token_file=owner)
            if e["kind"] == "goal.tool_result"
        ]
        assert results[-1]["is_error"], results[-1]
        assert "computer: left_click takes no 'keys'" in results[-1]["text"]
    finally:
        worker.close()


@pytest.mark.skipif(
    "zoom" not in desktop_scope.ACTIONS, reason="the desktop contract does not list zoom yet"
)
def test_a_zoom_goes_to_the_worker_with_its_region_in_the_goals_space(
    coordinator: CoordinatorProcess,
) -> None:
    owner = new_owner(coordinator, "erin")
    worker = RawWorker(coordinator, "desk")
    worker.connect(DESKTOP)
    try:
        zoom = {"name": "computer", "arguments": {"action": "zoom", "region": [0, 0, 320, 200]}}
        goal = approved_desktop_goal(
            coordinator, worker, owner, [CURSOR, {"tool_calls": [zoom]}, {"text": "seen"}]
        )
        dispatch = worker.expect("dispatch", timeout=20).dispatch
        assert dispatch.kind == "desktop.zoom"
        args = json.loads(dispatch.args_json)
        assert args["region"] == [0, 0, 320, 200]
        assert args["space"] == {"width": 1280, "height": 800}  # the region's coordinate space
        worker.send(receipt=receipt(dispatch, {}))
        done = wait_run(coordinator, goal, lambda r: r["status"] in STOPPED, 30, token_file=owner)
        assert done["status"] == "SUCCEEDED", done
    finally:
        worker.close()
