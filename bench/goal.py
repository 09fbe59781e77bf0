"""Goal-loop benchmarks on a 50-step scripted goal (the scripted provider stands in for a model,
which cannot be reached here), each beside its baseline measured in the same run.

  tokens per step   estimated input tokens the model is sent per step, with the context
                    manager's archiving (default budget) beside the same goal with a budget
                    so large that nothing is archived
  overhead          coordinator time per model step, excluding the model: from one
                    goal.model_call journal event to the next (the scripted model answers at
                    once), so it holds the tool call, the journal writes and the context
                    fitting; baseline: one unary RPC round trip (WhoAmI)

Every step recalls a different page (up to 16,384 characters) of the 20,000-character request,
so without archiving the conversation grows by about 3,000 tokens a step.

Usage: python -m bench.goal [--quick] [--out bench/results/goal.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.stats import summary
from tests.harness import STOPPED, CoordinatorProcess, journal, wait_run

ROOT = Path(__file__).resolve().parent.parent


def _goal(coordinator: CoordinatorProcess, work: Path, steps: int) -> list[dict[str, Any]]:
    calls = [
        {"tool_calls": [{"name": "recall", "arguments": {"seq": 2, "offset": (i * 997) % 16000}}]}
        for i in range(steps - 1)
    ]
    model = coordinator.script("bench.json", [*calls, {"text": "done", "tool_calls": []}])
    text = "".join(f"fact {i}: the north light burns {i} hours. " for i in range(520))[:20_000]
    run = coordinator.cli_json("goal", text, "--model", model, "--max-steps", str(steps + 5))
    done = wait_run(coordinator, run["id"], lambda r: r["status"] in STOPPED, 600)
    if done["status"] != "SUCCEEDED":
        raise SystemExit(f"the goal did not succeed: {done['stopReason']}")
    events: list[dict[str, Any]] = journal(coordinator, run["id"])
    return events


def _per_step(events: list[dict[str, Any]]) -> tuple[list[int], list[float]]:
    calls = [e for e in events if e["kind"] == "goal.model_call"]
    tokens = [int(e["data"]["usage"]["input"]) for e in calls]
    times = [_seconds(e["at"]) for e in calls]
    gaps = [(b - a) * 1000 for a, b in itertools.pairwise(times)]
    return tokens, gaps


def _seconds(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="20 steps instead of 50")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "goal.json"))
    args = parser.parse_args()
    steps = 20 if args.quick else 50
    results: dict[str, Any] = {"steps": steps}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, extra in (
            ("archiving", ()),
            ("no_archiving", ("--goal-context-budget", str(10**9))),
        ):
            coordinator = CoordinatorProcess(work / name, serve_args=extra).start()
            try:
                if name == "archiving":
                    results["whoami"] = _whoami(coordinator)
                tokens, gaps = _per_step(_goal(coordinator, work, steps))
                results[name] = {
                    "tokens_per_step_mean": sum(tokens) / len(tokens),
                    "tokens_last_step": tokens[-1],
                    "tokens_max": max(tokens),
                    "overhead": summary(gaps),
                }
            finally:
                coordinator.stop()
    a, n, w = results["archiving"], results["no_archiving"], results["whoami"]
    rows = [
        ("tokens per step, mean (archiving)", f"{a['tokens_per_step_mean']:.0f}", "-"),
        ("tokens per step, mean (no archiving)", f"{n['tokens_per_step_mean']:.0f}", "-"),
        (
            "tokens at the last step, archiving / not",
            f"{a['tokens_last_step']} / {n['tokens_last_step']}",
            f"{a['tokens_last_step'] / n['tokens_last_step']:.2f}x",
        ),
        (
            "coordinator per step p50/p99 (archiving)",
            f"{a['overhead']['p50_ms']:.1f} / {a['overhead']['p99_ms']:.1f} ms",
            f"WhoAmI {w['p50_ms']:.2f} / {w['p99_ms']:.2f} ms",
        ),
        (
            "coordinator per step p50/p99 (no archiving)",
            f"{n['overhead']['p50_ms']:.1f} / {n['overhead']['p99_ms']:.1f} ms",
            f"WhoAmI {w['p50_ms']:.2f} / {w['p99_ms']:.2f} ms",
        ),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{steps}-step scripted goal (a recall of up to 16,384 characters each step)")
    for label, value, base in rows:
        print(f"{label.ljust(width)} | {value:<24} | {base}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"\nwritten to {args.out}")


def _whoami(coordinator: CoordinatorProcess) -> dict[str, Any]:
    import grpc

    from shared.credentials import auth_metadata
    from shared.gen.deskfleet.v1 import admin_pb2, admin_pb2_grpc

    token = coordinator.admin_token_file.read_text().strip()
    with grpc.insecure_channel(coordinator.address) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        meta = auth_metadata(token)
        samples = []
        for i in range(220):
            t = time.perf_counter()
            stub.WhoAmI(admin_pb2.WhoAmIRequest(), metadata=meta, timeout=10)
            if i >= 20:
                samples.append((time.perf_counter() - t) * 1000)
    return summary(samples)


if __name__ == "__main__":
    main()
