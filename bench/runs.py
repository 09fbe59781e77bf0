"""Durable-run benchmarks, each beside its baseline measured in the same run.

  round trip   no-op action: client -> coordinator -> worker -> durable receipt -> client
               (SubmitRun + WaitRun), with a real worker and with a simulated one;
               baseline: raw grpc.aio client -> relay -> echo over one stream (bench/raw_echo.py)
  ingest       receipts made durable per second from 50 simulated workers;
               baseline (equal work): raw SQLAlchemy Core transactions writing the rows each
               receipt caused in that run (the receipt, its journal events, the finished and
               the next action, the run's head, the owner's usage) with the same durability
               (SQLite WAL, synchronous=FULL), one transaction per batch of as many receipts
               as the flow can have in flight (one per run); and, for reference, raw batched
               inserts of receipt rows alone
  CPU          beside each: the coordinator's CPU (user + system) per round trip and per
               receipt, which drifts less with the machine's speed than the latencies do
  store        beside each: the store writer's transactions and busy time per round trip and
               per receipt (the coordinator's /metrics, `deskfleet_store_*`), split into the
               units' own work and their commits; baseline: the same rows written by raw Core
               statements in as many transactions (SQLite WAL, synchronous=FULL), so that
               "echo + these statements" is the floor this store's durable writes put under a
               round trip

Usage: python -m bench.runs [--quick] [--out bench/results/runs.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import psutil
from sqlalchemy import Engine, bindparam, func, insert, select, update

from bench.simulated_workers import SimulatorProcess
from bench.stats import summary, table_lines, timed
from bench.store_meter import METRICS_ARGS, Meter, metered, metrics_port, store_meter
from coordinator.heart.context import ACTIVE
from coordinator.store.engine import create_store_engine
from coordinator.store.journal import GENESIS, event_hash
from coordinator.store.models import (
    ActionRow,
    JournalRow,
    OwnerQuotaRow,
    ReceiptRow,
    RunRow,
)
from coordinator.store.schema import upgrade
from shared.credentials import auth_metadata
from shared.gen.deskfleet.v1 import fleet_pb2, fleet_pb2_grpc, runs_pb2, runs_pb2_grpc
from shared.receipts import content_hash
from tests.harness import CoordinatorProcess, WorkerProcess, wait_until

ROOT = Path(__file__).resolve().parent.parent


IDENTITY = (lambda b: b, lambda b: b)


def raw_echo(n: int) -> dict[str, float]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.raw_echo"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # only grpc core's shutdown chatter
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline().split()[1])
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary("/raw.Relay/Call", *IDENTITY)
            payload = b"x" * 200
            return timed(lambda: call(payload, timeout=5), n, warmup=20)
    finally:
        if proc.stdin:
            proc.stdin.close()
        proc.wait(10)


class Client:
    def __init__(self, coordinator: CoordinatorProcess) -> None:
        self.channel = grpc.insecure_channel(coordinator.address)
        self.metadata = auth_metadata(coordinator.admin_token_file.read_text().strip())
        self.runs = runs_pb2_grpc.RunServiceStub(self.channel)
        self.fleet = fleet_pb2_grpc.FleetServiceStub(self.channel)

    def online(self) -> int:
        status = self.fleet.GetWorkerStatus(
            fleet_pb2.GetWorkerStatusRequest(), metadata=self.metadata, timeout=10
        )
        return int(status.headless_online)

    def submit(self, actions: int) -> str:
        request = runs_pb2.SubmitRunRequest(
            actions=[
                runs_pb2.PlannedAction(kind="diag.echo", args_json="{}", idempotent=True)
                for _ in range(actions)
            ]
        )
        run = self.runs.SubmitRun(request, metadata=self.metadata, timeout=30)
        return str(run.id)

    def round_trip(self) -> float:
        """Submit and wait in one call (SubmitRun with wait_seconds), as `runs submit --wait`."""
        request = runs_pb2.SubmitRunRequest(
            actions=[runs_pb2.PlannedAction(kind="diag.echo", args_json="{}", idempotent=True)],
            wait_seconds=10,
        )
        start = time.perf_counter()
        run = self.runs.SubmitRun(request, metadata=self.metadata, timeout=15)
        elapsed = (time.perf_counter() - start) * 1000
        if run.status != "SUCCEEDED":
            raise RuntimeError(f"round-trip run {run.id} ended {run.status}: {run.stop_reason}")
        return elapsed

    def wait(self, run_id: str, timeout: float) -> str:
        """The run's status once it stopped (WaitRun: a waiter handed the run's view by the
        transaction that stops it, instead of a list of runs polled while the work runs)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"run {run_id} did not stop within {timeout} s")
            run = self.runs.WaitRun(
                runs_pb2.WaitRunRequest(id=run_id, timeout_seconds=min(left, 30.0)),
                metadata=self.metadata,
                timeout=min(left, 30.0) + 10,
            )
            if run.status not in ACTIVE:
                return str(run.status)


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU of the process so far (0 when not given): on a machine whose speed
    drifts, what the coordinator spent per unit of work moves less than its latency does."""
    if pid is None:
        return 0.0
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def round_trips(
    client: Client, n: int, coordinator_pid: int | None = None, meter: Meter | None = None
) -> dict[str, float]:
    for _ in range(10):
        client.round_trip()

    def work() -> dict[str, float]:
        before = cpu_seconds(coordinator_pid)
        found = summary([client.round_trip() for _ in range(n)])
        if coordinator_pid is not None:
            found["coordinator_cpu_ms"] = (cpu_seconds(coordinator_pid) - before) * 1000 / n
        return found

    return metered(meter, work, n)


def library_round_trips(client: Client, coordinator: CoordinatorProcess, n: int) -> dict[str, Any]:
    """The same no-op round trip through the client library (`deskfleet.Client.submit_plan`
    with a wait, as `runs submit --wait` does) and through the bare stub, alternated so that
    both meet the same machine: what the library adds to a call."""
    import deskfleet

    plan = {"actions": [{"kind": "diag.echo", "args": {}, "idempotent": True}]}
    with deskfleet.Client.connect(
        coordinator.address, token_file=str(coordinator.admin_token_file)
    ) as fleet:

        def through_library() -> float:
            start = time.perf_counter()
            handle = fleet.submit_plan(plan, wait=10)
            elapsed = (time.perf_counter() - start) * 1000
            if handle.started is None or handle.started.status != "SUCCEEDED":
                raise RuntimeError(f"library round trip {handle.id} did not succeed")
            return elapsed

        for _ in range(10):
            through_library()
            client.round_trip()
        library, stub = [], []
        for _ in range(n):
            library.append(through_library())
            stub.append(client.round_trip())
    return {"library": summary(library), "stub": summary(stub)}


def ingest(
    client: Client,
    runs: int,
    actions: int,
    coordinator_pid: int | None = None,
    meter: Meter | None = None,
) -> dict[str, float]:
    return metered(meter, lambda: _ingest(client, runs, actions, coordinator_pid), runs * actions)


def _ingest(
    client: Client, runs: int, actions: int, coordinator_pid: int | None
) -> dict[str, float]:
    cpu = cpu_seconds(coordinator_pid)
    start = time.perf_counter()
    submitted = [client.submit(actions) for _ in range(runs)]
    # Waited for one by one: the time until the last stops. Polling a list of runs meanwhile
    # would load the coordinator being measured (each poll read every finished run).
    ended = [client.wait(run_id, 120) for run_id in submitted]
    elapsed = time.perf_counter() - start
    if set(ended) != {"SUCCEEDED"}:
        raise RuntimeError(f"ingest runs ended {sorted(set(ended))}, not all SUCCEEDED")
    found = {
        "receipts": runs * actions,
        "seconds": elapsed,
        "receipts_per_s": runs * actions / elapsed,
        "runs": runs,
    }
    if coordinator_pid is not None:
        found["coordinator_cpu_ms_per_receipt"] = (
            (cpu_seconds(coordinator_pid) - cpu) * 1000 / (runs * actions)
        )
    return found


# A receipt's body in the raw baselines, as long as a no-op echo's.
BODY = '{"action":"act_x","result":{"echo":null},"status":"succeeded"}'
_USAGE = (
    update(OwnerQuotaRow.__table__)
    .where(OwnerQuotaRow.__table__.c.owner_id == "u")
    .values(stored_bytes=OwnerQuotaRow.__table__.c.stored_bytes + bindparam("n"))
)


@contextmanager
def _raw_store() -> Iterator[Engine]:
    """A fresh store with the coordinator's schema and writer settings, and owner "u"."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/raw.db"
        upgrade(url)
        engine = create_store_engine(url, pool_size=1)
        try:
            with engine.begin() as conn:
                conn.execute(insert(OwnerQuotaRow.__table__), [dict(owner_id="u", stored_bytes=0)])
            yield engine
        finally:
            engine.dispose()


