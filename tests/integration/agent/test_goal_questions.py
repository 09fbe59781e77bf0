"""A goal's questions as rows, on a real coordinator and the scripted provider (a replayed
model: no model service is reachable here).

A question was a journal event and a wait in the process that asked it: listed nowhere, and a
restart lost the wait (the rebuilt goal asked again). Now each `ask_human` call is one row; a
required one holds its goal across a kill -9 until a person answers, and the goal goes on with
that answer; an optional one lets the work go on, and a late answer joins the next model call.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import STOPPED, CoordinatorProcess, journal, wait_run, wait_until
from tests.harness.desktop_goals import new_owner


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoordinatorProcess]:
    """The module's coordinator: an optional question waits 1 s."""
    proc = CoordinatorProcess(
        tmp_path_factory.mktemp("questions"), serve_args=("--goal-question-wait", "1")
    ).start()
    yield proc
    proc.stop()


def _ask(question: str, *, required: bool) -> dict[str, Any]:
    return {
        "tool_calls": [
            {"name": "ask_human", "arguments": {"question": question, "required": required}}
        ]
    }


def _open_question(coordinator: CoordinatorProcess, goal: str, token: Path) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        run = coordinator.cli_json("runs", "show", goal, token_file=token)
        if run["status"] in STOPPED:
            raise AssertionError(f"the goal stopped: {run['stopReason']}")
        listed = coordinator.cli_json("questions", "list", "--run", goal, token_file=token)
        return listed["questions"][0] if listed.get("questions") else None

    return wait_until(found, 30, 0.2, "the goal's question")


def _kinds(coordinator: CoordinatorProcess, goal: str, token: Path, kind: str) -> list[dict]:
    return [e for e in journal(coordinator, goal, token_file=token) if e["kind"] == kind]


def test_a_required_question_holds_its_goal_across_a_restart_and_the_answer_goes_on(
    tmp_path: Path,
) -> None:
    coordinator = CoordinatorProcess(tmp_path / "c").start()
    try:
        token = new_owner(coordinator, "fay")
        model = coordinator.script(
            "required.json",
            [_ask("which lighthouse?", required=True), {"text": "noted", "tool_calls": []}],
        )
        goal = coordinator.cli_json("goal", "ask first", "--model", model, token_file=token)["id"]
        question = _open_question(coordinator, goal, token)
        assert question["required"] and question["status"] == "open"
        assert question["text"] == "which lighthouse?"
        waiting = coordinator.cli_json("runs", "show", goal, token_file=token)
        assert waiting["status"] == "WAITING_FOR_AUTHORITY"
        assert f"deskfleet questions answer {question['id']}" in waiting["waiting"]["detail"]

        coordinator.kill()  # kill -9: the wait dies with the process
        coordinator.start(port=coordinator.port)
        # Rebuilt, it waits on the same question: none asked again, and silence answers nothing.
        again = _open_question(coordinator, goal, token)
        assert again["id"] == question["id"]
        wait_run(
            coordinator,
            goal,
            lambda r: r["status"] == "WAITING_FOR_AUTHORITY",
            30,
            token_file=token,
        )
        answered = coordinator.cli_json(
            "questions", "answer", question["id"], "the north light", token_file=token
        )
        assert answered["status"] == "answered" and answered["answer"] == "the north light"
        done = wait_run(coordinator, goal, lambda r: r["status"] in STOPPED, 30, token_file=token)
        assert done["status"] == "SUCCEEDED", done["stopReason"]
        assert len(_kinds(coordinator, goal, token, "goal.question")) == 1
        (result,) = _kinds(coordinator, goal, token, "goal.tool_result")
        assert result["data"]["text"] == "the person answered: the north light"
        # The same answer again is the same answer; another is refused.
        same = coordinator.cli(
            "questions", "answer", question["id"], "the north light", token_file=token
        )
        assert "answered" in same.stdout
        other = coordinator.cli(
            "questions", "answer", question["id"], "the south one", token_file=token, check=False
        )
        assert other.returncode == 1 and "was already answered" in other.stderr
    finally:
        coordinator.kill()


def test_an_optional_question_lets_the_goal_go_on_and_a_late_answer_joins_its_next_call(
    coordinator: CoordinatorProcess,
) -> None:
    token = new_owner(coordinator, "gus")
    recalls = [
        {"sleep": 0.3, "tool_calls": [{"name": "recall", "arguments": {"text": f"w{i}"}}]}
        for i in range(12)
    ]
    model = coordinator.script(
        "optional.json",
        [_ask("north or south?", required=False), *recalls, {"text": "done", "tool_calls": []}],
    )
    goal = coordinator.cli_json("goal", "ask, then go on", "--model", model, token_file=token)["id"]
    wait_until(lambda: _kinds(coordinator, goal, token, "question.expired"), 20, 0.2, "the expiry")
    (asked,) = coordinator.cli_json("questions", "list", "--run", goal, "--all", token_file=token)[
        "questions"
    ]
    assert asked["status"] == "expired" and not asked["required"]
    assert coordinator.cli_json("questions", "list", token_file=token).get("questions", []) == []
    late = coordinator.cli_json("questions", "answer", asked["id"], "north", token_file=token)
    assert late["status"] == "answered" and late["guidanceId"]
    done = wait_run(coordinator, goal, lambda r: r["status"] in STOPPED, 60, token_file=token)
    assert done["status"] == "SUCCEEDED", done["stopReason"]
    (delivered,) = _kinds(coordinator, goal, token, "guidance.delivered")
    assert delivered["data"]["guidance"] == late["guidanceId"]
    (message,) = coordinator.cli_json("runs", "show", goal, token_file=token)["guidance"]
    assert message["text"] == "The answer to your question 'north or south?': north"


def test_a_question_is_its_owners_alone_and_expires_with_its_goal(
    coordinator: CoordinatorProcess,
) -> None:
    token = new_owner(coordinator, "hal")
    stranger = new_owner(coordinator, "ivy")
    model = coordinator.script("held.json", [_ask("may I?", required=True)])
    goal = coordinator.cli_json("goal", "ask and wait", "--model", model, token_file=token)["id"]
    question = _open_question(coordinator, goal, token)
    theirs = coordinator.cli(
        "questions", "answer", question["id"], "yes", token_file=stranger, check=False
    )
    assert theirs.returncode == 4 and f"no question {question['id']!r}" in theirs.stderr
    assert coordinator.cli_json("questions", "list", token_file=stranger).get("questions", []) == []
    empty = coordinator.cli(
        "questions", "answer", question["id"], " ", token_file=token, check=False
    )
    assert empty.returncode == 2
    coordinator.cli("runs", "cancel", goal, token_file=token)
    (ended,) = coordinator.cli_json("runs", "show", goal, token_file=token)["questions"]
    assert ended["status"] == "expired"
    late = coordinator.cli(
        "questions", "answer", question["id"], "yes", token_file=token, check=False
    )
    assert late.returncode == 1 and "expired: its goal is CANCELLED" in late.stderr
