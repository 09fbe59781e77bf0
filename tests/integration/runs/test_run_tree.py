"""The run tree on a real coordinator: a goal's desktop run is its child (parent, root and
children in `runs show --json`, `runs list --parent`), owners see only their own tree, and the
text views name the parent and the children. The goal is driven by the scripted provider (a
replayed model: no model service is reachable here); its desktop need not be online to ask."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.harness import CoordinatorProcess, WorkerProcess, wait_until


def _owner(coordinator: CoordinatorProcess, name: str) -> Path:
    path = coordinator.workdir / f"{name}.token"
    path.write_text(coordinator.cli_json("users", "create", name)["token"])
    return path


def test_a_goals_desktop_run_is_its_child_in_its_owners_tree(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    alice, bob = _owner(coordinator, "alice"), _owner(coordinator, "bob")
    desk = WorkerProcess(coordinator, "desk", home=tmp_path / "desk")
    assert desk.enroll().returncode == 0
    shot = {"name": "computer", "arguments": {"action": "screenshot"}}
    model = coordinator.script("look.json", [{"tool_calls": [shot]}])
    goal = coordinator.cli_json(
        "goal", "look", "--desktop", desk.worker_id, "--model", model, token_file=alice
    )

    def child_listed() -> list[dict[str, Any]] | None:
        runs = coordinator.cli_json("runs", "list", "--parent", goal["id"], token_file=alice)
        return runs["runs"] or None

    [child] = wait_until(child_listed, 30, 0.2, "the goal's desktop run")
    assert (child["kind"], child["parent"], child["root"]) == ("desktop", goal["id"], goal["id"])
    shown = coordinator.cli_json("runs", "show", goal["id"], token_file=alice)
    assert shown["parent"] is None and shown["root"] == goal["id"]
    assert shown["children"] == [{"id": child["id"], "kind": "desktop", "status": child["status"]}]
    assert shown["childrenTotal"] == 1
    # Only the goal's children: alice's other runs are not listed under it.
    assert [r["id"] for r in coordinator.cli_json("runs", "list", token_file=alice)["runs"]] == [
        child["id"],
        goal["id"],
    ]

    # Another owner cannot name it; an admin names its owner (or every owner) to list it.
    for token in (bob, None):
        refused = coordinator.cli(
            "runs", "list", "--parent", goal["id"], token_file=token, check=False
        )
        assert refused.returncode != 0
        assert f"no run '{goal['id']}'" in refused.stderr, refused.stderr
    every = coordinator.cli_json("runs", "list", "--parent", goal["id"], "--owner", "*")
    assert [r["id"] for r in every["runs"]] == [child["id"]]

    text = coordinator.cli("runs", "show", child["id"], token_file=alice).stdout
    assert goal["id"] in text
    text = coordinator.cli("runs", "show", goal["id"], token_file=alice).stdout
    assert child["id"] in text and "desktop" in text
