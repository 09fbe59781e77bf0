"""A goal's runs are its children: cancelling the goal ends them within 2 s, withdraws the
approval they wait for and gives up the desktop they hold, so a new request acts at once. The
goal is driven by the scripted provider (a replayed model: no model service is reachable here)
through the real loop, a real research worker's Chromium and a real Xvfb desktop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.harness import STOPPED, CoordinatorProcess, WorkerProcess, Xvfb, wait_run, wait_until


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    return module_coordinator


@pytest.fixture
def desk(
    workers: Callable[..., WorkerProcess], xvfb: Xvfb, window: Callable[[], None]
) -> WorkerProcess:
    window()
    worker = workers("desk", display_env=xvfb.env)
    worker.wait_online()
    return worker


def _children(coordinator: CoordinatorProcess, goal_id: str, n: int) -> list[dict[str, Any]]:
    def listed() -> list[dict[str, Any]] | None:
        runs = coordinator.cli_json("runs", "list", "--parent", goal_id)["runs"]
        return runs if len(runs) >= n else None

    return wait_until(listed, 60, 0.2, f"the goal's {n} child runs")


def _cancel_and_time(coordinator: CoordinatorProcess, goal_id: str, children: list[str]) -> float:
    started = time.monotonic()
    coordinator.cli("runs", "cancel", goal_id)
    for child in children:
        wait_run(coordinator, child, lambda r: r["status"] in STOPPED, 10)
    return time.monotonic() - started


def test_cancelling_a_goal_whose_desktop_child_waits_for_approval_withdraws_it(
    coordinator: CoordinatorProcess, desk: WorkerProcess
) -> None:
    model = coordinator.script(
        "wait-approval.json",
        [{"tool_calls": [{"name": "computer", "arguments": {"action": "screenshot"}}]}],
    )
    goal = coordinator.cli_json("goal", "look", "--desktop", desk.worker_id, "--model", model)
    [child] = _children(coordinator, goal["id"], 1)
    assert child["kind"] == "desktop" and child["parent"] == goal["id"]
    pending = wait_until(
        lambda: coordinator.cli_json("approvals", "list")["approvals"], 30, 0.2, "the approval"
    )
    assert [a["runId"] for a in pending] == [child["id"]]
    shown = coordinator.cli_json("runs", "show", goal["id"])
    assert shown["status"] == "DELEGATED" and child["id"] in shown["waiting"]["detail"]
    assert shown["children"] == [{"id": child["id"], "kind": "desktop", "status": child["status"]}]

    took = _cancel_and_time(coordinator, goal["id"], [child["id"]])
    assert took < 2.0, f"the child stopped {took:.2f} s after the cancel"
    ended = coordinator.cli_json("runs", "show", child["id"])
    assert ended["status"] == "CANCELLED"
    assert f"cancelled with its ancestor run {goal['id']}" in ended["stopReason"]
    assert coordinator.cli_json("approvals", "list")["approvals"] == []
    withdrawn = coordinator.cli_json("approvals", "list", "--status", "withdrawn")["approvals"]
    assert pending[0]["id"] in [a["id"] for a in withdrawn]
    assert coordinator.cli_json("runs", "show", goal["id"])["status"] == "CANCELLED"


def test_cancelling_a_goal_ends_its_fetching_research_and_frees_its_desktop(
    coordinator: CoordinatorProcess,
    desk: WorkerProcess,
    workers: Callable[..., WorkerProcess],
    site: str,
) -> None:
    workers("reader").wait_online()
    model = coordinator.script(
        "hold-then-research.json",
        [
            {"tool_calls": [{"name": "computer", "arguments": {"action": "screenshot"}}]},
            {
                "tool_calls": [
                    {
                        "name": "research",
                        "arguments": {"query": "what never loads", "urls": [f"{site}/slow"]},
                    }
                ]
            },
        ],
    )
    goal = coordinator.cli_json(
        "goal", "look, then read", "--desktop", desk.worker_id, "--model", model
    )
    approval = wait_until(
        lambda: coordinator.cli_json("approvals", "list")["approvals"], 30, 0.2, "the approval"
    )
    coordinator.cli("approvals", "approve", approval[0]["id"])
    children = _children(coordinator, goal["id"], 2)
    by_kind = {c["kind"]: c for c in children}
    research = by_kind["research"]

    def fetching() -> bool:
        run = coordinator.cli_json("runs", "show", research["id"])
        return any(a["status"] in ("DISPATCHED", "STARTED") for a in run["actions"])

    wait_until(fetching, 60, 0.2, "the research child fetching the slow page")
    # The desktop child holds the input lease: another run on this desk is refused for it.
    asked = coordinator.cli_json(
        "desktop", "request", "--worker", desk.worker_id, "--action=screenshot", "--reason", "next"
    )
    [answer] = coordinator.cli_json("approvals", "list")["approvals"]
    coordinator.cli("approvals", "approve", answer["id"])
    act = ("desktop", "act", asked["id"], "screenshot", "--out", "/dev/null")
    held = coordinator.cli(*act, "--json", check=False)
    assert held.returncode != 0 and "input_lease_held" in held.stdout + held.stderr, held

    took = _cancel_and_time(coordinator, goal["id"], [c["id"] for c in children])
    assert took < 2.0, f"the children stopped {took:.2f} s after the cancel"
    for child in children:
        ended = coordinator.cli_json("runs", "show", child["id"])
        assert ended["status"] == "CANCELLED", ended
        assert goal["id"] in ended["stopReason"]
    # The lease is free: the waiting request acts at once.
    acted = coordinator.cli_json(*act)
    assert acted["status"] == "succeeded", acted
