"""The per-principal cap on open WatchRun and WaitRun calls, on a real coordinator (30.7).
The feeds' sharing rules are tests/unit/runs/test_followers.py."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from shared.gen.deskfleet.v1 import runs_pb2, runs_pb2_grpc
from tests.harness import CoordinatorProcess, write_plan


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[CoordinatorProcess]:
    proc = CoordinatorProcess(tmp_path / "capped", serve_args=("--max-watch-streams", "3"))
    yield proc.start()
    proc.stop()


def test_one_principal_holds_at_most_the_limit_of_watch_and_wait_calls(
    capped: CoordinatorProcess, tmp_path: Path
) -> None:
    coordinator = capped
    bob = tmp_path / "bob.token"
    bob.write_text(coordinator.cli_json("users", "create", "bob")["token"])
    plan = write_plan(tmp_path / "p.json", [{"kind": "diag.echo", "route": {"worker": "none"}}])
    run = coordinator.cli_json("runs", "submit", str(plan))  # waits for a worker
    channel = coordinator.channel()
    assert channel is not None
    stub = runs_pb2_grpc.RunServiceStub(channel)
    md = coordinator.admin_metadata()
    follow = runs_pb2.WatchRunRequest(id=run["id"], follow=True)
    held = [stub.WatchRun(follow, metadata=md) for _ in range(2)]
    waiting = stub.WaitRun.future(
        runs_pb2.WaitRunRequest(id=run["id"], timeout_seconds=60), metadata=md
    )
    try:
        for call in held:
            assert next(call).seq == 1  # open, history sent
        time.sleep(0.5)  # the wait is open too
        refusals: list[Callable[[], object]] = [
            lambda: next(stub.WatchRun(follow, metadata=md, timeout=10)),
            lambda: stub.WaitRun(runs_pb2.WaitRunRequest(id=run["id"]), metadata=md, timeout=10),
        ]
        for refused in refusals:
            with pytest.raises(grpc.RpcError) as caught:
                refused()
            assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert str(caught.value.details()).startswith("limit max_watch_streams=3: ")
        # The CLI says it in one line; another principal is not held back.
        done = coordinator.cli("runs", "watch", run["id"], check=False, timeout=15)
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert "max_watch_streams=3" in done.stderr and "serve --max-watch-streams" in done.stderr
        bobs = coordinator.cli_json("runs", "submit", str(plan), token_file=bob)
        mine = coordinator.cli_json("runs", "watch", bobs["id"], "--no-follow", token_file=bob)
        assert mine["events"][0]["seq"] == 1
        # A call that ends gives its place back.
        held.pop().cancel()
        time.sleep(0.5)
        again = stub.WatchRun(follow, metadata=md, timeout=30)
        assert next(again).seq == 1
        held.append(again)
    finally:
        for call in held:
            call.cancel()
        waiting.cancel()
