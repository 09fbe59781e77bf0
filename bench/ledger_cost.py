"""The ledger's own cost per receipt, in process: no gRPC, no worker, no event loop.

Runs the dispatcher's transaction body (`heart.dispatch.transaction` around `_apply_batch`)
on a SQLite store on disk with the coordinator's durability (WAL, synchronous=FULL): RUNS plan
runs of ACTIONS sequential no-ops on WORKERS workers; every round, the receipts of every
attempt in flight are applied as one batch (as the ingest does when they arrive together),
which dispatches each run's next action. Prints the writer's wall and CPU time per receipt,
split into the transaction's unit and its commit, beside raw Core statements writing the
same rows in the same number of transactions; `--profile` adds the functions that cost most
(cProfile, by own time and by cumulative time).

Usage: python -m bench.ledger_cost [--runs 40] [--actions 25] [--profile] [--json]
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from sqlalchemy import Engine, Table, event, insert, text, update
from sqlalchemy.orm import Session

from coordinator.heart.dispatch import _apply_batch
from coordinator.store.engine import create_store_engine
from coordinator.store.models import ActionRow, JournalRow, ReceiptRow, RunRow
from tests.harness.ledger import Store, ledger_store, receipt


def _in_flight(store: Store) -> list[Any]:
    from tests.harness.ledger import in_flight

    return in_flight(store)


def _statements(engine: Engine) -> list[int]:
    """A counter of the statements the engine sends (executemany counts once)."""
    seen = [0]

    def count(*_args: Any) -> None:
        seen[0] += 1

    event.listen(engine, "before_cursor_execute", count)
    return seen


def measure(runs: int, actions: int, workers: int, profile: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, ledger_store(Path(tmp)) as store:
        with Session(store.engine) as s, s.begin():
            s.execute(text("PRAGMA journal_mode=WAL"))
        for i in range(workers):
            store.worker(f"w{i}")
        for _ in range(runs):
            store.submit(actions)
        statements = _statements(store.engine)
        profiler = cProfile.Profile() if profile else None
        receipts = batches = 0
        wall = cpu = 0.0
        sizes: list[int] = []
        statements[0] = 0
        while True:
            flight = _in_flight(store)
            if not flight:
                break
            batch = [receipt(order) for order in flight]
            unit = functools.partial(_apply_batch, batch=batch)
            start, thread = time.perf_counter(), time.thread_time()
            if profiler is not None:
                profiler.enable()
            store.run(unit)
            if profiler is not None:
                profiler.disable()
            wall += time.perf_counter() - start
            cpu += time.thread_time() - thread
            receipts += len(batch)
            batches += 1
            sizes.append(len(batch))
        with Session(store.engine) as s:
            events = int(s.scalar(text("SELECT count(*) FROM journal")) or 0)
            done = int(
                s.scalar(text("SELECT count(*) FROM actions WHERE status = 'SUCCEEDED'")) or 0
            )
        assert done == runs * actions, f"{done} of {runs * actions} actions succeeded"
        raw = _raw_core(Path(tmp) / "raw.db", batches, receipts, events)
        out: dict[str, Any] = {
            "receipts": receipts,
            "transactions": batches,
            "median_batch": statistics.median(sizes),
            "journal_events_per_receipt": round(events / receipts, 2),
            "statements_per_receipt": round(statements[0] / receipts, 2),
            "ms_per_receipt": round(1000 * wall / receipts, 3),
            "cpu_ms_per_receipt": round(1000 * cpu / receipts, 3),
            "raw_core_ms_per_receipt": round(raw, 3),
            "ratio_to_raw_core": round(1000 * wall / receipts / raw, 1),
        }
        if profiler is not None:
            out["profile"] = _top(profiler, receipts)
        return out


def _raw_core(path: Path, transactions: int, receipts: int, events: int) -> float:
    """ms per receipt for raw Core writing the same rows in as many transactions: per
    receipt one receipt row, its share of journal events, the finished action and the next
    one updated, the run's head updated."""
    engine = create_store_engine(f"sqlite:///{path}")
    from coordinator.store.models import Base

    Base.metadata.create_all(engine)
    runs_t, actions_t = cast(Table, RunRow.__table__), cast(Table, ActionRow.__table__)
    journal_t, receipts_t = cast(Table, JournalRow.__table__), cast(Table, ReceiptRow.__table__)
    per_tx = max(1, receipts // transactions)
    ev_per = max(1, round(events / receipts))
    now = time.time()
    with engine.begin() as conn:
        conn.execute(
            insert(runs_t),
            [
                {
                    "id": f"run{i}",
                    "owner_id": "o",
                    "title": "t",
                    "status": "RUNNING",
                    "limits": {},
                    "estimate_actions": 1,
                    "estimate_seconds": 1.0,
                    "actions_total": 1,
                    "trace_id": "0" * 32,
                    "created_at": now,
                    "updated_at": now,
                    "last_seq": 0,
                    "last_hash": "",
                }
                for i in range(per_tx)
            ],
        )
        conn.execute(
            insert(actions_t),
            [
                {
                    "id": f"act{i}",
                    "run_id": f"run{i}",
                    "idx": 0,
                    "stage": 0,
                    "kind": "k",
                    "intent": "k",
                    "args": "{}",
                    "fingerprint": "f",
                    "idempotent": True,
                    "route": {},
                    "status": "PENDING",
                    "worker_id": "",
                    "attempt_id": "",
                    "epoch": 0,
                    "attempts": 0,
                    "timeout_seconds": 1.0,
                    "error": "",
                    "origin": "",
                    "receipt_id": "",
                    "postcondition": "",
                    "check_state": "",
                }
                for i in range(per_tx)
            ],
        )
    seq = 0
    start = time.perf_counter()
    for t in range(transactions):
        with engine.begin() as conn:
            conn.execute(
                insert(receipts_t),
                [
                    {
                        "id": f"rcp{t}_{i}",
                        "run_id": f"run{i}",
                        "action_id": f"act{i}",
                        "attempt_id": "a",
                        "epoch": 1,
                        "worker_id": "w",
                        "status": "succeeded",
                        "body": '{"result":{"echo":1}}' * 8,
                        "sha256": "0" * 64,
                        "created_at": now,
                        "traceparent": "",
                    }
                    for i in range(per_tx)
                ],
            )
            rows = []
            for i in range(per_tx):
                for _ in range(ev_per):
                    seq += 1
                    rows.append(
                        {
                            "run_id": f"run{i}",
                            "seq": seq,
                            "kind": "receipt",
                            "at": now,
                            "data": '{"action":"act","attempt":"att"}' * 4,
                            "prev_hash": "0" * 64,
                            "hash": "1" * 64,
                            "trace_id": "0" * 32,
                        }
                    )
            conn.execute(insert(journal_t), rows)
            for i in range(per_tx):
                for _ in range(2):
                    conn.execute(
                        update(actions_t)
                        .where(actions_t.c.id == f"act{i}")
                        .values(status="SUCCEEDED", epoch=actions_t.c.epoch + 1)
                    )
                conn.execute(
                    update(runs_t)
                    .where(runs_t.c.id == f"run{i}")
                    .values(last_seq=seq, updated_at=now)
                )
    elapsed = time.perf_counter() - start
    engine.dispose()
    return 1000 * elapsed / (transactions * per_tx)


def _top(profiler: cProfile.Profile, receipts: int, n: int = 25) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        stats = pstats.Stats(profiler, stream=buf)
        stats.sort_stats(key)
        rows = []
        for func, (_cc, calls, tt, ct, _callers) in sorted(
            stats.stats.items(),  # type: ignore[attr-defined]
            key=lambda kv: kv[1][2 if key == "tottime" else 3],
            reverse=True,
        )[:n]:
            where = f"{Path(func[0]).name}:{func[1]}({func[2]})"
            rows.append(
                f"{1000 * (tt if key == 'tottime' else ct) / receipts:7.3f} ms"
                f"  {calls / receipts:6.1f}/receipt  {where}"
            )
        out[key] = rows
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--actions", type=int, default=25)
    parser.add_argument("--workers", type=int, default=20)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    found = measure(args.runs, args.actions, args.workers, args.profile)
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    profile = found.pop("profile", None)
    for key, value in found.items():
        print(f"{key:28} {value}")
    if profile:
        for key, rows in profile.items():
            print(f"\nby {key} (per receipt):")
            print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
