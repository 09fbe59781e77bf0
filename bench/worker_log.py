"""The worker's action log: syncs and time per action, beside a raw append + fdatasync.

  figure     no-op attempts (`diag.echo`) through the worker's real path in this process:
             ActionExecutor.dispatch, a pool thread, ActionLog.begin/finish, the receipt
             handed to the loop, ReceiptAck; one at a time, then 4 at a time (the worker's
             slots). Every fsync and fdatasync of the process is counted (os.fsync and the
             log's fdatasync wrapped), so a sync anywhere on the path shows.
  baseline   the floor of a durable receipt, in the same directory and run: append the same
             bytes to a file and fdatasync it, once per action (twice where the attempt also
             needs a started record)

Both kinds of attempt are measured: harmless to rerun (idempotent diag.echo: no started
record) and not (`idempotent: false`: a started record synced before it acts).

Usage: python -m bench.worker_log [--quick] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shared.gen.deskfleet.v1 import worker_pb2
from shared.receipts import encode_result
from worker_agent import action_log
from worker_agent.actions import default_registry
from worker_agent.executor import ActionExecutor

ROOT = Path(__file__).resolve().parent.parent

SLOTS = 4


class SyncCounter:
    """Counts fsync and fdatasync calls while installed."""

    def __init__(self) -> None:
        self.calls = 0
        self._saved: list[tuple[Any, str, Callable[[int], None]]] = []

    def __enter__(self) -> SyncCounter:
        for owner, name in ((os, "fsync"), (os, "fdatasync"), (action_log, "_fdatasync")):
            real = getattr(owner, name, None)
            if real is None:
                continue
            self._saved.append((owner, name, real))
            setattr(owner, name, self._counting(real))
        return self

    def _counting(self, real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            self.calls += 1
            real(fd)

        return sync

    def __exit__(self, *exc: object) -> None:
        for owner, name, real in self._saved:
            setattr(owner, name, real)


async def _through_executor(root: Path, n: int, idempotent: bool, concurrent: int) -> None:
    executor = ActionExecutor(action_log.ActionLog(root / "actions"), default_registry())
    queue: asyncio.Queue[worker_pb2.WorkerMessage] = asyncio.Queue()
    executor.attach(queue.put_nowait)
    args = encode_result({"value": 1})
    try:
        for start in range(0, n, concurrent):
            batch = range(start, min(n, start + concurrent))
            for i in batch:
                executor.dispatch(
                    worker_pb2.Dispatch(
                        action_id=f"act_{i}",
                        run_id="run_bench",
                        attempt_id="att_1",
                        epoch=1,
                        attempt=1,
                        kind="diag.echo",
                        args_json=args,
                        idempotent=idempotent,
                    )
                )
            receipts = 0
            while receipts < len(batch):
                message = await queue.get()
                if message.WhichOneof("body") == "receipt":
                    executor.acknowledge(
                        worker_pb2.ReceiptAck(
                            action_id=message.receipt.action_id,
                            attempt_id=message.receipt.attempt_id,
                            accepted=True,
                        )
                    )
                    receipts += 1
    finally:
        executor.close(wait=True)


def measure_log(n: int, idempotent: bool, concurrent: int) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(dir=ROOT / "bench" / "results") as tmp,
        SyncCounter() as syncs,
    ):
        began = time.perf_counter()
        asyncio.run(_through_executor(Path(tmp), n, idempotent, concurrent))
        seconds = time.perf_counter() - began
    return {
        "actions": n,
        "concurrent": concurrent,
        "syncs_per_action": syncs.calls / n,
        "us_per_action": seconds / n * 1e6,
    }


def measure_raw(n: int, records: int) -> dict[str, Any]:
    """`records` appends of a receipt-sized record, each followed by fdatasync, per action."""
    record = action_log.framed(
        {"op": "receipt", "action_id": "act_0", "result_json": '{"echo":1}', "x": "y" * 200}
    )
    sync = getattr(os, "fdatasync", os.fsync)
    with tempfile.TemporaryDirectory(dir=ROOT / "bench" / "results") as tmp:
        fd = os.open(Path(tmp) / "raw.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            began = time.perf_counter()
            for _ in range(n * records):
                os.write(fd, record)
                sync(fd)
            seconds = time.perf_counter() - began
        finally:
            os.close(fd)
    return {"actions": n, "syncs_per_action": records, "us_per_action": seconds / n * 1e6}


def run(quick: bool) -> dict[str, Any]:
    n = 200 if quick else 1000
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    return {
        "actions": n,
        "raw_one_sync": measure_raw(n, 1),
        "raw_two_syncs": measure_raw(n, 2),
        "idempotent": measure_log(n, True, 1),
        "not_idempotent": measure_log(n, False, 1),
        "idempotent_slots": measure_log(n, True, SLOTS),
        "slots": SLOTS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    doc = run(args.quick)
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    for key in (
        "raw_one_sync",
        "raw_two_syncs",
        "idempotent",
        "not_idempotent",
        "idempotent_slots",
    ):
        r = doc[key]
        syncs, us = r["syncs_per_action"], r["us_per_action"]
        print(f"{key:18} {syncs:.2f} syncs/action  {us:9.1f} us/action")


if __name__ == "__main__":
    main()
