"""Goal runs end to end: the scripted provider (a replayed model, since no model service can be
reached here) drives the real coordinator's loop through real tools: research on the local
site by a real worker's Chromium, then the form in a real Chromium window on Xvfb after a
person's approval.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.agent.providers.scripted import NO_SUCH_SCRIPT
from scripts.local_site.server import FACTS
from tests.harness import (
    BIN,
    STOPPED,
    CoordinatorProcess,
    WorkerProcess,
    Xvfb,
    base_env,
    journal,
    wait_run,
    wait_until,
)
from tests.harness.sites import FIELD, DesktopSite

pytestmark = pytest.mark.slow

TEXT = "Lit in 1868, says the journal"


def _computer(action: str, **args: Any) -> dict[str, Any]:
    return {"name": "computer", "arguments": {"action": action, **args}}


def _approve_desktop(coordinator: CoordinatorProcess, goal_id: str) -> None:
    def pending() -> dict[str, Any] | None:
        run = coordinator.cli_json("runs", "show", goal_id)
        if run["status"] in STOPPED:
            raise AssertionError(f"the goal stopped: {run['stopReason']}")
        approvals = coordinator.cli_json("approvals", "list")["approvals"]
        return approvals[0] if approvals else None

    approval = wait_until(pending, 60, 0.2, "the goal's desktop approval")
    coordinator.cli("approvals", "approve", approval["id"])


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    """One coordinator for the module's goals (each test its own goals and scripts); the
    restart test has its own, and the time-out tests share one configured for them."""
    return module_coordinator


# A desk per test: a finished goal's run keeps the desktop's input lease for a while, so a
# desk shared with the next test would refuse that test's goal.
@pytest.fixture
def desk(
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


def test_a_scripted_goal_researches_then_fills_the_form_after_approval(
    coordinator: CoordinatorProcess,
    desk: WorkerProcess,
    desktop_site: DesktopSite,
    site: str,
    tmp_path: Path,
) -> None:
    x, y, w, h = FIELD
    model = coordinator.script(
        "form.json",
        [
            {
                "text": "First, what does the site say?",
                "tool_calls": [
                    {
                        "name": "research",
                        "arguments": {
                            "query": "when was the north light first lit",
                            "urls": [f"{site}/varn/north-light.html"],
                        },
                    }
                ],
            },
            {"text": "Now the form.", "tool_calls": [_computer("screenshot")]},
            {"tool_calls": [_computer("left_click", x=x + w // 2, y=y + h // 2)]},
            {"tool_calls": [_computer("type", text=TEXT)]},
            {"tool_calls": [_computer("key", key="Return")]},
            {"text": "Done: the form holds the answer.", "tool_calls": []},
        ],
    )
    goal = coordinator.cli_json(
        "goal",
        "write the north light's first lighting into the form",
        "--desktop",
        desk.worker_id,
        "--model",
        model,
    )
    _approve_desktop(coordinator, goal["id"])
    done = wait_run(coordinator, goal["id"], lambda r: r["status"] in STOPPED, 120)
    assert done["status"] == "SUCCEEDED", done["stopReason"]
    assert done["stopReason"].startswith("completed: Done")
    # The Return's receipt means the key was sent; the page posts its form a moment later.
    submitted = wait_until(lambda: desktop_site.snapshot()[0], 15, 0.1, "the form's submit")
    assert submitted == [TEXT]

    events = journal(coordinator, goal["id"])
    kinds = [e["kind"] for e in events]
    assert kinds.count("goal.model_call") == 6
    results = [e["data"] for e in events if e["kind"] == "goal.tool_result"]
    assert [r["name"] for r in results] == [
        "research",
        "computer",
        "computer",
        "computer",
        "computer",
    ]
    assert FACTS["/varn/north-light.html"] in results[0]["text"]
    assert results[1]["images"] and results[1]["images"][0]["media_type"] == "image/png"
    assert not any(r["is_error"] for r in results)


def test_a_kill_switch_stops_a_goal(
    coordinator: CoordinatorProcess, desk: WorkerProcess, tmp_path: Path
) -> None:
    model = coordinator.script(
        "kill.json",
        [{"tool_calls": [_computer("screenshot")]}]
        + [{"tool_calls": [_computer("wait", seconds=0.5 + i / 100)]} for i in range(40)],
    )
    goal = coordinator.cli_json(
        "goal", "look at the screen for a while", "--desktop", desk.worker_id, "--model", model
    )
    _approve_desktop(coordinator, goal["id"])
    wait_run(coordinator, goal["id"], lambda r: r["lastSeq"] > 12, 60)
    coordinator.cli("kill", "engage", "--worker", desk.worker_id, "--reason", "stop the goal")
    done = wait_run(coordinator, goal["id"], lambda r: r["status"] in STOPPED, 30)
    assert done["status"] == "HAND_BACK_TO_HUMAN" and done["stopReason"].startswith("kill_switch")


def test_a_stuck_goal_stops_and_a_missing_key_is_refused_at_submit(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    recall = {"name": "recall", "arguments": {}}  # fails at once: neither text nor seq
    model = coordinator.script("stuck.json", [{"tool_calls": [recall]}] * 5)
    goal = coordinator.cli_json("goal", "recall nothing, again and again", "--model", model)
    done = wait_run(coordinator, goal["id"], lambda r: r["status"] in STOPPED, 60)
    assert done["status"] == "HAND_BACK_TO_HUMAN"
    assert done["stopReason"].startswith("stuck: the same recall call 3 times")
    results = [
        e["data"] for e in journal(coordinator, goal["id"]) if e["kind"] == "goal.tool_result"
    ]
    assert len(results) == 2 and all(r["is_error"] for r in results)

    refused = coordinator.cli("goal", "x", "--model", "anthropic:claude-x", check=False)
    assert refused.returncode != 0 and "ANTHROPIC_API_KEY" in refused.stderr


def test_an_owner_cannot_make_the_coordinator_read_its_files_or_stall(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    token = tmp_path / "olga.token"
    token.write_text(coordinator.cli_json("users", "create", "olga")["token"])
    (coordinator.scripts_dir / "notjson.json").write_text("{" + " " * 232 + "x")
    (coordinator.scripts_dir / "sub").mkdir()
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"steps": [{"text": "hi"}]}))
    goal = [str(BIN / "deskfleet"), "goal", "read a file", "--model", "scripted:/dev/zero"]
    env = {
        **base_env(coordinator.workdir),
        "DESKFLEET_COORDINATOR": coordinator.address,
        "DESKFLEET_TOKEN_FILE": str(token),
    }
    started = time.monotonic()
    assert coordinator.cli_json("whoami", token_file=token)["name"] == "olga"
    alone = time.monotonic() - started  # a CLI call on this machine now, as the measure
    reading = subprocess.Popen(goal, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        started = time.monotonic()
        assert coordinator.cli_json("whoami", token_file=token)["name"] == "olga"
        # The loop was never blocked by a read (which took until MemoryError, many seconds).
        assert time.monotonic() - started < max(3.0, 3 * alone)
        _, err = reading.communicate(timeout=30)
    finally:
        if reading.poll() is None:
            reading.kill()
            reading.communicate()
    answers = {(reading.returncode, err.decode().strip())}
    for name in (str(outside), "../outside.json", "sub", "missing.json", "notjson.json"):
        done = coordinator.cli(
            "goal", "read a file", "--model", f"scripted:{name}", token_file=token, check=False
        )
        answers.add((done.returncode, done.stderr.strip()))
    assert answers == {(2, f"deskfleet: model: {NO_SUCH_SCRIPT}")}  # INVALID_ARGUMENT, one text
    coordinator.cli("goal", "x", "--model", coordinator.script("ok.json", []), token_file=token)


@pytest.fixture(scope="module")
def quick_goals(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoordinatorProcess]:
    """A coordinator whose goal loop gives a model 1 s and a question 1 s (for the module)."""
    proc = CoordinatorProcess(
        tmp_path_factory.mktemp("quick-goals"),
        serve_args=("--goal-model-timeout", "1", "--goal-question-wait", "1"),
    ).start()
    yield proc
    proc.stop()


def _events(coordinator: CoordinatorProcess, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in journal(coordinator, run_id) if e["kind"] == kind]


def test_a_model_time_out_is_retried_once_and_a_second_hands_back(
    quick_goals: CoordinatorProcess, tmp_path: Path
) -> None:
    recall = {"name": "recall", "arguments": {"text": "north"}}
    model = quick_goals.script(
        "once.json",
        [{"sleep": 5}, {"tool_calls": [recall]}, {"text": "finished", "tool_calls": []}],
    )
    goal = quick_goals.cli_json("goal", "find the north light", "--model", model)
    done = wait_run(quick_goals, goal["id"], lambda r: r["status"] in STOPPED, 30)
    assert done["status"] == "SUCCEEDED", done["stopReason"]
    assert len(_events(quick_goals, goal["id"], "goal.model_timeout")) == 1
    # The finished tool exchange was kept across the retry: the last call saw its result.
    assert len(_events(quick_goals, goal["id"], "goal.tool_result")) == 1

    model = quick_goals.script("twice.json", [{"sleep": 5}, {"sleep": 5}])
    goal = quick_goals.cli_json("goal", "never answered", "--model", model)
    done = wait_run(quick_goals, goal["id"], lambda r: r["status"] in STOPPED, 30)
    assert done["status"] == "HAND_BACK_TO_HUMAN"
    assert done["stopReason"].startswith("model_timeout")


def test_guidance_reaches_the_next_model_call_and_a_late_answer_joins_later(
    quick_goals: CoordinatorProcess, tmp_path: Path
) -> None:
    ask = {"name": "ask_human", "arguments": {"question": "which lighthouse?"}}
    steps: list[dict[str, Any]] = [{"tool_calls": [ask]}]
    steps += [
        {"sleep": 0.3, "tool_calls": [{"name": "recall", "arguments": {"text": f"w{i}"}}]}
        for i in range(12)
    ]
    model = quick_goals.script("ask.json", [*steps, {"text": "done", "tool_calls": []}])
    goal = quick_goals.cli_json("goal", "ask, then keep going", "--model", model)
    # The optional question waits 1 s, then the work goes on without an answer.
    wait_until(
        lambda: _events(quick_goals, goal["id"], "goal.tool_result"), 20, 0.1, "the question"
    )
    [question] = _events(quick_goals, goal["id"], "goal.tool_result")[:1]
    assert question["data"]["name"] == "ask_human" and "no answer" in question["data"]["text"]
    # A late answer (guidance) joins the next model call, whose receipt names it.
    guided = quick_goals.cli_json("runs", "guide", goal["id"], "the north light")
    done = wait_run(quick_goals, goal["id"], lambda r: r["status"] in STOPPED, 60)
    assert done["status"] == "SUCCEEDED", done["stopReason"]
    [delivered] = _events(quick_goals, goal["id"], "guidance.delivered")
    assert delivered["data"]["guidance"] == guided["guidanceId"]
    calls = {e["seq"]: e["data"] for e in _events(quick_goals, goal["id"], "goal.model_call")}
    assert calls[delivered["data"]["model_call"]]["guidance"] == [guided["guidanceId"]]


def test_a_goal_cut_by_a_coordinator_restart_goes_on_by_itself_from_its_journal(
    own_coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    coordinator = own_coordinator
    steps: list[dict[str, Any]] = [
        {"sleep": 0.15, "tool_calls": [{"name": "recall", "arguments": {"text": f"step {i}"}}]}
        for i in range(30)
    ]
    model = coordinator.script("long.json", [*steps, {"text": "all done", "tool_calls": []}])
    goal = coordinator.cli_json("goal", "a long goal", "--model", model)
    wait_until(
        lambda: len(_events(coordinator, goal["id"], "goal.tool_result")) >= 3, 30, 0.1, "3 steps"
    )
    coordinator.kill()
    coordinator.start(port=int(coordinator.address.rsplit(":", 1)[1]))
    done = wait_run(coordinator, goal["id"], lambda r: r["status"] in STOPPED, 60)
    assert done["status"] == "SUCCEEDED", done["stopReason"]
    # The restart made it RECOVERING while it was rebuilt from its journal, then RUNNING on.
    states = [e["data"]["status"] for e in _events(coordinator, goal["id"], "run.state")]
    assert "RECOVERING" in states and states[states.index("RECOVERING") + 1] == "RUNNING"
    after = _events(coordinator, goal["id"], "goal.tool_result")
    # Every completed step stayed done, and each step ran once: the loop took up the script
    # where it stood, with the conversation rebuilt from the journal.
    texts = [e["data"]["arguments"]["text"] for e in after]
    assert sorted(texts) == sorted(f"step {i}" for i in range(30))