def _receipt(receipt_id: str, run_id: str, action_id: str, at: float) -> dict[str, Any]:
    return dict(
        id=receipt_id,
        run_id=run_id,
        action_id=action_id,
        attempt_id="a",
        epoch=1,
        worker_id="w",
        status="succeeded",
        body=BODY,
        sha256=content_hash(BODY),
        created_at=at,
        traceparent="",
    )


def _events(
    run_id: str, first: int, count: int, prev: str, at: float, kind: str
) -> list[dict[str, Any]]:
    """`count` journal rows of the run from seq `first`, hash-chained after `prev`."""
    rows = []
    for seq in range(first, first + count):
        digest = event_hash(prev, run_id, seq, kind, at, BODY)
        rows.append(
            dict(
                run_id=run_id,
                seq=seq,
                kind=kind,
                at=at,
                data=BODY,
                prev_hash=prev,
                hash=digest,
                trace_id="t" * 32,
            )
        )
        prev = digest
    return rows


def raw_insert(rows: int, batch: int = 256) -> dict[str, float]:
    with _raw_store() as engine:
        now = time.time()
        with engine.begin() as conn:
            conn.execute(insert(RunRow.__table__), [_run("run_x", now)])
            conn.execute(insert(ActionRow.__table__), [_action("act_x", "run_x", 0)])
        start = time.perf_counter()
        for first in range(0, rows, batch):
            with engine.begin() as conn:
                conn.execute(
                    insert(ReceiptRow.__table__),
                    [
                        _receipt(f"rcp_{i}", "run_x", "act_x", now)
                        for i in range(first, min(rows, first + batch))
                    ],
                )
        elapsed = time.perf_counter() - start
    return {"rows": rows, "seconds": elapsed, "rows_per_s": rows / elapsed, "batch": batch}


