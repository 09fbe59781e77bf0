"""Where the 40-run shape spends its CPU: py-spy samples of the coordinator and one worker.

  shape     R runs of N diag.echo actions submitted at once on 2 real workers, awaited with
            WaitRun (bench/many_runs.py's shape); optionally while a client polls GetRun for
            every run each 250 ms
  output    per process: CPU milliseconds per action, the largest costs by function (self
            time, the frame the sample was in) and by layer (the outermost project, SQLAlchemy,
            gRPC, protobuf, asyncio or JSON frame on the stack), and the raw samples
            (collapsed stacks) for a flame graph

py-spy samples without stopping the process (--nonblocking), so the profile costs the shape
little; it is installed on demand (`pip install py-spy`), and this is not in `make bench`.

Usage: python -m bench.profile_hot_path [--runs 40] [--actions 50] [--poll] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.many_runs import POLL_EVERY, echoes, fleet, submit_and_wait

ROOT = Path(__file__).resolve().parent.parent
RATE = 250  # samples a second

# Which layer a stack belongs to: the first of these found walking from the leaf outwards.
LAYERS = (
    ("json/hashing", ("json/", "hashlib", "shared/receipts.py", "shared/journal_chain.py")),
    ("sqlalchemy", ("sqlalchemy/",)),
    ("protobuf", ("google/protobuf",)),
    ("grpc", ("grpc/", "grpc_")),
    ("coordinator", ("coordinator/",)),
    ("worker_agent", ("worker_agent/",)),
    ("shared", ("shared/",)),
    ("asyncio", ("asyncio/",)),
)


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise SystemExit("profile_hot_path: py-spy is not installed (pip install py-spy)")
    return found


def start_sampling(pid: int, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            py_spy(),
            "record",
            "--pid",
            str(pid),
            "--rate",
            str(RATE),
            "--nonblocking",
            "--threads",
            "--format",
            "raw",
            "--output",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop_sampling(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)  # py-spy writes what it sampled, then exits
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def frames(stack: str) -> list[str]:
    """Frames of one collapsed stack, outermost first, without the thread's own label."""
    parts = stack.split(";")
    return [p for p in parts if not p.startswith("thread (") and not p.startswith("process ")]


def layer_of(fs: list[str]) -> str:
    for frame in reversed(fs):
        for name, marks in LAYERS:
            if any(m in frame for m in marks):
                return name
    return "other"


def summarise(raw: Path, actions: int, top: int) -> dict[str, Any]:
    self_samples: collections.Counter[str] = collections.Counter()
    layers: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        fs = frames(stack)
        thread = next((p for p in stack.split(";") if p.startswith("thread (")), "thread")
        threads[thread.split('"')[1] if '"' in thread else thread] += n
        if fs:
            self_samples[fs[-1]] += n
        layers[layer_of(fs)] += n
    ms_per_sample = 1000.0 / RATE
    per_action = (lambda n: round(n * ms_per_sample / actions, 3)) if actions else (lambda n: 0.0)
    return {
        "samples": total,
        "cpu_ms_per_action": per_action(total),
        "by_layer_ms_per_action": {k: per_action(v) for k, v in layers.most_common()},
        "by_thread_ms_per_action": {k: per_action(v) for k, v in threads.most_common(6)},
        "top_self_ms_per_action": [
            {"frame": k, "ms": per_action(v)} for k, v in self_samples.most_common(top)
        ],
    }


async def shape(address: str, token: str, runs: int, per_run: int, poll: bool) -> float:
    _, seconds, _ = await submit_and_wait(
        address, token, [echoes(per_run)] * runs, poll_every=POLL_EVERY if poll else 0.0
    )
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--actions", type=int, default=50)
    parser.add_argument("--poll", action="store_true", help="poll GetRun each 250 ms meanwhile")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "profile")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    actions = args.runs * args.actions
    with fleet() as (coordinator, workers, token):
        assert coordinator.proc is not None and workers[0].proc is not None
        targets = {"coordinator": coordinator.proc.pid, "worker": workers[0].proc.pid}
        samplers = {
            name: start_sampling(pid, args.out / f"{name}.raw") for name, pid in targets.items()
        }
        time.sleep(1.0)  # py-spy attached
        seconds = asyncio.run(shape(coordinator.address, token, args.runs, args.actions, args.poll))
        for proc in samplers.values():
            stop_sampling(proc)
    doc: dict[str, Any] = {
        "runs": args.runs,
        "actions_per_run": args.actions,
        "polling_get_run": args.poll,
        "seconds": round(seconds, 3),
        "actions_per_s": round(actions / seconds, 1),
        "rate_hz": RATE,
        "commit": os.popen("git rev-parse --short HEAD").read().strip(),
    }
    for name in targets:
        # One worker of two was sampled: it ran about half of the actions.
        share = actions if name == "coordinator" else actions / 2
        doc[name] = summarise(args.out / f"{name}.raw", int(share), args.top)
    (args.out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
