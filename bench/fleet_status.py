"""Fleet status benchmark against a real coordinator, with a same-run baseline.

Run from the repository root:
    .venv/bin/python bench/fleet_status.py [--quick] [--workers 1,100] [--out PATH]

Figures: time from `deskfleet-worker run` to online in status, and GetWorkerStatus latency
with K simulated connected workers (bench/simulated_workers.py, a separate process). The
baseline is a gRPC health Check round trip to the same coordinator over the same channel.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

from bench.simulated_workers import SimulatorProcess  # noqa: E402
from bench.stats import table_lines, timed  # noqa: E402
from shared.credentials import auth_metadata  # noqa: E402
from shared.gen.deskfleet.v1 import fleet_pb2, fleet_pb2_grpc  # noqa: E402
from tests.harness import CoordinatorProcess, WorkerProcess, tail  # noqa: E402

HEARTBEAT, LEASE = 1.0, 5.0
POLL = 0.020  # status poll interval while waiting for a worker to come online


class Client:
    """Sync gRPC client to the coordinator: health Check and admin GetWorkerStatus."""

    def __init__(self, coordinator: CoordinatorProcess) -> None:
        self.channel = grpc.insecure_channel(coordinator.address)
        grpc.channel_ready_future(self.channel).result(timeout=10)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.fleet = fleet_pb2_grpc.FleetServiceStub(self.channel)
        self.metadata = auth_metadata(coordinator.admin_token_file.read_text().strip())

    def check(self) -> None:
        self.health.Check(health_pb2.HealthCheckRequest(), timeout=10)

    def status(self) -> fleet_pb2.WorkerStatus:
        reply: fleet_pb2.WorkerStatus = self.fleet.GetWorkerStatus(
            fleet_pb2.GetWorkerStatusRequest(), metadata=self.metadata, timeout=10
        )
        return reply

    def wait_headless(self, want: Callable[[int], bool], timeout: float, what: str) -> int:
        deadline = time.monotonic() + timeout
        while not want(n := self.status().headless_online):
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what} (at {n})")
            time.sleep(0.1)
        return n


def worker_to_online(
    coordinator: CoordinatorProcess, client: Client, name: str
) -> tuple[float, str]:
    """Seconds from `deskfleet-worker run` (already enrolled) to online, and its headless probe."""
    worker = WorkerProcess(coordinator, name)
    try:
        done = worker.enroll(coordinator.create_token())
        if done.returncode != 0:
            raise RuntimeError(f"enrolling {name} failed: {done.stderr.strip()}")
        start = time.perf_counter()
        proc = worker.start().proc
        assert proc is not None
        while True:
            row = next((w for w in client.status().workers if w.id == worker.worker_id), None)
            if row is not None and row.online:
                elapsed = time.perf_counter() - start
                # Says whether the Chromium launch really happened, or why it failed.
                headless = next(c for c in row.capabilities if c.name == "headless")
                return elapsed, "available" if headless.available else headless.reason
            if proc.poll() is not None:
                raise RuntimeError(f"worker {name} exited: {tail(worker.log, 1)}")
            if time.perf_counter() > start + 60:
                raise TimeoutError(f"worker {name} not online after 60 s")
            time.sleep(POLL)
    finally:
        worker.stop()


def status_with_k(
    coordinator: CoordinatorProcess, client: Client, k: int, n: int, workdir: Path
) -> dict[str, Any]:
    """GetWorkerStatus latency while K simulated workers hold streams and heartbeat."""
    # Exact counts need an empty fleet first (previous simulators are stopped by now).
    client.wait_headless(lambda c: c == 0, LEASE + 10, "headlessOnline to drop to 0")
    sim = SimulatorProcess(
        coordinator.address, coordinator.admin_token_file, k, workdir / f"simulator-{k}.log"
    )
    try:
        spawned = time.perf_counter()
        timings = sim.wait_ready(timeout=180)
        ready = time.perf_counter()
        seen = client.wait_headless(lambda c: c >= k, 30, f"headlessOnline >= {k}")
        online = time.perf_counter()
        result = timed(client.status, n, warmup=5)
        result.update(
            k=k,
            headless_online=seen,
            rows_in_reply=len(client.status().workers),
            spawn_to_ready_s=ready - spawned,
            ready_to_online_s=online - ready,
            enroll_s=timings.get("enroll"),
            connect_s=timings.get("connect"),
        )
        if sim.proc.poll() is not None:
            raise RuntimeError(f"simulator (K={k}) died during the measurement")
        return result
    finally:
        sim.stop()


def table(doc: dict[str, Any]) -> str:
    """figure | value | baseline | ratio, latency rows compared like for like."""
    base = doc["baseline"]
    rows = [
        ("health Check p50 (baseline)", f"{base['p50_ms']:.3f} ms", "-", "-"),
        ("health Check p99 (baseline)", f"{base['p99_ms']:.3f} ms", "-", "-"),
    ]
    start = doc["figures"]["worker_run_to_online"]
    each = ", ".join(f"{v:.2f}" for v in start["values_s"])
    odd = [h for h in start["headless"] if h != "available"]  # Chromium did not launch
    rows.append(
        (
            f"worker run -> online, median of {len(start['values_s'])}",
            f"{start['median_s']:.2f} s ({each})" + (f" [headless: {odd[0]}]" if odd else ""),
            "-",
            "-",
        )
    )
    for fig in doc["figures"]["status_latency"]:
        for stat in ("p50", "p99"):
            value, ref = fig[f"{stat}_ms"], base[f"{stat}_ms"]
            rows.append(
                (
                    f"GetWorkerStatus {stat}, K={fig['k']}",
                    f"{value:.3f} ms",
                    f"{ref:.3f} ms",
                    f"{value / ref:.1f}x",
                )
            )
        rows.append(
            (
                f"simulator K={fig['k']}: enroll / connect",
                f"{fig['enroll_s']:.2f} s / {fig['connect_s']:.2f} s",
                "-",
                "-",
            )
        )
    header = ("figure", "value", "baseline", "ratio")
    lines = table_lines(header, rows)
    return "\n".join(lines)


def run(args: argparse.Namespace, ks: list[int]) -> dict[str, Any]:
    n_health, n_status, reps = (100, 50, 1) if args.quick else (300, 200, 3)
    with tempfile.TemporaryDirectory(prefix="deskfleet-bench-") as tmp:
        coordinator = CoordinatorProcess(Path(tmp) / "coord", heartbeat=HEARTBEAT, lease=LEASE)
        client: Client | None = None
        try:
            coordinator.start()
            client = Client(coordinator)
            baseline = timed(client.check, n_health, warmup=20)
            starts = [worker_to_online(coordinator, client, f"bench-{i}") for i in range(reps)]
            figures = [status_with_k(coordinator, client, k, n_status, Path(tmp)) for k in ks]
        finally:
            if client is not None:
                client.channel.close()
            coordinator.stop()
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "machine": {
            "platform": platform.platform(),
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "grpcio": grpc.__version__,
        },
        "settings": {
            "quick": args.quick,
            "heartbeat_s": HEARTBEAT,
            "lease_s": LEASE,
            "store": "sqlite",
            "status_poll_s": POLL,
            "workers": ks,
        },
        "baseline": {"what": "grpc.health.v1.Health/Check, sync client, same channel", **baseline},
        "figures": {
            "worker_run_to_online": {
                "note": "includes the worker measuring its capabilities (one Chromium launch)",
                "median_s": statistics.median(s for s, _ in starts),
                "values_s": [s for s, _ in starts],
                "headless": [h for _, h in starts],
            },
            "status_latency": figures,
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description="Fleet status benchmark.")
    parser.add_argument("--quick", action="store_true", help="fewer samples and repetitions")
    parser.add_argument("--workers", default="1,100", help="K values, comma-separated")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/fleet_status.json")
    args = parser.parse_args()
    try:
        ks = [int(k) for k in args.workers.split(",") if k.strip()]
        if not ks or min(ks) < 1:
            raise ValueError
    except ValueError:
        parser.error("--workers: comma-separated positive integers, e.g. 1,100")
    # SIGTERM unwinds like Ctrl-C, so the finally blocks stop every child process.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        doc = run(args, ks)
    except KeyboardInterrupt:
        print("fleet_status: interrupted", file=sys.stderr)
        return 1
    except Exception as exc:
        detail = str(exc).strip().splitlines()
        print(f"fleet_status: {type(exc).__name__}: {detail[0] if detail else ''}", file=sys.stderr)
        return 1
    print(table(doc))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
