"""A goal killed at the worst moments types its text once: the coordinator dies right after a
desktop `type` ran (its receipt committed, the goal's result not yet journaled), or while it
is in flight; restarted, it rebuilds the goal from its journal and the ledger, never from a
guess. The model is the coordinator's real Anthropic provider (on its default computer
toolset) talking to a stand-in of the Messages API on loopback (tests/harness/models.py), so
the test reads exactly what the model was sent after the restart; the form is a real Chromium
window on Xvfb.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import (
    FIELD,
    STOPPED,
    CoordinatorProcess,
    DesktopSite,
    WorkerProcess,
    Xvfb,
    journal,
    wait_until,
)
from tests.harness.models import AnthropicStandIn, computer

TEXT = "Lit in 1868, says the journal"
GUIDANCE = "use the field in the middle of the page"
TYPE_CALL = "toolu_03_0"  # the third turn's call: the type


def _turns() -> list[dict[str, Any]]:
    x, y, w, h = FIELD
    return [
        {"text": "Let me look.", "computer": [computer("screenshot")]},
        {"computer": [computer("left_click", coordinate=[x + w // 2, y + h // 2])]},
        {"computer": [computer("type", text=TEXT)]},
        {"computer": [computer("key", text="Return")]},
        {"text": "Done: the form holds the answer."},
    ]


@pytest.fixture
def stand_in() -> Iterator[AnthropicStandIn]:
    model = AnthropicStandIn(_turns()).start()
    yield model
    model.stop()


@pytest.fixture
def coordinator(tmp_path: Path, stand_in: AnthropicStandIn) -> Iterator[CoordinatorProcess]:
    """This test's own coordinator (it is killed), calling the stand-in as its model service;
    started by the test with the fault it needs."""
    proc = CoordinatorProcess(tmp_path / "coord", env=stand_in.env)
    yield proc
    proc.stop()


def _desk(
    coordinator: CoordinatorProcess,
    workers: Callable[..., WorkerProcess],
    xvfb: Xvfb,
    window: Callable[[], None],
    desktop_site: DesktopSite,
) -> WorkerProcess:
    window()
    desktop_site.reset()
    worker = workers("desk", display_env=xvfb.env)
    worker.wait_online()
    return worker


def _start_goal(coordinator: CoordinatorProcess, desk: WorkerProcess) -> str:
    goal = coordinator.cli_json(
        "goal", "write when the light was first lit", "--desktop", desk.worker_id,
        "--model", "anthropic:claude-test",
    )  # fmt: skip
    # Guidance sent before the kill joins the next model call, and must survive the restart.
    coordinator.cli("runs", "guide", goal["id"], GUIDANCE)
    _approve(coordinator)
    return str(goal["id"])


def _approve(coordinator: CoordinatorProcess) -> None:
    def pending() -> dict[str, Any] | None:
        listed = coordinator.cli_json("approvals", "list")["approvals"]
        return listed[0] if listed else None

    approval = wait_until(pending, 60, 0.2, "the goal's desktop approval")
    coordinator.cli("approvals", "approve", approval["id"])


def _restart_after_fault(coordinator: CoordinatorProcess, goal_id: str) -> dict[str, Any]:
    """Start the coordinator again once the armed fault stopped it, and the goal's stopped
    run once it ends. Its worker reconnects to a new session, which voids the desktop approval
    (SECURITY: an approval holds for one session): a desktop call after the restart waits
    until a person approves again, as this one does whenever asked."""
    assert coordinator.proc is not None
    assert coordinator.proc.wait(60) == 86, "the armed fault did not stop the coordinator"
    coordinator.start(port=coordinator.port)

    def stopped() -> dict[str, Any] | None:
        for approval in coordinator.cli_json("approvals", "list")["approvals"]:
            coordinator.cli("approvals", "approve", approval["id"])
        run = coordinator.cli_json("runs", "show", goal_id)
        return run if run["status"] in STOPPED else None

    return wait_until(stopped, 120, 0.3, "the goal's end after the restart")


def _typed_actions(coordinator: CoordinatorProcess, goal_id: str) -> list[dict[str, Any]]:
    [desktop] = coordinator.cli_json("runs", "list", "--parent", goal_id)["runs"]
    run = coordinator.cli_json("runs", "show", desktop["id"])
    return [a for a in run["actions"] if a["kind"] == "desktop.type"]


def test_a_goal_killed_right_after_its_type_ran_is_given_the_real_result_and_types_once(
    coordinator: CoordinatorProcess,
    stand_in: AnthropicStandIn,
    workers: Callable[..., WorkerProcess],
    xvfb: Xvfb,
    window: Callable[[], None],
    desktop_site: DesktopSite,
) -> None:
    # Receipts: the screenshot, the click, then the type: the coordinator exits right after
    # the type's receipt is committed, before the goal journals the call's result.
    coordinator.start(fault="exit-after-receipt-commit@3")
    desk = _desk(coordinator, workers, xvfb, window, desktop_site)
    goal_id = _start_goal(coordinator, desk)
    done = _restart_after_fault(coordinator, goal_id)
    assert done["status"] == "SUCCEEDED", done["stopReason"]
    submitted = wait_until(lambda: desktop_site.snapshot()[0], 15, 0.1, "the form's submit")
    assert submitted == [TEXT]  # typed once, then Return
    [typed] = _typed_actions(coordinator, goal_id)
    assert typed["status"] == "SUCCEEDED" and typed["attempts"] == 1
    # The model's first call after the restart holds the type's real result (its receipt),
    # never "not run", and the person's guidance where it was given.
    after = stand_in.requests[3]
    result = stand_in.tool_results(3)[TYPE_CALL]
    assert "succeeded" in json.dumps(result) and "not run" not in json.dumps(after)
    assert not result.get("is_error")
    # The provider's default: the toolset, whose member results name their family.
    assert {"type": "computer_toolset_20260801"} in after["tools"]
    assert result["toolset_name"] == "computer"
    assert GUIDANCE in json.dumps(after)
    events = journal(coordinator, goal_id)
    results = [e["data"] for e in events if e["kind"] == "goal.tool_result"]
    recovered = [r for r in results if r["call"] == TYPE_CALL]
    assert [r.get("recovered") for r in recovered] == [typed["id"]]  # read, not run again
    states = [e["data"]["status"] for e in events if e["kind"] == "run.state"]
    assert "RECOVERING" in states
    # The call was journaled as intent before it ran, in the desktop's own words.
    intents = [i for e in events if e["kind"] == "goal.model_call" for i in e["data"]["intents"]]
    assert {"call": TYPE_CALL, "does": "desktop.type", "args": {"text": TEXT}} in intents


def test_a_goal_killed_while_its_type_is_in_flight_types_at_most_once(
    coordinator: CoordinatorProcess,
    stand_in: AnthropicStandIn,
    workers: Callable[..., WorkerProcess],
    xvfb: Xvfb,
    window: Callable[[], None],
    desktop_site: DesktopSite,
) -> None:
    # Dispatches: the screenshot, the click, then the type: the coordinator exits as soon as
    # the type has gone down the worker's stream.
    coordinator.start(fault="exit-after-dispatch@3")
    desk = _desk(coordinator, workers, xvfb, window, desktop_site)
    goal_id = _start_goal(coordinator, desk)
    done = _restart_after_fault(coordinator, goal_id)
    [typed] = _typed_actions(coordinator, goal_id)  # the call became one action, never two
    result = stand_in.tool_results(3).get(TYPE_CALL)
    if typed["status"] == "SUCCEEDED":
        # The worker typed before the coordinator died: its receipt's result reached the model.
        submitted = wait_until(lambda: desktop_site.snapshot()[0], 15, 0.1, "the form's submit")
        assert submitted == [TEXT]
        assert result is not None and "succeeded" in json.dumps(result)
    elif typed["status"] == "FAILED":
        # The worker refused it, or stopped it part way (input stops while it has lost its
        # coordinator, and its error says how far it got): the model is told so, as it
        # happened; what was typed is exactly that, and nothing typed it again.
        assert result is not None and result.get("is_error")
        assert typed["error"] in json.dumps(result)
        part = re.search(r"typed (\d+) of \d+ characters", typed["error"])
        [submitted] = wait_until(lambda: desktop_site.snapshot()[0], 15, 0.1, "the form's submit")
        assert submitted == (TEXT[: int(part.group(1))] if part else ""), typed["error"]
    else:
        # Cut while typing: its outcome cannot be known, so a person decides, told which call.
        assert done["status"] == "HAND_BACK_TO_HUMAN", done
        assert TYPE_CALL in done["stopReason"] and typed["id"] in done["stopReason"]
        subprocess.run(["xdotool", "key", "Return"], env=xvfb.env, check=True, timeout=10)
        [value] = wait_until(lambda: desktop_site.snapshot()[0], 15, 0.1, "the form's submit")
        assert TEXT.startswith(value)  # some or all of it, once
    assert GUIDANCE in json.dumps(stand_in.requests[-1])