def journal_per_receipt(db_url: str, actions: int) -> float:
    """Journal events written per receipt in the ingest runs (those of `actions` actions)."""
    engine = create_store_engine(db_url, immediate=False, pool_size=1)
    try:
        with engine.connect() as conn:
            runs = select(RunRow.id).where(RunRow.actions_total == actions)
            events = conn.execute(
                select(func.count()).select_from(JournalRow).where(JournalRow.run_id.in_(runs))
            ).scalar_one()
            receipts = conn.execute(
                select(func.count()).select_from(ReceiptRow).where(ReceiptRow.run_id.in_(runs))
            ).scalar_one()
    finally:
        engine.dispose()
    return float(events) / max(1, int(receipts))


def round_trip_events(db_url: str) -> tuple[int, int]:
    """Journal events a one-action run wrote, on average, up to its action's dispatch (the
    submitting transaction) and after it (the receipt's), in the round-trip runs."""
    engine = create_store_engine(db_url, immediate=False, pool_size=1)
    try:
        with engine.connect() as conn:
            one = select(RunRow.id).where(RunRow.actions_total == 1)
            runs = conn.execute(select(func.count()).select_from(one.subquery())).scalar_one()
            dispatched = (
                select(ActionRow.dispatched_at)
                .where(ActionRow.run_id == JournalRow.run_id)
                .scalar_subquery()
            )
            early = conn.execute(
                select(func.count())
                .select_from(JournalRow)
                .where(JournalRow.run_id.in_(one), JournalRow.at <= dispatched)
            ).scalar_one()
            total = conn.execute(
                select(func.count()).select_from(JournalRow).where(JournalRow.run_id.in_(one))
            ).scalar_one()
    finally:
        engine.dispose()
    runs = max(1, int(runs))
    return round(early / runs), round((total - early) / runs)


