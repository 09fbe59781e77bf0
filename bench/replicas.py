"""Replica benchmarks: coordinators sharing one PostgreSQL store, each figure beside a
baseline measured in the same run.

  cross-replica round trip   no-op action (diag.echo routed to one real worker streaming to
                             replica B), SubmitRun + WaitRun through replica A: the order and
                             the run's wake-up go through the store (deliveries + NOTIFY);
                             baseline: the same plans through B, which holds the stream
                             (interleaved, one through B then one through A)
  receipts/s on PostgreSQL   bench/runs.py's ingest workload (50 simulated workers) against
                             one coordinator on PostgreSQL; baseline: the same on SQLite
  status over two replicas   GetWorkerStatus p50/p99 with N simulated workers, N/2 streaming
                             to each of two replicas, asked of each; baseline: the same N
                             streaming to one replica (N = 2000, 200 with --quick)

Every configuration gets a fresh PostgreSQL database on 127.0.0.1:5432, dropped at the end.
Without a server there the bench says so and exits 0.

Usage: python -m bench.replicas [--quick] [--json] [--workers N] [--out PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import secrets
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import psycopg
from sqlalchemy.engine import make_url

from bench.runs import Client, ingest
from bench.simulated_workers import SimulatorProcess
from bench.stats import summary, table_lines, timed, write_results
from shared.gen.deskfleet.v1 import fleet_pb2, runs_pb2
from tests.harness import CoordinatorProcess, WorkerProcess, tail, wait_until

ROOT = Path(__file__).resolve().parent.parent

PG_ADMIN_URL = "postgresql://root@127.0.0.1:5432/test"
# Round trips and ingest: the settings of bench/runs.py. Status with thousands of streams:
# the coordinator's defaults, as bench/kill_switch.py uses for its 500.
RUN_HEARTBEAT, RUN_LEASE = 1.0, 5.0
FLEET_HEARTBEAT, FLEET_LEASE = 5.0, 15.0
SWEEP = 60.0
INGEST_WORKERS = 50
WARMUP_ROUND_TRIPS = 10
# Simulated fleets come up in waves of SIM_WAVE processes of at most SIM_SIZE workers: a
# thousand Hellos at once on one replica left some streams without a Welcome for longer than
# the simulator's 30 s limit on a two-core machine.
SIM_SIZE, SIM_WAVE = 250, 2


class Databases:
    """Fresh PostgreSQL databases for this run; every one is dropped on leaving, failed or not."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.names: list[str] = []

    def __enter__(self) -> Databases:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5) as conn:
                for name in list(self.names):
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                    self.names.remove(name)
        except psycopg.Error as exc:  # reported, not raised: it must not hide the bench's error
            print(f"replicas bench: could not drop {', '.join(self.names)}: {exc}", file=sys.stderr)

    def create(self) -> str:
        name = f"deskfleet_bench_{secrets.token_hex(4)}"
        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.names.append(name)
        return make_url(self.admin_url).set(database=name).render_as_string(hide_password=False)


def postgres_problem(admin_url: str) -> str | None:
    """Why the PostgreSQL server cannot be used, or None when it answers."""
    try:
        psycopg.connect(admin_url, autocommit=True, connect_timeout=3).close()
    except psycopg.Error as exc:
        detail = str(exc).strip().splitlines()
        return detail[0] if detail else type(exc).__name__
    return None


