"""Many more concurrent runs than worker slots: actions per second, and whether a slot ever
stood idle while a run waited for one.

  figure     R runs of N diag.echo actions submitted at once (SubmitRun x R, then WaitRun on
             each) on 2 real workers (8 slots): actions/s, the longest time a slot stood free
             while a run waited, and how far one run got ahead of another
  baseline   the same R x N actions run one at a time on the same fleet, in the same run: one
             sequential run, or several one after another where R x N is more than a plan
             may hold (coordinator/runs/service.py MAX_ACTIONS_PER_PLAN)

Usage: python -m bench.many_runs [--quick] [--out bench/results/many_runs.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

from bench.runs import raw_echo
from coordinator.runs.plan import MAX_ACTIONS_PER_PLAN
from shared.credentials import auth_metadata
from shared.gen.deskfleet.v1 import runs_pb2, runs_pb2_grpc
from tests.harness import CoordinatorProcess, WorkerProcess

ROOT = Path(__file__).resolve().parent.parent
POLL_EVERY = 0.25  # a status board's GetRun of every run, this often
SLOTS = 8  # 2 workers x coordinator/heart/context.py MAX_PER_WORKER
TERMINAL = ("SUCCEEDED", "FAILED", "HAND_BACK_TO_HUMAN", "CANCELLED")

# (run, index, dispatched_at, finished_at) of one attempt each
Step = tuple[str, int, float, float]


def idle_gap(steps: list[Step], created: dict[str, float], slots: int = SLOTS) -> float:
    """The longest time during which a slot was free while some run waited for one.

    A run waits from the transaction that made it to its first dispatch, and from each receipt
    to its next dispatch (single-attempt runs of sequential actions).
    """
    events: list[tuple[float, int, int]] = []  # (time, d_in_flight, d_waiting)
    by_run: dict[str, list[tuple[int, float, float]]] = {}
    for run_id, idx, dispatched, finished in steps:
        by_run.setdefault(run_id, []).append((idx, dispatched, finished))
        events += [(dispatched, +1, 0), (finished, -1, 0)]
    for run_id, mine in by_run.items():
        ready = created[run_id]
        for _, dispatched, finished in sorted(mine):
            # Times within one transaction are read at different moments of it.
            events += [(min(ready, dispatched), 0, +1), (dispatched, 0, -1)]
            ready = finished
    # At one instant, a dispatch ends a wait before a free slot is counted.
    events.sort(key=lambda e: (e[0], -e[1], e[2]))
    in_flight = waiting = 0
    longest, since = 0.0, None
    for at, d_flight, d_wait in events:
        in_flight += d_flight
        waiting += d_wait
        idle = in_flight < slots and waiting > 0
        if idle and since is None:
            since = at
        elif not idle and since is not None:
            longest, since = max(longest, at - since), None
    return longest


def spread(steps: list[Step]) -> int:
    """How many actions one run got ahead of another, at worst, while every run had work."""
    total: dict[str, int] = {}
    for run_id, *_ in steps:
        total[run_id] = total.get(run_id, 0) + 1
    done = dict.fromkeys(total, 0)
    worst = 0
    for run_id, *_ in sorted(steps, key=lambda s: s[2]):
        done[run_id] += 1
        if any(done[r] >= total[r] for r in total):
            break  # a run has finished: the fair phase is over
        worst = max(worst, max(done.values()) - min(done.values()))
    return worst


def steps_of(db: Path, run_ids: list[str]) -> tuple[list[Step], dict[str, float]]:
    marks = ",".join("?" * len(run_ids))
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
        steps = [
            (str(r), int(i), float(d), float(f))
            for r, i, d, f in conn.execute(
                "SELECT run_id, idx, dispatched_at, finished_at FROM actions"
                f" WHERE run_id IN ({marks})",
                run_ids,
            )
        ]
        # A run waits from its first journal entry, written in the transaction that made it
        # (its created_at is when it was asked for, before the store took the transaction).
        created = {
            str(r): float(at)
            for r, at in conn.execute(
                f"SELECT run_id, at FROM journal WHERE seq = 1 AND run_id IN ({marks})", run_ids
            )
        }
    return steps, created


def plan_sizes(actions: int) -> list[int]:
    """`actions` split into as few plans as a plan's limit allows."""
    full, rest = divmod(actions, MAX_ACTIONS_PER_PLAN)
    return [MAX_ACTIONS_PER_PLAN] * full + ([rest] if rest else [])


def echoes(n: int) -> runs_pb2.SubmitRunRequest:
    return runs_pb2.SubmitRunRequest(
        actions=[
            runs_pb2.PlannedAction(
                kind="diag.echo", args_json=json.dumps({"value": i}), idempotent=True
            )
            for i in range(n)
        ],
        limits=runs_pb2.Limits(max_actions=n),
    )


