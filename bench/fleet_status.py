"""Fleet scale: how many simulated workers one coordinator process holds, and what it costs.

Run from the repository root:
    .venv/bin/python -m bench.fleet_status [--quick] [--workers 1000,5000,10000] [--json]

One coordinator (SQLite, the default heartbeat and lease) gets K simulated workers, each with
its own TCP connection and stream speaking the real WorkerGateway protocol from simulator
processes apart from it (bench/simulated_workers.py, started in waves). A stream that drops
is opened again after the worker's backoff, as a real worker would. K grows step by step
through the list; at each step, once the status shows all K online (or after a minute of
trying, when the coordinator cannot hold them all):

  online     the workers the status counts online after the hold
  CPU        the coordinator's CPU time over a hold of H seconds with only heartbeats, as %
             of one core (psutil on its pid: user + system)
  RSS        the coordinator's resident memory after the hold
  status     GetWorkerStatus p50/p99 (the fleet's counts and the first page of 100 workers,
             with all K online) from one client: up to 50 calls, fewer when they take more
             than 45 s in all (at least 3)

The status figures stand beside a gRPC health Check round trip to the same coordinator over
the same channel, measured with the same K connected.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench import machine
from bench.simulated_workers import SimulatedFleet
from bench.stats import table_lines, timed, timed_within, write_results
from shared.credentials import auth_metadata
from shared.gen.deskfleet.v1 import fleet_pb2, fleet_pb2_grpc
from tests.harness import CoordinatorProcess

ROOT = Path(__file__).resolve().parent.parent

HEARTBEAT, LEASE = 5.0, 15.0  # the coordinator's defaults
FULL_WORKERS = (1000, 5000, 10000)
QUICK_WORKERS = (400,)


class Client:
    """Sync gRPC client to the coordinator: health Check and admin GetWorkerStatus."""

    def __init__(self, coordinator: CoordinatorProcess) -> None:
        self.channel = grpc.insecure_channel(
            coordinator.address, options=[("grpc.max_receive_message_length", 256 * 2**20)]
        )
        grpc.channel_ready_future(self.channel).result(timeout=10)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.fleet = fleet_pb2_grpc.FleetServiceStub(self.channel)
        self.metadata = auth_metadata(coordinator.admin_token_file.read_text().strip())

    def check(self) -> None:
        self.health.Check(health_pb2.HealthCheckRequest(), timeout=10)

    def status(self) -> fleet_pb2.WorkerStatus:
        reply: fleet_pb2.WorkerStatus = self.fleet.GetWorkerStatus(
            fleet_pb2.GetWorkerStatusRequest(), metadata=self.metadata, timeout=60
        )
        return reply

    def wait_headless(self, want: Callable[[int], bool], timeout: float, what: str) -> int:
        deadline = time.monotonic() + timeout
        while not want(n := self.status().headless_online):
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what} (at {n})")
            time.sleep(0.5)
        return n


def hold(process: psutil.Process, seconds: float) -> dict[str, float]:
    """CPU (% of one core) and RSS of `process` over `seconds` in which nothing is asked of it."""
    before, started = process.cpu_times(), time.perf_counter()
    time.sleep(seconds)
    after, elapsed = process.cpu_times(), time.perf_counter() - started
    used = (after.user - before.user) + (after.system - before.system)
    return {
        "cpu_percent_of_one_core": 100 * used / elapsed,
        "hold_s": elapsed,
        "rss_mib": process.memory_info().rss / 2**20,
    }


def step(
    client: Client, fleet: SimulatedFleet, process: psutil.Process, k: int, quick: bool
) -> dict[str, Any]:
    """Grow the fleet to K, then measure while it holds."""
    grow_s = fleet.grow(k, timeout=300)
    ready = time.perf_counter()
    with contextlib.suppress(TimeoutError):  # then the figure says how many it holds
        client.wait_headless(lambda n: n >= k, 60, f"{k} workers online")
    settled = time.perf_counter() - ready
    held = hold(process, 3.0 if quick else 10.0)
    # Each reply carries all K rows, seconds apiece at 10k on two cores: this first call is the
    # warm-up, and the samples are taken within a time budget.
    online = client.status().headless_online
    status = timed_within(client.status, 30 if quick else 50, 10 if quick else 45, warmup=0)
    health = timed(client.check, 100 if quick else 200, warmup=10)
    fleet.check()
    return {
        "k": k,
        "headless_online": online,
        "rows_in_reply": len(client.status().workers),
        "grow_s": grow_s,
        "online_after_ready_s": settled,
        "simulator_processes": len(fleet.sims),
        **held,
        "status": status,
        "health": health,
    }


def run(workers: list[int], quick: bool) -> dict[str, Any]:
    """One coordinator, the fleet grown through `workers` (ascending). A step that fails ends
    the run, but the steps before it are kept (`failed` says which and why)."""
    steps: list[dict[str, Any]] = []
    failed: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="deskfleet-bench-") as tmp:
        coordinator = CoordinatorProcess(
            Path(tmp) / "coord", heartbeat=HEARTBEAT, lease=LEASE, sweep=60.0
        )
        fleet: SimulatedFleet | None = None
        client: Client | None = None
        try:
            coordinator.start()
            assert coordinator.proc is not None
            process = psutil.Process(coordinator.proc.pid)
            client = Client(coordinator)
            fleet = SimulatedFleet(
                coordinator.address,
                coordinator.admin_token_file,
                Path(tmp) / "sims",
                reconnect=True,
            )
            idle = hold(process, 1.0 if quick else 5.0)
            for k in sorted(workers):
                try:
                    steps.append(step(client, fleet, process, k, quick))
                except (RuntimeError, TimeoutError, grpc.RpcError) as exc:
                    detail = str(exc).strip().splitlines()
                    error = f"{type(exc).__name__}: {detail[0] if detail else ''}"
                    failed = {"k": k, "error": error}
                    break
        finally:
            if fleet is not None:
                fleet.stop()
            if client is not None:
                client.channel.close()
            coordinator.stop()
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "machine": machine.describe(),
        "settings": {
            "quick": quick,
            "heartbeat_s": HEARTBEAT,
            "lease_s": LEASE,
            "store": "sqlite",
            "workers": sorted(workers),
            "simulator_process_size": SimulatedFleet.SIZE,
        },
        "idle": idle,
        "steps": steps,
        "failed": failed,
    }


def table(doc: dict[str, Any]) -> str:
    rows = [
        (
            "no workers",
            "-",
            f"{doc['idle']['cpu_percent_of_one_core']:.1f} %",
            f"{doc['idle']['rss_mib']:.0f} MiB",
            "-",
            "-",
        )
    ]
    for s in doc["steps"]:
        st, hc = s["status"], s["health"]
        rows.append(
            (
                f"K={s['k']}",
                str(s["headless_online"]),
                f"{s['cpu_percent_of_one_core']:.1f} %",
                f"{s['rss_mib']:.0f} MiB",
                f"p50 {st['p50_ms']:.1f} / p99 {st['p99_ms']:.1f} ms",
                f"p50 {hc['p50_ms']:.2f} / p99 {hc['p99_ms']:.2f} ms",
            )
        )
    header = ("fleet", "online", "CPU (1 core)", "RSS", "GetWorkerStatus", "health Check")
    lines = table_lines(header, rows)
    if doc["failed"]:
        lines.append(f"K={doc['failed']['k']} failed: {doc['failed']['error']}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help=f"K={QUICK_WORKERS[0]} only")
    parser.add_argument("--workers", default="", help="K values, comma-separated")
    parser.add_argument("--json", action="store_true", help="print the JSON document, no table")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/fleet_status.json")
    args = parser.parse_args()
    try:
        ks = [int(k) for k in args.workers.split(",") if k.strip()]
        if min(ks, default=1) < 1:
            raise ValueError
    except ValueError:
        parser.error("--workers: comma-separated positive integers, e.g. 1000,5000")
    ks = ks or list(QUICK_WORKERS if args.quick else FULL_WORKERS)
    # SIGTERM unwinds like Ctrl-C, so the finally blocks stop every child process.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        doc = run(ks, args.quick)
    except KeyboardInterrupt:
        print("fleet_status: interrupted", file=sys.stderr)
        return 1
    except Exception as exc:
        detail = str(exc).strip().splitlines()
        print(f"fleet_status: {type(exc).__name__}: {detail[0] if detail else ''}", file=sys.stderr)
        return 1
    write_results(doc, args.out, args.json, table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