class FleetClient(Client):
    """bench/runs.py's client, with its plans routed to one worker and the fleet's rows."""

    def __init__(self, coordinator: CoordinatorProcess, worker_id: str = "") -> None:
        super().__init__(coordinator)
        self.worker_id = worker_id

    def submit(self, actions: int) -> str:
        route = runs_pb2.RouteConstraint(worker=self.worker_id)
        request = runs_pb2.SubmitRunRequest(
            actions=[
                runs_pb2.PlannedAction(
                    kind="diag.echo", args_json="{}", idempotent=True, route=route
                )
                for _ in range(actions)
            ]
        )
        run = self.runs.SubmitRun(request, metadata=self.metadata, timeout=30)
        return str(run.id)

    def status(self) -> fleet_pb2.WorkerStatus:
        reply: fleet_pb2.WorkerStatus = self.fleet.GetWorkerStatus(
            fleet_pb2.GetWorkerStatusRequest(), metadata=self.metadata, timeout=30
        )
        return reply

    def retried(self) -> dict[str, float]:
        """Attempts beyond one per action, and the slowest run, over the succeeded runs."""
        listed = self.runs.ListRuns(
            runs_pb2.ListRunsRequest(limit=1000, status="SUCCEEDED"),
            metadata=self.metadata,
            timeout=30,
        )
        durations = [
            (r.updated_at.ToMicroseconds() - r.created_at.ToMicroseconds()) / 1e6
            for r in listed.runs
        ]
        return {
            "extra_attempts": sum(r.attempts_used - r.actions_total for r in listed.runs),
            "slowest_run_s": max(durations, default=0.0),
        }

    def holders(self) -> Counter[str]:
        """How many online workers each replica holds the stream of."""
        return Counter(w.replica for w in self.status().workers if w.online)

    def holder(self, worker_id: str) -> str:
        row = next((w for w in self.status().workers if w.id == worker_id), None)
        return row.replica if row is not None and row.online else ""


@contextlib.contextmanager
def replicas(
    workdir: Path, url: str, names: tuple[str, ...], heartbeat: float, lease: float
) -> Iterator[list[CoordinatorProcess]]:
    """Replicas on one store and one admin token (as tests/e2e/fleet/test_replicas.py starts
    them)."""
    coordinators = [
        CoordinatorProcess(
            workdir / name, url, replica=name, heartbeat=heartbeat, lease=lease, sweep=SWEEP
        )
        for name in names
    ]
    with contextlib.ExitStack() as stack:
        first = coordinators[0]
        first.init()
        for c in coordinators[1:]:
            c.workdir.mkdir(parents=True, exist_ok=True)
            shutil.copy(first.admin_token_file, c.admin_token_file)
        for c in coordinators:
            stack.callback(c.stop)
        # Started side by side: each start is mostly a Python process importing grpc.
        with ThreadPoolExecutor(len(coordinators)) as pool:
            list(pool.map(CoordinatorProcess.start, coordinators))
        yield coordinators


def _client(
    stack: contextlib.ExitStack, coordinator: CoordinatorProcess, worker: str = ""
) -> FleetClient:
    client = FleetClient(coordinator, worker)
    stack.callback(client.channel.close)
    return client


def _simulator(
    stack: contextlib.ExitStack, coordinator: CoordinatorProcess, count: int, log: Path
) -> SimulatorProcess:
    sim = SimulatorProcess(coordinator.address, coordinator.admin_token_file, count, log)
    stack.callback(sim.stop)
    return sim


def cross_replica(tmp: Path, url: str, n: int) -> dict[str, Any]:
    """Round trips of one no-op action to B's worker, submitted through B and through A."""
    with (
        replicas(tmp / "pair", url, ("a", "b"), RUN_HEARTBEAT, RUN_LEASE) as (a, b),
        contextlib.ExitStack() as stack,
    ):
        worker = WorkerProcess(b, "bench-worker")
        done = worker.enroll(coordinators=b.address)
        if done.returncode != 0:
            raise RuntimeError(f"enrolling the worker failed: {done.stderr.strip()}")
        stack.callback(worker.stop)
        worker.start().wait_online(90)
        via_b = _client(stack, b, worker.worker_id)
        via_a = _client(stack, a, worker.worker_id)
        if (held := via_a.holder(worker.worker_id)) != "b":
            raise RuntimeError(f"the worker streams to replica {held!r}, not b")
        for _ in range(WARMUP_ROUND_TRIPS):
            via_b.round_trip()
            via_a.round_trip()
        same: list[float] = []
        cross: list[float] = []
        started = time.perf_counter()
        for _ in range(n):  # interleaved: drift in the machine's load hits both alike
            same.append(via_b.round_trip())
            cross.append(via_a.round_trip())
        elapsed = time.perf_counter() - started
        if (held := via_a.holder(worker.worker_id)) != "b":
            raise RuntimeError(f"the worker moved to replica {held!r} during the measurement")
        if worker.proc is not None and worker.proc.poll() is not None:
            raise RuntimeError(f"the worker exited: {tail(worker.log, 3)}")
        # Orders A relayed that B never took would be left in the store.
        left = _pending_deliveries(url)
        retried = via_a.retried()
    return {
        "same_replica": summary(same),
        "cross_replica": summary(cross),
        "checks": {
            "seconds": elapsed,
            "deliveries_left": left,
            **retried,
            "store_errors": store_errors(a.log, b.log),
        },
    }


