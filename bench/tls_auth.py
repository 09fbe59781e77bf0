"""Authentication cost of transport security: WhoAmI over plaintext, TLS and mutual TLS.

  setup      two coordinators on SQLite in one run: one plaintext, one with `ca init`'s
             certificates (`serve --ca-dir`: TLS on the main port, client certificates required
             on the worker port); a worker enrolled over TLS with a CSR gives the mTLS identity
  figures    per transport, AdminService.WhoAmI (an authenticated unary call):
               warm       p50/p99 of sequential calls on one open channel
               throughput calls/s with T threads sharing one channel for the run's length
               cold       p50/p99 of a new channel per call (TCP, the TLS handshake, the call)
             plaintext and TLS use the admin credential on the main port; mTLS uses the
             worker's credential and certificate on the worker port

Usage: python -m bench.tls_auth [--quick] [--json] [--threads T] [--seconds S]
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc

from bench.stats import summary, table_lines, timed, write_results
from shared.credentials import auth_metadata
from shared.gen.deskfleet.v1 import admin_pb2, admin_pb2_grpc
from tests.harness import BIN, CoordinatorProcess, WorkerProcess, base_env

ROOT = Path(__file__).resolve().parent.parent

Factory = Callable[[], grpc.Channel]


class Target:
    """One transport: how to open a channel to it, and the credential to call with."""

    def __init__(self, name: str, factory: Factory, secret: str) -> None:
        self.name = name
        self.factory = factory
        self.metadata = auth_metadata(secret)

    def call(self, channel: grpc.Channel) -> None:
        admin_pb2_grpc.AdminServiceStub(channel).WhoAmI(
            admin_pb2.WhoAmIRequest(), metadata=self.metadata, timeout=10
        )


def throughput(target: Target, threads: int, seconds: float) -> dict[str, Any]:
    """Calls per second with `threads` callers sharing one channel (HTTP/2 multiplexes)."""
    channel = target.factory()
    try:
        for _ in range(20):
            target.call(channel)
        counts = [0] * threads
        stop = time.perf_counter() + seconds

        def loop(index: int) -> None:
            while time.perf_counter() < stop:
                target.call(channel)
                counts[index] += 1

        workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
        started = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed = time.perf_counter() - started
    finally:
        channel.close()
    return {"calls": sum(counts), "seconds": elapsed, "rps": sum(counts) / elapsed}


def cold(target: Target, n: int) -> dict[str, Any]:
    """A new channel per call: connection set-up (and the handshake) is part of each sample."""
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        channel = target.factory()
        try:
            target.call(channel)
        finally:
            channel.close()
        samples.append((time.perf_counter() - start) * 1000)
    return summary(samples)


def measure(target: Target, args: argparse.Namespace, n: int) -> dict[str, Any]:
    channel = target.factory()
    try:
        warm = timed(lambda: target.call(channel), n, warmup=50)
    finally:
        channel.close()
    return {
        "warm": warm,
        "throughput": throughput(target, args.threads, args.seconds),
        "cold": cold(target, max(20, n // 10)),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    n = 300 if args.quick else 2000
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="deskfleet-bench-") as tmp:
        ca_dir = Path(tmp) / "ca"
        subprocess.run(
            [str(BIN / "deskfleet-coordinator"), "ca", "init", "--dir", str(ca_dir)],
            check=True,
            capture_output=True,
            env=base_env(Path(tmp)),
            timeout=60,
        )
        ca = (ca_dir / "ca.pem").read_bytes()
        plain = CoordinatorProcess(Path(tmp) / "plain", heartbeat=5.0, lease=15.0, sweep=60.0)
        secure = CoordinatorProcess(
            Path(tmp) / "tls",
            heartbeat=5.0,
            lease=15.0,
            sweep=60.0,
            serve_args=("--ca-dir", str(ca_dir)),
            ca_file=ca_dir / "ca.pem",
        )
        try:
            plain.start()
            secure.start()
            worker = WorkerProcess(secure, "bench-mtls")
            done = worker.enroll()
            if done.returncode != 0:
                raise RuntimeError(f"enrollment over TLS failed: {done.stderr.strip()}")
            state = worker.state_dir
            key, cert = (state / "client.key").read_bytes(), (state / "client.pem").read_bytes()
            admin = plain.admin_token_file.read_text().strip()
            targets = [
                Target(
                    "plaintext",
                    lambda: grpc.insecure_channel(plain.address),
                    admin,
                ),
                Target(
                    "tls",
                    lambda: grpc.secure_channel(secure.address, grpc.ssl_channel_credentials(ca)),
                    secure.admin_token_file.read_text().strip(),
                ),
                Target(
                    "mtls",
                    lambda: grpc.secure_channel(
                        f"127.0.0.1:{secure.worker_port}",
                        grpc.ssl_channel_credentials(ca, key, cert),
                    ),
                    (state / "credential").read_text().strip(),
                ),
            ]
            for target in targets:
                results[target.name] = measure(target, args, n)
        finally:
            secure.stop()
            plain.stop()
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "grpcio": grpc.__version__,
            "load_average": os.getloadavg(),
        },
        "settings": {
            "quick": args.quick,
            "warm_calls": n,
            "cold_calls": max(20, n // 10),
            "threads": args.threads,
            "throughput_seconds": args.seconds,
            "store": "sqlite",
            "key": "ECDSA P-256",
        },
        "figures": results,
    }


def table(doc: dict[str, Any]) -> str:
    f = doc["figures"]
    base = f["plaintext"]

    def row(name: str) -> tuple[str, ...]:
        fig = f[name]
        return (
            name,
            f"{fig['throughput']['rps']:.0f}",
            f"{fig['throughput']['rps'] / base['throughput']['rps']:.2f}x",
            f"p50 {fig['warm']['p50_ms']:.2f} / p99 {fig['warm']['p99_ms']:.2f} ms",
            f"p50 {fig['cold']['p50_ms']:.2f} / p99 {fig['cold']['p99_ms']:.2f} ms",
        )

    header = ("transport", "WhoAmI/s", "vs plain", "warm channel", "new channel per call")
    rows = [row(name) for name in ("plaintext", "tls", "mtls")]
    lines = table_lines(header, rows)
    s = doc["settings"]
    lines.append(
        f"{s['warm_calls']} warm calls, {s['cold_calls']} cold, throughput with"
        f" {s['threads']} threads for {s['throughput_seconds']:g} s;"
        f" load average {doc['machine']['load_average'][0]:.1f} on"
        f" {doc['machine']['cpu_count']} CPUs"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="300 warm calls instead of 2000")
    parser.add_argument("--json", action="store_true", help="print the JSON document, no table")
    parser.add_argument("--threads", type=int, default=8, help="callers for throughput (8)")
    parser.add_argument("--seconds", type=float, default=0.0, help="throughput run (5; quick 2)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "tls_auth.json")
    args = parser.parse_args()
    if args.threads < 1 or args.seconds < 0:
        parser.error("--threads must be at least 1 and --seconds not negative")
    args.seconds = args.seconds or (2.0 if args.quick else 5.0)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        doc = run(args)
    except KeyboardInterrupt:
        print("tls auth bench: interrupted", file=sys.stderr)
        return 1
    except (RuntimeError, TimeoutError, grpc.RpcError, OSError, subprocess.SubprocessError) as exc:
        detail = str(exc).strip().splitlines()
        print(
            f"tls auth bench: {type(exc).__name__}: {detail[0] if detail else ''}",
            file=sys.stderr,
        )
        return 1
    write_results(doc, args.out, args.json, table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
