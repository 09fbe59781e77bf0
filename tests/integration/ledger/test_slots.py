"""Worker slots and the line of runs waiting for them, on a real coordinator and real workers.

The coordinator's recovery sweep and its line check (the backstop for capacity no event
announces) run every 10 minutes here, so a waiting run can only move because an event woke it:
a receipt, a failure, a timeout, a cancel, a worker connecting or being undrained. Leases are
long enough that a loaded machine does not take workers offline. Waits go through an
in-process gRPC client, not the CLI.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from bench.many_runs import idle_gap, spread, steps_of
from shared.credentials import auth_metadata
from shared.gen.deskfleet.v1 import fleet_pb2, fleet_pb2_grpc, runs_pb2, runs_pb2_grpc
from tests.harness import CoordinatorProcess, WorkerProcess, wait_until

SLOTS_PER_WORKER = 4  # coordinator/heart/context.py MAX_PER_WORKER
SLOTS = 2 * SLOTS_PER_WORKER
TERMINAL = ("SUCCEEDED", "FAILED", "HAND_BACK_TO_HUMAN", "CANCELLED")


class Fleet:
    """A coordinator that only events can wake (sweep every 600 s) and two real workers."""

    def __init__(self, workdir: Path) -> None:
        self.coordinator = CoordinatorProcess(
            workdir,
            sweep=600.0,
            heartbeat=1.0,
            lease=10.0,
            serve_args=("--line-check-interval", "600"),
        ).start()
        self.workers = [WorkerProcess(self.coordinator, name, browser=False) for name in ("a", "b")]
        for worker in self.workers:
            worker.start()
        for worker in self.workers:
            worker.wait_online(60)
        self.metadata = auth_metadata(self.coordinator.admin_token_file.read_text().strip())
        self.db = Path(self.coordinator.db_url.removeprefix("sqlite:///"))

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.coordinator.stop()

    def channel(self) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(self.coordinator.address)

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10) as db:
            return db.execute(sql, params).fetchall()

    def in_flight(self) -> int:
        rows = self.query("SELECT count(*) FROM actions WHERE status IN ('DISPATCHED', 'STARTED')")
        return int(rows[0][0])


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    made = Fleet(tmp_path_factory.mktemp("slots") / "coord")
    yield made
    made.stop()


def _plan(actions: list[dict[str, Any]], **limits: Any) -> runs_pb2.SubmitRunRequest:
    return runs_pb2.SubmitRunRequest(
        actions=[
            runs_pb2.PlannedAction(
                kind=a["kind"],
                args_json=json.dumps(a.get("args", {})),
                idempotent=a.get("idempotent", True),
            )
            for a in actions
        ],
        limits=runs_pb2.Limits(**limits),
    )


def _echoes(n: int) -> runs_pb2.SubmitRunRequest:
    return _plan([{"kind": "diag.echo", "args": {"value": i}} for i in range(n)])


class Client:
    def __init__(self, fleet: Fleet, channel: grpc.aio.Channel) -> None:
        self.fleet = fleet
        self.runs = runs_pb2_grpc.RunServiceStub(channel)
        self.workers = fleet_pb2_grpc.FleetServiceStub(channel)
        self.md = fleet.metadata

    async def submit(self, request: runs_pb2.SubmitRunRequest) -> str:
        run = await self.runs.SubmitRun(request, metadata=self.md, timeout=60)
        return str(run.id)

    async def get(self, run_id: str) -> runs_pb2.Run:
        return await self.runs.GetRun(runs_pb2.RunRef(id=run_id), metadata=self.md, timeout=30)

    async def wait(self, run_id: str, within: float) -> runs_pb2.Run:
        deadline = time.monotonic() + within
        while True:
            left = deadline - time.monotonic()
            run = await self.runs.WaitRun(
                runs_pb2.WaitRunRequest(id=run_id, timeout_seconds=max(0.1, min(left, 30))),
                metadata=self.md,
                timeout=60,
            )
            if run.status in TERMINAL or time.monotonic() >= deadline:
                return run

    async def cancel(self, run_id: str) -> None:
        await self.runs.CancelRun(runs_pb2.RunRef(id=run_id), metadata=self.md, timeout=30)

    async def occupy(self, requests: list[runs_pb2.SubmitRunRequest]) -> list[str]:
        """Submit runs that take the given number of slots, and wait until they hold them."""
        ids = [await self.submit(r) for r in requests]
        await _until(lambda: self.fleet.in_flight() >= len(requests), 30, "blockers in flight")
        return ids

    async def waiting(self, run_id: str) -> runs_pb2.Run:
        """The run, once it waits in line for a slot (and not before its state says why)."""

        async def check() -> runs_pb2.Run | None:
            run = await self.get(run_id)
            return run if run.status == "WAITING_FOR_ENVIRONMENT" else None

        run = await _until_async(check, 30, f"run {run_id} waiting")
        return run

    async def release(self, blockers: list[str]) -> None:
        for run_id in blockers:
            run = await self.get(run_id)
            if run.status not in TERMINAL:
                await self.cancel(run_id)
        await _until(lambda: self.fleet.in_flight() == 0, 30, "every slot free again")


async def _until(predicate: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(0.05)


async def _until_async(check: Any, within: float, what: str) -> Any:
    deadline = time.monotonic() + within
    while True:
        found = await check()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(0.05)


def _sleeps(n: int, seconds: float = 60.0) -> list[runs_pb2.SubmitRunRequest]:
    return [_plan([{"kind": "diag.sleep", "args": {"seconds": seconds}}]) for _ in range(n)]


# ------------------------------------------------------------------ more runs than slots


async def test_forty_runs_on_eight_slots_all_finish_fairly_without_idle_slots(
    fleet: Fleet,
) -> None:
    """40 runs of 25 actions submitted at once on 2 workers (8 slots): nothing starves."""
    runs, per_run = 40, 25
    async with fleet.channel() as channel:
        client = Client(fleet, channel)
        ids = await asyncio.gather(*(client.submit(_echoes(per_run)) for _ in range(runs)))
        finished = await asyncio.gather(*(client.wait(run_id, 240) for run_id in ids))
    stuck = [(r.id, r.status, r.waiting.detail) for r in finished if r.status != "SUCCEEDED"]
    assert not stuck
    steps, created = steps_of(fleet.db, list(ids))
    assert len(steps) == runs * per_run
    # The rule: a run never waits while a slot is free (one second of slack for the machine).
    gap = idle_gap(steps, created, SLOTS)
    assert gap < 1.0, f"a slot stood free for {gap:.2f} s while a run waited"
    # Oldest place first, one unit a turn: while all 40 have work left, no run gets ahead of
    # another by more than a few actions (first come, first served would let the first eight
    # finish all 25 before the others start).
    ahead = spread(steps)
    assert ahead <= 3, f"a run got {ahead} actions ahead of another"


# ------------------------------------------------------------------ each wake-up source


async def _wakes(client: Client, blockers: list[str], free_one: Any, within: float = 20) -> None:
    """A run in line while every slot is busy starts once `free_one()` frees a slot."""
    waiter = await client.submit(_echoes(1))
    run = await client.waiting(waiter)
    assert run.waiting.code == "workers_busy", run.waiting
    assert "in line for the next free slot" in run.waiting.detail
    try:
        await free_one()
        done = await client.wait(waiter, within)
        assert done.status == "SUCCEEDED", (done.status, done.waiting.detail)
    finally:
        await client.release(blockers)


async def test_a_receipt_wakes_a_run_in_line(fleet: Fleet) -> None:
    async with fleet.channel() as channel:
        client = Client(fleet, channel)
        short = _plan([{"kind": "diag.sleep", "args": {"seconds": 4.0}}])
        blockers = await client.occupy([*_sleeps(SLOTS - 1), short])

        async def nothing() -> None:  # the short sleep's receipt frees its slot by itself
            return None

        await _wakes(client, blockers, nothing)


async def test_a_failed_receipt_wakes_a_run_in_line(fleet: Fleet) -> None:
    async with fleet.channel() as channel:
        client = Client(fleet, channel)
        failing = _plan(
            [
                {
                    "kind": "diag.fail",
                    "args": {"seconds": 4.0, "message": "late failure"},
                    "idempotent": False,
                }
            ]
        )
        blockers = await client.occupy([*_sleeps(SLOTS - 1), failing])

        async def nothing() -> None:
            return None

        await _wakes(client, blockers, nothing)
        failed = await client.get(blockers[-1])
        assert failed.status == "FAILED" and "late failure" in failed.stop_reason


async def test_a_timeout_wakes_a_run_in_line(fleet: Fleet) -> None:
    async with fleet.channel() as channel:
        client = Client(fleet, channel)
        timing_out = _plan(
            [{"kind": "diag.sleep", "args": {"seconds": 60}}],
            action_timeout_seconds=4.0,
            max_actions=1,
        )
        blockers = await client.occupy([*_sleeps(SLOTS - 1), timing_out])

        async def nothing() -> None:
            return None

        await _wakes(client, blockers, nothing)
        timed_out = await client.get(blockers[-1])
        assert timed_out.status == "FAILED"  # timed out, and its one attempt is spent


async def test_a_cancel_wakes_a_run_in_line(fleet: Fleet) -> None:
    async with fleet.channel() as channel:
        client = Client(fleet, channel)
        blockers = await client.occupy(_sleeps(SLOTS))

        async def cancel_one() -> None:
            await client.cancel(blockers[0])

        await _wakes(client, blockers, cancel_one)


async def test_a_worker_connecting_wakes_a_run_in_line(fleet: Fleet) -> None:
    a, _ = fleet.workers
    a.stop()
    await _until(lambda: not (a.row() or {}).get("online"), 30, "worker a offline")
    try:
        async with fleet.channel() as channel:
            client = Client(fleet, channel)
            blockers = await client.occupy(_sleeps(SLOTS_PER_WORKER))

            async def reconnect() -> None:
                a.start()

            await _wakes(client, blockers, reconnect, within=60)
    finally:
        if a.proc is None or a.proc.poll() is not None:
            a.start()
        a.wait_online(60)


async def test_undraining_a_worker_wakes_a_run_in_line(fleet: Fleet) -> None:
    a, _ = fleet.workers
    async with fleet.channel() as channel:
        client = Client(fleet, channel)
        ref = fleet_pb2.WorkerRef(id=a.worker_id)
        await client.workers.DrainWorker(ref, metadata=client.md, timeout=30)
        try:
            blockers = await client.occupy(_sleeps(SLOTS_PER_WORKER))

            async def undrain() -> None:
                await client.workers.UndrainWorker(ref, metadata=client.md, timeout=30)

            await _wakes(client, blockers, undrain)
        finally:
            await client.workers.UndrainWorker(ref, metadata=client.md, timeout=30)
    assert wait_until(lambda: fleet.in_flight() == 0, 30, what="slots free")


# ------------------------------------------------------------------ submit and wait


async def test_submit_and_wait_is_one_call(fleet: Fleet) -> None:
    async with fleet.channel() as channel:
        client = Client(fleet, channel)
        request = _echoes(3)
        request.wait_seconds = 30
        run = await client.runs.SubmitRun(request, metadata=client.md, timeout=60)
        assert (run.status, run.actions_succeeded) == ("SUCCEEDED", 3)
        # The answer is the view the receipt's transaction read for its waiter: it is the
        # run as a later wait reads it from the store, down to each action's receipt.
        read = await client.runs.WaitRun(
            runs_pb2.WaitRunRequest(id=run.id, timeout_seconds=5), metadata=client.md, timeout=30
        )
        assert run == read, (run, read)
        assert all(a.receipt_id for a in run.actions) and len(run.actions) == 3
        for bad in (-1.0, 3601.0, float("nan")):
            request.wait_seconds = bad
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await client.runs.SubmitRun(request, metadata=client.md, timeout=60)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "wait_seconds" in (caught.value.details() or "")