def _pending_deliveries(url: str) -> int:
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute("SELECT count(*) FROM deliveries").fetchone()
    return int(row[0]) if row else 0


def receipts(tmp: Path, url: str | None, runs: int, actions: int) -> dict[str, Any]:
    """bench/runs.py's ingest with its 50 simulated workers, against one coordinator on `url`
    (None: its own SQLite file)."""
    label = "sqlite" if url is None else "postgresql"
    coordinator = CoordinatorProcess(
        tmp / f"ingest-{label}", url, heartbeat=RUN_HEARTBEAT, lease=RUN_LEASE, sweep=SWEEP
    )
    with contextlib.ExitStack() as stack:
        stack.callback(coordinator.stop)
        coordinator.start()
        client = _client(stack, coordinator)
        sim = _simulator(stack, coordinator, INGEST_WORKERS, tmp / f"ingest-{label}-sim.log")
        sim.wait_ready(120)
        wait_until(
            lambda: client.online() >= INGEST_WORKERS, 30, 0.05, f"{INGEST_WORKERS} workers online"
        )
        for _ in range(WARMUP_ROUND_TRIPS):
            client.round_trip()
        try:
            flow: dict[str, Any] = ingest(client, runs, actions)
        except TimeoutError as exc:  # reported as a figure: a stall is what this found
            flow = {"receipts": runs * actions, "runs": runs, "receipts_per_s": None}
            flow["timed_out"] = str(exc)
        if sim.proc.poll() is not None:
            raise RuntimeError(f"the {label} simulator exited during the measurement")
        retried = client.retried()
    return {
        "store": label,
        "workers": INGEST_WORKERS,
        **flow,
        **retried,
        "store_errors": store_errors(coordinator.log),
    }


def store_errors(*logs: Path) -> dict[str, int]:
    """What coordinators logged about units of work their store refused (figures are only
    comparable with their baselines while these are zero)."""
    text = "".join(log.read_text(errors="replace") for log in logs if log.exists())
    return {
        "lost_worker_message_batches": text.count("could not record"),
        "deadlocks": text.count("deadlock detected"),
        "warnings": text.count(" WARNING "),
    }


