"""Goals on a hand-driven desktop worker (`raw_worker.py`): its advertisement, an owner, a
receipt for a dispatch, and a goal approved and past its first call."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from shared.advertisement import Capability, Display
from shared.gen.deskfleet.v1 import worker_pb2
from tests.harness.processes import CoordinatorProcess, wait_until
from tests.harness.raw_worker import HEADLESS, RawWorker

DESKTOP = replace(
    HEADLESS,
    displays=(Display(0, 0, 0, 1280, 800),),
    capabilities=(Capability("headless", True), Capability("computer_use", True)),
)


def receipt(d: Any, result: dict[str, Any]) -> worker_pb2.Receipt:
    now = time.time()
    return worker_pb2.Receipt(
        action_id=d.action_id,
        run_id=d.run_id,
        attempt_id=d.attempt_id,
        epoch=d.epoch,
        status="succeeded",
        result_json=json.dumps(result),
        started_at=now,
        finished_at=now,
    )


def new_owner(coordinator: CoordinatorProcess, name: str) -> Path:
    token = coordinator.workdir / f"{name}.token"
    token.write_text(coordinator.cli_json("users", "create", name)["token"])
    return token


def approved_desktop_goal(
    coordinator: CoordinatorProcess, worker: RawWorker, owner: Path, steps: list[dict[str, Any]]
) -> str:
    """A goal on the raw worker's desktop, approved, its first call (a cursor read) answered."""
    model = coordinator.script(f"goal-{time.monotonic_ns()}.json", steps)
    goal = coordinator.cli_json(
        "goal", "type it", "--desktop", worker.worker_id, "--model", model, token_file=owner
    )["id"]
    pending = wait_until(
        lambda: coordinator.cli_json("approvals", "list")["approvals"], 30, 0.2, "an approval"
    )
    coordinator.cli("approvals", "approve", pending[0]["id"])
    first = worker.expect("dispatch", timeout=20).dispatch
    assert first.kind == "desktop.cursor_position"
    worker.send(receipt=receipt(first, {"x": 1, "y": 1}))
    return str(goal)


CURSOR = {"tool_calls": [{"name": "computer", "arguments": {"action": "cursor_position"}}]}
