"""What a worker start costs, with a browser and without one (`run --no-headless`).

  setup      one coordinator on SQLite; workers enrolled beforehand, so only `run` is timed
  figures    per mode, over N starts (the modes alternate, so both see the same machine):
               online     wall time from the process start to online in the coordinator
               cpu        CPU seconds the worker and everything it started had used by then
                          (/proc: its own, its reaped children's, and its live descendants')
             `browser` is the default worker (its probe launches Chromium at connect);
             `no-headless` never imports Playwright nor starts Chromium

Usage: python -m bench.worker_start [--starts N] [--json]
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.machine import describe
from bench.stats import table_lines, write_results
from tests.harness import CoordinatorProcess, WorkerProcess, wait_until

ROOT = Path(__file__).resolve().parent.parent
MODES = {"browser": True, "no-headless": False}
TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()  # fields from the state on (index 0)


def tree_cpu(pid: int) -> float:
    """CPU seconds of `pid`, its reaped children and its live descendants."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None:
            parents[int(entry)] = int(fields[1])
    total, frontier = 0.0, [pid]
    while frontier:
        current = frontier.pop()
        fields = _stat(current)
        if fields is not None:  # utime, stime, cutime, cstime
            total += sum(int(v) for v in fields[11:15]) / TICK
        frontier += [child for child, parent in parents.items() if parent == current]
    return total


def start_once(worker: WorkerProcess) -> tuple[float, float]:
    """(seconds to online, CPU seconds by then) of one `run`."""
    began = time.perf_counter()
    worker.start()
    assert worker.proc is not None
    pid = worker.proc.pid

    def online() -> bool:
        if worker.proc is not None and worker.proc.poll() is not None:
            raise RuntimeError(f"worker {worker.name} exited (log {worker.log})")
        row = worker.row()
        return bool(row and row["online"])

    wait_until(online, 120, 0.02, f"worker {worker.name} online")
    elapsed = time.perf_counter() - began
    cpu = tree_cpu(pid)
    worker.stop()
    wait_until(lambda: not (worker.row() or {}).get("online"), 60, 0.05, "worker offline")
    return elapsed, cpu


def run(args: argparse.Namespace) -> dict[str, Any]:
    samples: dict[str, dict[str, list[float]]] = {m: {"online": [], "cpu": []} for m in MODES}
    with tempfile.TemporaryDirectory(prefix="bench-worker-start-") as tmp:
        coordinator = CoordinatorProcess(Path(tmp) / "coord").start()
        try:
            workers = {
                mode: WorkerProcess(coordinator, mode, browser=browser)
                for mode, browser in MODES.items()
            }
            for worker in workers.values():
                assert worker.enroll().returncode == 0
            for _ in range(args.starts):
                for mode, worker in workers.items():
                    elapsed, cpu = start_once(worker)
                    samples[mode]["online"].append(elapsed)
                    samples[mode]["cpu"].append(cpu)
        finally:
            coordinator.stop()
    figures = {
        mode: {
            name: {"median_s": statistics.median(v), "mean_s": statistics.fmean(v), "n": len(v)}
            for name, v in by_name.items()
        }
        for mode, by_name in samples.items()
    }
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, "-m", "bench.worker_start", *sys.argv[1:]]),
        "machine": {**describe(), "load_average": os.getloadavg()},
        "settings": {"starts": args.starts, "baseline": "browser"},
        "figures": figures,
        "samples": samples,
    }


def table(doc: dict[str, Any]) -> str:
    f = doc["figures"]
    base = f["browser"]
    rows = [
        (
            mode,
            f"{fig['online']['median_s']:.2f} s",
            f"{fig['online']['median_s'] / base['online']['median_s']:.2f}x",
            f"{fig['cpu']['median_s']:.2f} s",
            f"{fig['cpu']['median_s'] / base['cpu']['median_s']:.2f}x",
        )
        for mode, fig in f.items()
    ]
    lines = table_lines(("worker", "to online (median)", "vs browser", "CPU (median)", ""), rows)
    lines.append(
        f"{doc['settings']['starts']} starts each, alternating; load average"
        f" {doc['machine']['load_average'][0]:.1f} on {os.cpu_count()} CPUs"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--starts", type=int, default=5, help="starts per mode (5)")
    parser.add_argument("--json", action="store_true", help="print the JSON document, no table")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / "worker_start.json"
    )
    args = parser.parse_args()
    if args.starts < 1:
        parser.error("--starts must be at least 1")
    try:
        doc = run(args)
    except (RuntimeError, TimeoutError, OSError) as exc:
        print(f"worker start bench: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    write_results(doc, args.out, args.json, table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