def simulator_sizes(total: int) -> list[int]:
    """Workers per simulator process: an even number of processes of at most SIM_SIZE each."""
    count = 2 * -(-total // (2 * SIM_SIZE))
    return [total // count + (1 if i < total % count else 0) for i in range(count)]


def status_spread(
    tmp: Path, url: str, names: tuple[str, ...], total: int, n: int
) -> list[dict[str, Any]]:
    """GetWorkerStatus latency through each replica while `total` simulated workers stream,
    spread evenly over `names`. The simulator processes are the same in every case (sizes,
    waves), only their targets differ, so the client side is the same for one or two replicas."""
    label = "-".join(names)
    with (
        replicas(tmp / f"status-{label}", url, names, FLEET_HEARTBEAT, FLEET_LEASE) as coords,
        contextlib.ExitStack() as stack,
    ):
        sizes = simulator_sizes(total)
        sims: list[SimulatorProcess] = []
        timings: list[dict[str, float]] = []
        spawned = time.perf_counter()
        for first in range(0, len(sizes), SIM_WAVE):
            wave = [
                _simulator(
                    stack,
                    coords[i % len(coords)],
                    sizes[i],
                    tmp / f"status-{label}-sim{i}.log",
                )
                for i in range(first, min(first + SIM_WAVE, len(sizes)))
            ]
            timings += [sim.wait_ready(300) for sim in wave]
            sims += wave
        ready_s = time.perf_counter() - spawned
        clients = [_client(stack, c) for c in coords]
        asked_first = clients[0]
        wait_until(lambda: asked_first.online() >= total, 60, 0.5, f"{total} workers online")
        holders = asked_first.holders()
        want = Counter({name: total // len(names) for name in names})
        if holders != want:
            raise RuntimeError(f"streams held {dict(holders)}, expected {dict(want)}")
        results = []
        for coordinator, client in zip(coords, clients, strict=True):
            result = timed(client.status, n, warmup=10)
            result.update(
                asked=coordinator.replica,
                replicas=list(names),
                workers=total,
                held=dict(holders),
                rows_in_reply=len(client.status().workers),
                simulators=sizes,
                spawn_to_ready_s=ready_s,
                enroll_s=max(t.get("enroll", 0.0) for t in timings),
                connect_s=max(t.get("connect", 0.0) for t in timings),
            )
            results.append(result)
        for sim in sims:
            if sim.proc.poll() is not None:
                raise RuntimeError("a simulator exited during the measurement")
        errors = store_errors(*(c.log for c in coords))
    for result in results:
        result["store_errors"] = errors
    return results


def run(args: argparse.Namespace) -> dict[str, Any]:
    quick = args.quick
    n_trips = 50 if quick else 300
    # bench/runs.py's quick size; full: more runs than that, within ingest()'s 120 s limit on
    # PostgreSQL even after one 60 s stall of a lost receipt (see `trouble`).
    ingest_runs, ingest_actions = (50, 20) if quick else (100, 20)
    fleet = args.workers or (200 if quick else 2000)
    n_status = 30 if quick else 100
    started = time.perf_counter()
    phases: dict[str, float] = {}

    def phase(name: str, since: float) -> None:
        phases[name] = time.perf_counter() - since

    with (
        tempfile.TemporaryDirectory(prefix="deskfleet-bench-") as tmp_name,
        Databases(args.pg_admin_url) as dbs,
    ):
        tmp = Path(tmp_name)
        t = time.perf_counter()
        trips = cross_replica(tmp, dbs.create(), n_trips)
        phase("round_trips", t)
        t = time.perf_counter()
        on_sqlite = receipts(tmp, None, ingest_runs, ingest_actions)
        phase("ingest_sqlite", t)
        t = time.perf_counter()
        on_postgres = receipts(tmp, dbs.create(), ingest_runs, ingest_actions)
        phase("ingest_postgresql", t)
        t = time.perf_counter()
        [single] = status_spread(tmp, dbs.create(), ("solo",), fleet, n_status)
        phase("status_one_replica", t)
        t = time.perf_counter()
        spread = status_spread(tmp, dbs.create(), ("a", "b"), fleet, n_status)
        phase("status_two_replicas", t)
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "grpcio": grpc.__version__,
            "postgresql": _server_version(args.pg_admin_url),
        },
        "settings": {
            "quick": quick,
            "round_trips": n_trips,
            "warmup_round_trips": WARMUP_ROUND_TRIPS,
            "run_heartbeat_s": RUN_HEARTBEAT,
            "run_lease_s": RUN_LEASE,
            "ingest_workers": INGEST_WORKERS,
            "ingest_runs": ingest_runs,
            "ingest_actions_per_run": ingest_actions,
            "status_workers": fleet,
            "status_samples": n_status,
            "fleet_heartbeat_s": FLEET_HEARTBEAT,
            "fleet_lease_s": FLEET_LEASE,
            "seconds": time.perf_counter() - started,
            "phase_seconds": phases,
        },
        "baselines": {
            "round_trip_same_replica": trips["same_replica"],
            "receipts_sqlite": on_sqlite,
            "status_one_replica": single,
        },
        "figures": {
            "round_trip_cross_replica": trips["cross_replica"],
            "receipts_postgresql": on_postgres,
            "status_two_replicas": spread,
        },
        "round_trip_checks": trips["checks"],
    }


def _server_version(admin_url: str) -> str:
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else ""


def table(doc: dict[str, Any]) -> str:
    b, f = doc["baselines"], doc["figures"]

    def latency(fig: dict[str, Any]) -> str:
        return f"p50 {fig['p50_ms']:.2f} / p99 {fig['p99_ms']:.2f} ms"

    def rate(fig: dict[str, Any]) -> str:
        per_s = fig["receipts_per_s"]
        return f"{per_s:.0f} /s" if per_s else "did not finish in 120 s"

    def ratio(fig: dict[str, Any], ref: dict[str, Any]) -> str:
        return f"{fig['p50_ms'] / ref['p50_ms']:.2f}x / {fig['p99_ms'] / ref['p99_ms']:.2f}x"

    same, cross = b["round_trip_same_replica"], f["round_trip_cross_replica"]
    sqlite, pg = b["receipts_sqlite"], f["receipts_postgresql"]
    single = b["status_one_replica"]
    workers = single["workers"]
    rows = [
        ("no-op round trip via B, worker on B (baseline)", latency(same), "-", "-"),
        (
            "no-op round trip via A, worker on B (relayed)",
            latency(cross),
            latency(same),
            ratio(cross, same),
        ),
        (
            f"receipts durable/s, SQLite (baseline; {sqlite['receipts']} receipts)",
            rate(sqlite),
            "-",
            "-",
        ),
        (
            f"receipts durable/s, PostgreSQL ({pg['receipts']} receipts)",
            rate(pg),
            rate(sqlite),
            f"{pg['receipts_per_s'] / sqlite['receipts_per_s']:.2f}x"
            if pg["receipts_per_s"] and sqlite["receipts_per_s"]
            else "-",
        ),
        (f"status, {workers} workers on 1 replica (baseline)", latency(single), "-", "-"),
    ]
    for fig in f["status_two_replicas"]:
        held = "+".join(str(v) for v in fig["held"].values())
        rows.append(
            (
                f"status via {fig['asked']}, {workers} workers on 2 replicas ({held})",
                latency(fig),
                latency(single),
                ratio(fig, single),
            )
        )
    header = ("figure", "value", "baseline", "ratio (p50 / p99)")
    lines = table_lines(header, rows)
    s = doc["settings"]
    lines.append(
        f"{s['round_trips']} round trips each (interleaved, after {s['warmup_round_trips']} each);"
        f" ingest {s['ingest_runs']} runs x {s['ingest_actions_per_run']} actions from"
        f" {s['ingest_workers']} simulated workers; {s['status_samples']} status calls each;"
        f" PostgreSQL {doc['machine']['postgresql']}; {s['seconds']:.0f} s in all"
    )
    for label, part in (
        ("round trips", doc["round_trip_checks"]),
        ("ingest on SQLite", sqlite),
        ("ingest on PostgreSQL", pg),
        ("status on 1 replica", single),
        ("status on 2 replicas", f["status_two_replicas"][0]),
    ):
        if note := trouble(part):
            lines.append(f"note, {label}: {note}")
    return "\n".join(lines)


def trouble(part: dict[str, Any]) -> str:
    """What went wrong in the coordinators during a measurement (its figure includes it)."""
    errors = part.get("store_errors", {})
    said = []
    if n := errors.get("lost_worker_message_batches"):
        said.append(f"worker message batches not recorded (nor acknowledged): {n}")
    if n := errors.get("deadlocks"):
        said.append(f"units of work failed on a PostgreSQL deadlock: {n}")
    if n := part.get("extra_attempts"):
        said.append(f"{n} attempts dispatched again (slowest run {part['slowest_run_s']:.1f} s)")
    if n := part.get("deliveries_left"):
        said.append(f"{n} relayed orders never taken")
    return "; ".join(said)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer samples, 200 status workers")
    parser.add_argument("--json", action="store_true", help="print the JSON document, no table")
    parser.add_argument(
        "--workers", type=int, default=0, help="simulated workers for status (2000; quick 200)"
    )
    parser.add_argument("--pg-admin-url", default=PG_ADMIN_URL, help="server to create DBs on")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "replicas.json")
    args = parser.parse_args()
    if args.workers < 0 or args.workers % 2:
        parser.error("--workers must be an even positive number (half streams to each replica)")
    if (problem := postgres_problem(args.pg_admin_url)) is not None:
        print(f"replicas bench: skipped, PostgreSQL does not answer ({problem})")
        return 0
    # SIGTERM unwinds like Ctrl-C, so every child process is stopped and every database dropped.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        doc = run(args)
    except KeyboardInterrupt:
        print("replicas bench: interrupted", file=sys.stderr)
        return 1
    except Exception as exc:
        detail = str(exc).strip().splitlines()
        print(
            f"replicas bench: {type(exc).__name__}: {detail[0] if detail else ''}", file=sys.stderr
        )
        return 1
    write_results(doc, args.out, args.json, table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