async def submit_and_wait(
    address: str,
    token: str,
    requests: list[runs_pb2.SubmitRunRequest],
    *,
    poll_every: float = 0.0,
) -> tuple[list[str], float, int]:
    """Submit every run at once, wait for all; (run ids, seconds from first submit to last end,
    GetRun calls made). `poll_every`: meanwhile a status board polls GetRun for every run
    submitted so far, each that many seconds (0: no polling)."""
    md = auth_metadata(token)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = runs_pb2_grpc.RunServiceStub(channel)
        known: list[str] = []
        polled = 0

        async def one(request: runs_pb2.SubmitRunRequest) -> tuple[str, str]:
            run = await stub.SubmitRun(request, metadata=md, timeout=60)
            known.append(run.id)
            while run.status not in TERMINAL:
                run = await stub.WaitRun(
                    runs_pb2.WaitRunRequest(id=run.id, timeout_seconds=30), metadata=md, timeout=60
                )
            return str(run.id), str(run.status)

        async def board() -> None:
            nonlocal polled
            while True:
                await asyncio.sleep(poll_every)
                ids = list(known)
                await asyncio.gather(
                    *(stub.GetRun(runs_pb2.RunRef(id=i), metadata=md, timeout=60) for i in ids)
                )
                polled += len(ids)

        poller = asyncio.create_task(board()) if poll_every > 0 else None
        start = time.perf_counter()
        try:
            done = await asyncio.gather(*(one(r) for r in requests))
        finally:
            if poller is not None:
                poller.cancel()
                await asyncio.gather(poller, return_exceptions=True)
        elapsed = time.perf_counter() - start
    if failed := [(i, s) for i, s in done if s != "SUCCEEDED"]:
        raise RuntimeError(f"{len(failed)} run(s) did not succeed, e.g. {failed[0]}")
    return [i for i, _ in done], elapsed, polled


@contextlib.contextmanager
def fleet() -> Iterator[tuple[CoordinatorProcess, list[WorkerProcess], str]]:
    """A coordinator on a new SQLite store and 2 real workers online, warmed up (both have
    taken work once): (coordinator, workers, admin token). Stopped on leaving."""
    with tempfile.TemporaryDirectory() as tmp:
        coordinator = CoordinatorProcess(Path(tmp) / "coord", heartbeat=1.0, lease=5.0, sweep=600.0)
        coordinator.start()
        workers = [WorkerProcess(coordinator, f"w{i}") for i in range(2)]
        try:
            for w in workers:
                w.start()
            for w in workers:
                w.wait_online(60)
            token = coordinator.admin_token_file.read_text().strip()
            asyncio.run(submit_and_wait(coordinator.address, token, [echoes(4)] * 4))
            yield coordinator, workers, token
        finally:
            for w in workers:
                w.stop()
            coordinator.stop()


def run(quick: bool) -> dict[str, Any]:
    runs, per_run = (40, 5) if quick else (40, 50)
    sequential_n = 60 if quick else 300
    actions = runs * per_run
    with fleet() as (coordinator, _, token):
        db = Path(coordinator.db_url.removeprefix("sqlite:///"))
        address = coordinator.address
        sequential_s = sum(
            asyncio.run(submit_and_wait(address, token, [echoes(n)]))[1]
            for n in plan_sizes(actions)
        )
        ids, concurrent_s, _ = asyncio.run(
            submit_and_wait(address, token, [echoes(per_run)] * runs)
        )
        steps, created = steps_of(db, ids)
        _, polled_s, polls = asyncio.run(
            submit_and_wait(address, token, [echoes(per_run)] * runs, poll_every=POLL_EVERY)
        )
        # One plan of sequential no-op actions: the per-action cost inside a running plan.
        _, one_plan_s, _ = asyncio.run(submit_and_wait(address, token, [echoes(sequential_n)]))
    echo = raw_echo(400 if quick else 2000)
    return {
        "runs": runs,
        "actions_per_run": per_run,
        "workers": 2,
        "slots": SLOTS,
        "store": "sqlite",
        "concurrent": {"seconds": concurrent_s, "actions_per_s": actions / concurrent_s},
        "sequential": {"seconds": sequential_s, "actions_per_s": actions / sequential_s},
        "polled": {
            "seconds": polled_s,
            "actions_per_s": actions / polled_s,
            "poll_every_s": POLL_EVERY,
            "get_run_calls": polls,
        },
        "one_plan": {
            "actions": sequential_n,
            "seconds": one_plan_s,
            "ms_per_action": 1000 * one_plan_s / sequential_n,
            "two_echo_hops_ms": 2 * echo["p50_ms"],
        },
        "longest_idle_gap_s": idle_gap(steps, created),
        "max_spread_actions": spread(steps),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "many_runs.json")
    args = parser.parse_args()
    try:
        doc = run(args.quick)
    except grpc.RpcError as exc:
        print(f"many_runs bench: {exc.code().name}: {exc.details()}", file=sys.stderr)  # type: ignore[attr-defined]
        return 1
    except (RuntimeError, TimeoutError, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        print(f"many_runs bench: {type(exc).__name__}: {first}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
