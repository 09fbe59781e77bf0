"""A goal driven through the OpenAI Responses API on its generally available `computer` tool:
the coordinator's real provider, on the official `openai` SDK, talks to a stand-in of the
Responses API on loopback (tests/harness/models.py; no model service is reachable here), whose
one computer_call batches a click, the typing and the Return; the form is a real Chromium
window on Xvfb, acted on by a real worker after a person's approval.

The Anthropic provider on its default toolset drives the goals of test_goal_recovery.py and
tests/e2e/fleet/test_replicas.py through the same harness.
"""

from __future__ import annotations

import base64
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
    wait_run,
    wait_until,
)
from tests.harness.models import OpenAIResponsesStandIn

TEXT = "Lit in 1868, says the journal"


@pytest.fixture(scope="module")
def worker_browser() -> bool:
    return False  # the desk acts on the screen; it never browses


def _turns() -> list[dict[str, Any]]:
    x, y, w, h = FIELD
    click = {"type": "click", "button": "left", "x": x + w // 2, "y": y + h // 2}
    return [
        {"text": "Let me look.", "actions": [{"type": "screenshot"}]},
        {
            "actions": [
                click,
                {"type": "type", "text": TEXT},
                {"type": "keypress", "keys": ["ENTER"]},
            ]
        },
        {"text": "Done: the form holds the answer."},
    ]


@pytest.fixture
def stand_in() -> Iterator[OpenAIResponsesStandIn]:
    model = OpenAIResponsesStandIn(_turns()).start()
    yield model
    model.stop()


@pytest.fixture
def coordinator(tmp_path: Path, stand_in: OpenAIResponsesStandIn) -> Iterator[CoordinatorProcess]:
    proc = CoordinatorProcess(
        tmp_path / "coord", env=stand_in.env, serve_args=("--openai-computer-tool", "computer")
    ).start()
    yield proc
    proc.stop()


def test_a_goal_on_the_ga_computer_tool_fills_the_form_from_one_batch(
    coordinator: CoordinatorProcess,
    stand_in: OpenAIResponsesStandIn,
    workers: Callable[..., WorkerProcess],
    xvfb: Xvfb,
    window: Callable[[], None],
    desktop_site: DesktopSite,
) -> None:
    window()
    desktop_site.reset()
    desk = workers("desk", display_env=xvfb.env)
    desk.wait_online()
    goal = coordinator.cli_json(
        "goal", "write when the light was first lit", "--desktop", desk.worker_id,
        "--model", "openai:gpt-test",
    )  # fmt: skip
    approval = wait_until(
        lambda: coordinator.cli_json("approvals", "list")["approvals"], 60, 0.2, "the approval"
    )
    coordinator.cli("approvals", "approve", approval[0]["id"])
    done = wait_run(coordinator, goal["id"], lambda r: r["status"] in STOPPED, 120)
    assert done["status"] == "SUCCEEDED", done["stopReason"]
    submitted = wait_until(lambda: desktop_site.snapshot()[0], 15, 0.1, "the form's submit")
    assert submitted == [TEXT]  # the batch's click, typing and Return, in order

    # The batch ran as its actions, then the screenshot its output carries.
    events = journal(coordinator, goal["id"])
    results = [e["data"] for e in events if e["kind"] == "goal.tool_result"]
    assert [r["call"] for r in results] == [
        "call_01", "call_02:1", "call_02:2", "call_02:3", "call_02:screenshot",
    ]  # fmt: skip
    assert not any(r["is_error"] for r in results), results
    # Each computer_call was echoed once and answered once, with the screen after it.
    assert len(stand_in.requests) == 3
    for request, call_id in ((1, "call_01"), (2, "call_02")):
        output = stand_in.computer_outputs(request)[call_id]["output"]
        assert output["type"] == "computer_screenshot"
        prefix = "data:image/png;base64,"
        assert output["image_url"].startswith(prefix)
        assert base64.b64decode(output["image_url"][len(prefix) :]).startswith(b"\x89PNG")
    echoed = [i for i in stand_in.requests[2]["input"] if i.get("type") == "computer_call"]
    assert [c["call_id"] for c in echoed] == ["call_01", "call_02"]
    assert len(echoed[1]["actions"]) == 3
    assert {"type": "computer"} in stand_in.requests[0]["tools"]