def raw_round_trip_store(n: int, submit_events: int, stop_events: int) -> dict[str, float]:
    """A no-op round trip's rows as raw Core statements, in the two transactions the
    coordinator needs at least: the submission with its dispatch (the run, its action, their
    journal events, the claim, the owner's usage), then the receipt with the run's stop (the
    receipt, its events, the finished action, the run's status and head, the usage), with
    the coordinator's writer settings (SQLite WAL, synchronous=FULL). Per round trip."""
    t = ActionRow.__table__
    r = RunRow.__table__
    claim = (
        update(t)
        .where(t.c.id == bindparam("aid"))
        .values(status="DISPATCHED", worker_id="w", attempt_id="a", epoch=1, attempts=1)
    )
    finish = (
        update(t)
        .where(t.c.id == bindparam("aid"))
        .values(status="SUCCEEDED", receipt_id=bindparam("rid"), finished_at=bindparam("at"))
    )
    head = (
        update(r)
        .where(r.c.id == bindparam("rid"))
        .values(
            status=bindparam("status"),
            last_seq=bindparam("seq"),
            last_hash=bindparam("h"),
            updated_at=bindparam("at"),
        )
    )
    times = []
    with _raw_store() as engine:
        for i in range(n + 20):
            start = time.perf_counter()
            at = time.time()
            run_id, action_id, receipt_id = f"run_{i}", f"act_{i}", f"rcp_{i}"
            with engine.begin() as conn:
                conn.execute(insert(r), [_run(run_id, at)])
                conn.execute(insert(t), [_action(action_id, run_id, 0)])
                first = _events(run_id, 1, submit_events, GENESIS, at, "event")
                if first:
                    conn.execute(insert(JournalRow.__table__), first)
                conn.execute(claim, dict(aid=action_id))
                prev = first[-1]["hash"] if first else GENESIS
                conn.execute(
                    head, dict(rid=run_id, status="RUNNING", seq=len(first), h=prev, at=at)
                )
                conn.execute(_USAGE, dict(n=len(BODY) * len(first)))
            with engine.begin() as conn:
                conn.execute(
                    insert(ReceiptRow.__table__), [_receipt(receipt_id, run_id, action_id, at)]
                )
                last = _events(run_id, len(first) + 1, stop_events, prev, at, "event")
                if last:
                    conn.execute(insert(JournalRow.__table__), last)
                conn.execute(finish, dict(aid=action_id, rid=receipt_id, at=at))
                seq = len(first) + len(last)
                h = last[-1]["hash"] if last else prev
                conn.execute(head, dict(rid=run_id, status="SUCCEEDED", seq=seq, h=h, at=at))
                conn.execute(_USAGE, dict(n=len(BODY) * (1 + len(last))))
            if i >= 20:  # the first ones warm the statement cache
                times.append((time.perf_counter() - start) * 1000)
    found = summary(times)
    found["transactions"] = 2
    found["journal_events"] = submit_events + stop_events
    return found


def _run(run_id: str, now: float) -> dict[str, Any]:
    return dict(
        id=run_id,
        owner_id="u",
        title="t",
        status="RUNNING",
        stop_reason="",
        waiting_code="",
        waiting_detail="",
        limits={},
        estimate_actions=1,
        estimate_seconds=1.0,
        extensions=0,
        successes_at_extension=0,
        actions_total=1,
        actions_succeeded=0,
        attempts_used=0,
        last_seq=0,
        last_hash="",
        trace_id="t" * 32,
        created_at=now,
        updated_at=now,
    )


def _action(action_id: str, run_id: str, idx: int) -> dict[str, Any]:
    return dict(
        id=action_id,
        run_id=run_id,
        idx=idx,
        stage=idx,
        kind="diag.echo",
        intent="diag.echo",
        args="{}",
        fingerprint="f" * 64,
        idempotent=True,
        route={},
        status="PENDING",
        worker_id="",
        attempt_id="",
        epoch=0,
        attempts=0,
        timeout_seconds=60.0,
        error="",
        receipt_id="",
    )


