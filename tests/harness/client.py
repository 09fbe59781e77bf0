"""The tests' gRPC client: plans submitted and runs waited on without a CLI process per call.

Waits and submissions go through one in-process channel per coordinator, not a CLI process per
poll (each a Python start, competing with the system under test); the documents are the CLI's
own (`render.as_dict`), and the CLI itself is tested in tests of the CLI.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from coordinator.admin_cli.render import as_dict
from coordinator.admin_cli.runs_commands import _timeline_nulls as timeline_nulls, load_plan
from shared.gen.deskfleet.v1 import runs_pb2, runs_pb2_grpc
from shared.states import STOPPED
from tests.harness.processes import CoordinatorProcess, wait_until


def write_plan(path: Path, actions: list[dict[str, Any]], **extra: Any) -> Path:
    path.write_text(json.dumps({"actions": actions, **extra}))
    return path


def _runs_stub(coordinator: CoordinatorProcess) -> runs_pb2_grpc.RunServiceStub | None:
    channel = coordinator.channel()
    return None if channel is None else runs_pb2_grpc.RunServiceStub(channel)


def submit(
    coordinator: CoordinatorProcess,
    plan: Path,
    *,
    wait: bool = False,
    token_file: Path | None = None,
) -> dict[str, Any]:
    """Submit PLAN (and with `wait`, wait until the run stops): `runs submit --json`'s document."""
    stub = _runs_stub(coordinator)
    if stub is None:
        args = ["runs", "submit", str(plan)] + (["--wait"] if wait else [])
        done = coordinator.cli(
            *args, token_file=token_file, json_out=True, check=False, timeout=120
        )
        if done.returncode not in (0, 6):
            raise AssertionError(f"runs submit failed ({done.returncode}): {done.stderr}")
        doc: dict[str, Any] = json.loads(done.stdout)
        return doc
    md = coordinator.admin_metadata(token_file)
    request = load_plan(str(plan))
    request.wait_seconds = 30 if wait else 0
    deadline = time.monotonic() + 120
    try:
        run = stub.SubmitRun(request, metadata=md, timeout=120)
        while wait and run.status not in STOPPED and time.monotonic() < deadline:
            run = stub.WaitRun(
                runs_pb2.WaitRunRequest(id=run.id, timeout_seconds=30), metadata=md, timeout=60
            )
    except grpc.RpcError as exc:
        raise AssertionError(f"runs submit failed: {exc.code().name}: {exc.details()}") from exc
    return as_dict(run)


def wait_run(
    coordinator: CoordinatorProcess,
    run_id: str,
    until: Callable[[dict[str, Any]], bool],
    timeout: float = 60,
    token_file: Path | None = None,
) -> dict[str, Any]:
    """Poll the run (`runs show --json`'s document) until `until(run)` holds."""
    stub = _runs_stub(coordinator)
    md = coordinator.admin_metadata(token_file)

    def check() -> dict[str, Any] | None:
        if stub is None:
            run: dict[str, Any] = coordinator.cli_json(
                "runs", "show", run_id, token_file=token_file
            )
        else:
            run = as_dict(stub.GetRun(runs_pb2.RunRef(id=run_id), metadata=md, timeout=30))
            timeline_nulls(run.get("timeline"))
        return run if until(run) else None

    found: dict[str, Any] = wait_until(check, timeout, 0.1, f"run {run_id}")
    return found


def journal(
    coordinator: CoordinatorProcess, run_id: str, token_file: Path | None = None, after: int = 0
) -> list[dict[str, Any]]:
    """The run's journal after `after` (`runs watch --no-follow --json`'s events), each event's
    `data` parsed."""
    stub = _runs_stub(coordinator)
    if stub is None:
        doc = coordinator.cli_json(
            "runs", "watch", run_id, "--no-follow", "--after-seq", str(after), token_file=token_file
        )
        events: list[dict[str, Any]] = doc["events"]
    else:
        request = runs_pb2.WatchRunRequest(id=run_id, after_seq=after, follow=False)
        md = coordinator.admin_metadata(token_file)
        try:
            events = [as_dict(e) for e in stub.WatchRun(request, metadata=md, timeout=60)]
        except grpc.RpcError as exc:
            raise AssertionError(f"runs watch failed: {exc.code().name}: {exc.details()}") from exc
    for e in events:
        e["data"] = json.loads(e["dataJson"])
    return events


def verify_journal(
    coordinator: CoordinatorProcess, run_id: str, token_file: Path | None = None
) -> dict[str, Any]:
    """`journal verify RUN --json`'s document: the coordinator checks the run's hash chain and
    receipts (the CLI only prints its answer)."""
    channel = coordinator.channel()
    if channel is None:
        doc: dict[str, Any] = coordinator.cli_json(
            "journal", "verify", run_id, token_file=token_file
        )
        return doc
    reply = runs_pb2_grpc.JournalServiceStub(channel).VerifyJournal(
        runs_pb2.RunRef(id=run_id), metadata=coordinator.admin_metadata(token_file), timeout=60
    )
    return as_dict(reply)
