"""What routing costs a submit as the fleet grows: one ledger transaction that writes a run of
one action, routes it and claims a worker slot, timed with N enrolled workers online.

In process, on a SQLite store in a temporary directory, through the ledger's own rules
(`ledger.advance`, then `slots.serve`, as `Dispatcher.run_unit` runs them) with the replica's
worker index read once at the start, as a replica does. The baseline, measured in the same
run on the same store, is the same transaction without routing: the run and its action
written and committed, nothing claimed. Each claimed attempt gets its receipt's slot back at
once (the action is settled outside the timing), so the fleet stays idle and only the
fleet's size changes between sizes.

    python -m bench.routing --sizes 50,1000,5000 --samples 200
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, insert, update
from sqlalchemy.orm import Session

from coordinator.heart import ledger, slots
from coordinator.heart.context import Context
from coordinator.store.engine import create_store_engine
from coordinator.store.models import ActionRow, Base, PresenceRow, ReplicaRow, RunRow, WorkerRow
from coordinator.streams.worker_index import WorkerIndex
from shared.ids import new_id

ADVERTISEMENT = {
    "hostname": "sim",
    "os": "linux",
    "capabilities": [
        {"name": "headless", "available": True},
        {"name": "computer_use", "available": False, "reason": "no display"},
    ],
    "displays": [],
    "versions": {"worker": "bench"},
}


def _fleet(engine: Engine, n: int) -> None:
    now = time.time()
    with Session(engine) as s, s.begin():
        s.add(
            ReplicaRow(
                name="r1",
                address="r1:1",
                started_at=now - 60,
                seen_at=now,
                lease_expires_at=now + 3600,
            )
        )
        ids = [f"wrk_{i:06d}" for i in range(n)]
        if ids:
            s.execute(
                insert(WorkerRow),
                [
                    {
                        "id": w,
                        "name": w,
                        "secret_hash": f"h{w}",
                        "state": "active",
                        "labels": {"pool": "bench"},
                        "allowed_capabilities": ["headless"],
                        "advertisement": ADVERTISEMENT,
                        "enrolled_at": now,
                        "enrollment_token_id": "t",
                    }
                    for w in ids
                ],
            )
            s.execute(
                insert(PresenceRow),
                [
                    {
                        "worker_id": w,
                        "replica": "r1",
                        "session_id": f"ses_{w}",
                        "connected_at": now,
                        "last_heartbeat_at": now,
                        "lease_expires_at": now + 3600,
                        "headless": True,
                        "computer_use": False,
                    }
                    for w in ids
                ],
            )


def _run_row(run_id: str) -> RunRow:
    now = time.time()
    limits = {
        "max_actions": 10,
        "max_seconds": 3600.0,
        "estimate_actions": 10,
        "estimate_seconds": 3600.0,
        "action_timeout_seconds": 60.0,
    }
    return RunRow(
        id=run_id,
        owner_id="owner",
        title="bench",
        status=ledger.RUNNING,
        limits=limits,
        estimate_actions=10,
        estimate_seconds=3600.0,
        actions_total=1,
        trace_id="0" * 32,
        created_at=now,
        updated_at=now,
        kind="plan",
        spec={},
    )


def _write(s: Session, run_id: str) -> RunRow:
    run = _run_row(run_id)
    s.add(run)
    s.flush()
    s.add(
        ledger.new_action(
            run_id,
            0,
            0,
            "diag.echo",
            {"value": 1},
            idempotent=True,
            route={"capability": "headless", "labels": {"pool": "bench"}},
            intent="",
            timeout=60.0,
        )
    )
    s.flush()
    return run


def _timed(fn: Callable[[], None], samples: int) -> list[float]:
    out = []
    for _ in range(samples):
        started = time.perf_counter()
        fn()
        out.append((time.perf_counter() - started) * 1000)
    return out


def _stats(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {
        "p50_ms": round(statistics.median(ordered), 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
    }


def measure(n: int, samples: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_store_engine(f"sqlite:///{Path(tmp) / 'routing.db'}")
        Base.metadata.create_all(engine)
        _fleet(engine, n)
        index = WorkerIndex()
        with Session(engine) as s:
            index.read(s)  # the replica's start
        claimed: list[str] = []

        def submit() -> None:
            run_id = new_id("run")
            with Session(engine, expire_on_commit=False) as s, s.begin():
                ctx = Context(lease_ttl=30.0, max_attempts=3, workers=index)
                ledger.advance(s, _write(s, run_id), ctx)
                orders = slots.serve(s, ctx)
            claimed.append(orders[0].worker_id if orders else "")

        def raw() -> None:
            with Session(engine, expire_on_commit=False) as s, s.begin():
                _write(s, new_id("run"))

        def settle() -> None:
            """Give every slot back outside the timing: only the fleet's size varies."""
            with Session(engine) as s, s.begin():
                s.execute(
                    update(ActionRow)
                    .where(ActionRow.status.in_(ledger.IN_FLIGHT))
                    .values(status="SUCCEEDED")
                )
                s.execute(update(RunRow).values(status=ledger.SUCCEEDED, queued_at=None))

        for _ in range(5):  # warm up
            submit()
            raw()
        settle()
        routed: list[float] = []
        for _ in range(samples):
            routed += _timed(submit, 1)
            settle()
        baseline = _timed(raw, samples)
        engine.dispose()
    if not all(claimed):
        raise RuntimeError(f"a submit with {n} workers online claimed no worker")
    return {
        "workers": n,
        "samples": samples,
        "submit": _stats(routed),
        "write_only_baseline": _stats(baseline),
    }


def run(sizes: list[int], samples: int) -> dict[str, Any]:
    return {
        "store": "sqlite",
        "sizes": [measure(n, samples) for n in sizes],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="50,1000,5000", help="enrolled workers, comma-separated")
    parser.add_argument("--samples", type=int, default=200, help="submits timed per size")
    args = parser.parse_args()
    doc = run([int(x) for x in args.sizes.split(",")], args.samples)
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