def raw_equal_work(runs: int, actions: int, events_per_receipt: float) -> dict[str, Any]:
    """What the ingest figure's receipts wrote, row for row, as raw Core statements: per
    receipt its row, its journal events (hash-chained), the finished action, the next action
    claimed, the run's head; per transaction the owner's usage. One transaction per batch of
    `runs` receipts (one per run, the most the flow has in flight), synchronous=FULL."""
    events = max(1, round(events_per_receipt))
    finish = (
        update(ActionRow.__table__)
        .where(ActionRow.__table__.c.id == bindparam("aid"))
        .values(
            status="SUCCEEDED",
            finished_at=bindparam("at"),
            receipt_id=bindparam("rid"),
            lease_expires_at=None,
        )
    )
    claim = (
        update(ActionRow.__table__)
        .where(ActionRow.__table__.c.id == bindparam("aid"))
        .values(
            status="DISPATCHED",
            worker_id="w",
            attempt_id=bindparam("att"),
            epoch=1,
            attempts=1,
            dispatched_at=bindparam("at"),
            lease_expires_at=bindparam("at"),
        )
    )
    head = (
        update(RunRow.__table__)
        .where(RunRow.__table__.c.id == bindparam("rid"))
        .values(last_seq=bindparam("seq"), last_hash=bindparam("h"), updated_at=bindparam("at"))
    )
    with _raw_store() as engine:  # the coordinator's writer settings
        now = time.time()
        run_ids = [f"run_{r}" for r in range(runs)]
        with engine.begin() as conn:
            conn.execute(insert(RunRow.__table__), [_run(r, now) for r in run_ids])
            conn.execute(
                insert(ActionRow.__table__),
                [_action(f"act_{r}_{i}", r, i) for r in run_ids for i in range(actions + 1)],
            )
        heads = {r: (0, GENESIS) for r in run_ids}
        start = time.perf_counter()
        for i in range(actions):
            at = time.time()
            receipts, journal, finished, claimed, heads_now = [], [], [], [], []
            for r in run_ids:
                rid = f"rcp_{r}_{i}"
                receipts.append(_receipt(rid, r, f"act_{r}_{i}", at))
                seq, prev = heads[r]
                rows = _events(r, seq + 1, events, prev, at, "receipt")
                journal += rows
                seq, prev = seq + events, rows[-1]["hash"]
                heads[r] = (seq, prev)
                finished.append(dict(aid=f"act_{r}_{i}", at=at, rid=rid))
                claimed.append(dict(aid=f"act_{r}_{i + 1}", att=f"att_{r}_{i}", at=at))
                heads_now.append(dict(rid=r, seq=seq, h=prev, at=at))
            with engine.begin() as conn:
                conn.execute(insert(ReceiptRow.__table__), receipts)
                conn.execute(insert(JournalRow.__table__), journal)
                conn.execute(finish, finished)
                conn.execute(claim, claimed)
                conn.execute(head, heads_now)
                conn.execute(_USAGE, dict(n=len(BODY) * (1 + events) * runs))
        elapsed = time.perf_counter() - start
    receipts_total = runs * actions
    return {
        "receipts": receipts_total,
        "batch": runs,
        "journal_events_per_receipt": events,
        "seconds": elapsed,
        "receipts_per_s": receipts_total / elapsed,
    }


def table(doc: dict[str, Any]) -> str:
    f, b = doc["figures"], doc["baselines"]
    echo = b["raw_two_hop_echo"]
    rows = [
        (
            "raw grpc.aio two-hop echo (baseline)",
            f"p50 {echo['p50_ms']:.2f} / p99 {echo['p99_ms']:.2f} ms",
            "-",
            "-",
        )
    ]
    store = b.get("raw_round_trip_store")
    for key, label in (
        ("round_trip_real_worker", "no-op round trip, real worker"),
        ("round_trip_simulated_worker", "no-op round trip, simulated worker"),
    ):
        fig = f[key]
        rows.append(
            (
                f"{label} (coordinator CPU {fig['coordinator_cpu_ms']:.1f} ms each)",
                f"p50 {fig['p50_ms']:.2f} / p99 {fig['p99_ms']:.2f} ms",
                f"p50 {echo['p50_ms']:.2f} ms",
                f"{fig['p50_ms'] / echo['p50_ms']:.1f}x",
            )
        )
        if store is not None and "store_write_unit_ms" in fig:
            rows.append(_store_row("  its store writer", fig, store["mean_ms"], "round trip"))
    if store is not None:
        floor = echo["p50_ms"] + store["p50_ms"]
        rows.append(
            (
                f"raw Core: a round trip's rows in 2 transactions ({store['journal_events']}"
                " journal events; baseline)",
                f"p50 {store['p50_ms']:.2f} / p99 {store['p99_ms']:.2f} ms",
                "-",
                "-",
            )
        )
        rows.append(
            (
                "floor of a durable round trip: echo + those statements (p50)",
                f"{floor:.2f} ms",
                f"p50 {echo['p50_ms']:.2f} ms",
                f"{floor / echo['p50_ms']:.1f}x",
            )
        )
    raw = b["raw_batched_insert"]
    rows.append(
        ("raw batched SQLAlchemy insert (baseline)", f"{raw['rows_per_s']:.0f} rows/s", "-", "-")
    )
    equal = b["raw_equal_work"]
    rows.append(
        (
            "raw Core transactions of a receipt's rows (equal-work baseline)",
            f"{equal['receipts_per_s']:.0f} receipts/s",
            "-",
            "-",
        )
    )
    ing = f["ingest_50_workers"]
    rows.append(
        (
            f"receipts durable/s, 50 workers ({ing['receipts']} receipts,"
            f" coordinator CPU {ing['coordinator_cpu_ms_per_receipt']:.2f} ms each)",
            f"{ing['receipts_per_s']:.0f} /s",
            f"{equal['receipts_per_s']:.0f} /s",
            f"{ing['receipts_per_s'] / equal['receipts_per_s']:.3f}x",
        )
    )
    if "store_write_unit_ms" in ing:
        rows.append(
            _store_row("  its store writer", ing, 1000 / equal["receipts_per_s"], "receipt")
        )
    header = ("figure", "value", "baseline", "ratio")
    lines = table_lines(header, rows)
    return "\n".join(lines)


