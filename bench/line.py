"""What the line costs a serving when there are more runs than slots: one ledger transaction
that announces capacity (`capacity_changed`, as a receipt or a reconnect does) while every
slot is taken and N runs wait in line, timed in process on a SQLite store in a temporary
directory, through `slots.serve` as `Dispatcher.run_unit` runs it.

Beside it, in the same run on the same store: the serving that reads the whole line at once
(`LINE_PAGE` set to N, what every serving did before the line was paged).

    python -m bench.line --sizes 100,1000,3000 --samples 200
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from bench.routing import _fleet, _write
from coordinator.heart import ledger, slots
from coordinator.heart.context import MAX_PER_WORKER, Context
from coordinator.store.engine import create_store_engine
from coordinator.store.models import Base
from coordinator.streams.worker_index import WorkerIndex
from shared.ids import new_id


def _fill(engine: Engine, runs: int) -> WorkerIndex:
    """One worker online, its slots all taken, and `runs` more one-action runs in line,
    each submitted through the ledger as a submit is."""
    _fleet(engine, 1)
    index = WorkerIndex()
    with Session(engine) as s:
        index.read(s)
    for _ in range(runs + MAX_PER_WORKER):  # the first ones take the worker's slots
        with Session(engine, expire_on_commit=False) as s, s.begin():
            ctx = Context(lease_ttl=30.0, max_attempts=3, workers=index)
            ledger.advance(s, _write(s, new_id("run")), ctx)
            slots.serve(s, ctx)
    return index


def _serving_ms(engine: Engine, index: WorkerIndex, samples: int) -> float:
    times = []
    for _ in range(samples):
        ctx = Context(lease_ttl=30.0, max_attempts=3, workers=index)
        ctx.capacity_changed = True
        started = time.perf_counter()
        with Session(engine) as s, s.begin(), s.no_autoflush:
            assert slots.serve(s, ctx) == []  # the fleet is full: nothing is claimed
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,3000")
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    page = slots.LINE_PAGE
    print(f"{'runs in line':>12}  {'paged (ms, p50)':>16}  {'whole line (ms, p50)':>21}")
    for size in (int(n) for n in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            engine = create_store_engine(f"sqlite:///{Path(tmp) / 'line.db'}")
            Base.metadata.create_all(engine)
            index = _fill(engine, size)
            slots.LINE_PAGE = page
            paged = _serving_ms(engine, index, args.samples)
            slots.LINE_PAGE = size + 1
            whole = _serving_ms(engine, index, args.samples)
            slots.LINE_PAGE = page
            engine.dispose()
        print(f"{size:>12}  {paged:>16.3f}  {whole:>21.3f}")


if __name__ == "__main__":
    main()
