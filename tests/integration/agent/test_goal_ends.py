"""How a goal ends, on a real coordinator driven by the scripted provider (a replayed model:
no model service is reachable here): a model that stops right after failed calls is not a
plain success, and a goal whose journal was altered while its coordinator was down is not
rebuilt from it."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.harness import STOPPED, CoordinatorProcess, journal, wait_run, wait_until
from tests.harness.cli import run_in_process
from tests.harness.processes import BIN, base_env


def test_a_model_that_stops_right_after_failed_calls_hands_the_goal_back_naming_them(
    coordinator: CoordinatorProcess,
) -> None:
    failing = {"name": "no_such_tool", "arguments": {}}
    recall = {"name": "recall", "arguments": {"text": "anything"}}
    stops = coordinator.script(
        "stops-on-failure.json",
        [{"tool_calls": [failing]}, {"text": "All done.", "tool_calls": []}],
    )
    done = wait_run(
        coordinator,
        coordinator.cli_json("goal", "try", "--model", stops)["id"],
        lambda r: r["status"] in STOPPED,
        60,
    )
    assert done["status"] == "HAND_BACK_TO_HUMAN", done
    assert done["stopReason"].startswith("unverified: the model stopped after calls that failed")
    assert "no_such_tool" in done["stopReason"] and "All done." in done["stopReason"]
    # A failure the model went past (its last calls succeeded) ends as it said.
    recovered = coordinator.script(
        "recovers.json",
        [{"tool_calls": [failing]}, {"tool_calls": [recall]}, {"text": "Done.", "tool_calls": []}],
    )
    done = wait_run(
        coordinator,
        coordinator.cli_json("goal", "try again", "--model", recovered)["id"],
        lambda r: r["status"] in STOPPED,
        60,
    )
    assert (done["status"], done["stopReason"]) == ("SUCCEEDED", "completed: Done.")


def test_a_goal_whose_journal_was_altered_while_down_stops_instead_of_resuming(
    tmp_path: Path,
) -> None:
    coordinator = CoordinatorProcess(tmp_path / "coord").start()
    try:
        steps: list[dict[str, Any]] = [
            {"sleep": 0.3, "tool_calls": [{"name": "recall", "arguments": {"text": f"step {i}"}}]}
            for i in range(20)
        ]
        model = coordinator.script("long.json", [*steps, {"text": "done", "tool_calls": []}])
        goal = coordinator.cli_json("goal", "a long goal", "--model", model)

        def results() -> int:
            events = journal(coordinator, goal["id"])
            return sum(e["kind"] == "goal.tool_result" for e in events)

        wait_until(lambda: results() >= 2, 30, 0.1, "two steps")
        coordinator.kill()
        db = sqlite3.connect(coordinator.workdir / "fleet.db")
        with db:
            changed = db.execute(
                "UPDATE journal SET data = replace(data, 'step 0', 'step 9')"
                " WHERE run_id = ? AND kind = 'goal.model_call'",
                (goal["id"],),
            ).rowcount
        db.close()
        assert changed >= 1
        coordinator.start(port=coordinator.port)
        done = wait_run(coordinator, goal["id"], lambda r: r["status"] in STOPPED, 30)
        assert done["status"] == "HAND_BACK_TO_HUMAN", done
        assert done["stopReason"].startswith("journal_altered:"), done["stopReason"]
        assert goal["id"] in done["stopReason"] or "seq" in done["stopReason"]
        events = journal(coordinator, goal["id"])
        assert not any(
            e["kind"] == "goal.model_call" and "step 19" in str(e["data"]) for e in events
        )
    finally:
        coordinator.stop()


@pytest.mark.parametrize(
    ("model", "variable"),
    [
        ("anthropic:claude-x", "ANTHROPIC_API_KEY"),
        ("openai:gpt-x", "OPENAI_API_KEY"),
        ("openai-chat:gpt-x", "OPENAI_API_KEY"),
    ],
)
def test_a_key_set_only_in_the_clis_shell_is_said_to_belong_to_the_coordinator(
    coordinator: CoordinatorProcess, model: str, variable: str
) -> None:
    assert variable not in os.environ, "the coordinator must start without the key"
    env = base_env(coordinator.workdir) | {
        "DESKFLEET_COORDINATOR": coordinator.address,
        "DESKFLEET_TOKEN_FILE": str(coordinator.admin_token_file),
        variable: "sk-only-in-the-cli-shell",  # what a newcomer does: export it, then ask
    }
    argv = [str(BIN / "deskfleet"), "goal", "x", "--model", model]
    refused = run_in_process(argv, env, None, 30)
    assert refused.returncode == 1, refused  # a precondition: neither usage nor not found
    assert refused.stdout == ""
    line = refused.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert f"the coordinator has no {variable}: set it in the coordinator's environment" in line
    assert "`deskfleet-coordinator serve`) and restart it" in line
    assert "sk-only-in-the-cli-shell" not in line