def _store_row(
    label: str, fig: dict[str, Any], baseline_ms: float, per: str
) -> tuple[str, str, str, str]:
    """The store writer's share of a figure beside raw Core doing the same rows."""
    busy = fig["store_write_unit_ms"] + fig["store_write_commit_ms"]
    return (
        f"{label}: {fig['store_write_transactions']:.1f} transactions per {per}, units"
        f" {fig['store_write_unit_ms']:.2f} + commits {fig['store_write_commit_ms']:.2f} ms"
        f" (CPU {fig['store_write_cpu_ms']:.2f}); busy {fig['store_write_busy_share']:.0%}"
        " of the time",
        f"{busy:.2f} ms busy",
        f"raw Core {baseline_ms:.2f} ms",
        f"{busy / baseline_ms:.1f}x",
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    n = 30 if args.quick else 200
    ingest_runs, ingest_actions = (30, 20) if args.quick else (50, 40)
    with tempfile.TemporaryDirectory() as tmp:
        coordinator = CoordinatorProcess(
            Path(tmp) / "coord",
            heartbeat=1.0,
            lease=5.0,
            sweep=60.0,
            serve_args=METRICS_ARGS,
        ).start()
        worker = WorkerProcess(coordinator, "bench-worker")
        sim: SimulatorProcess | None = None
        try:
            meter = store_meter(metrics_port(coordinator))
            client = Client(coordinator)
            worker.start().wait_online(60)
            pid = coordinator.proc.pid if coordinator.proc is not None else None
            real = round_trips(client, n, pid, meter)
            worker.stop()
            wait_until(lambda: client.online() == 0, 30, 0.05, "the real worker to leave")
            sim = SimulatorProcess(
                coordinator.address, coordinator.admin_token_file, 50, Path(tmp) / "sim.log"
            )
            sim.wait_ready(60)
            wait_until(lambda: client.online() >= 50, 30, 0.05, "50 simulated workers online")
            simulated = round_trips(client, n, pid, meter)
            library = library_round_trips(client, coordinator, n)
            flow = ingest(client, ingest_runs, ingest_actions, pid, meter)
            events_per_receipt = journal_per_receipt(coordinator.db_url, ingest_actions)
            submit_events, stop_events = round_trip_events(coordinator.db_url)
        finally:
            if sim is not None:
                sim.stop()
            worker.stop()
            coordinator.stop()
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "grpcio": grpc.__version__,
        },
        "store": "sqlite (WAL, synchronous=FULL for writers)",
        "baselines": {
            "raw_two_hop_echo": raw_echo(n),
            "raw_batched_insert": raw_insert(5000 if args.quick else 20000),
            "raw_equal_work": raw_equal_work(ingest_runs, ingest_actions, events_per_receipt),
            "raw_round_trip_store": raw_round_trip_store(n, submit_events, stop_events),
        },
        "figures": {
            "round_trip_real_worker": real,
            "round_trip_simulated_worker": simulated,
            "round_trip_client_library": library,
            "ingest_50_workers": {**flow, "journal_events_per_receipt": events_per_receipt},
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "runs.json")
    args = parser.parse_args()
    try:
        doc = run(args)
    except (RuntimeError, TimeoutError, grpc.RpcError, OSError) as exc:
        print(
            f"runs bench: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
            file=sys.stderr,
        )
        return 1
    print(table(doc))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
