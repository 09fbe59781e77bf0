"""Latency statistics shared by the benchmarks: percentiles and timed call loops."""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def percentile(samples: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(samples_ms: list[float]) -> dict[str, Any]:
    return {
        "n": len(samples_ms),
        "p50_ms": percentile(samples_ms, 50),
        "p99_ms": percentile(samples_ms, 99),
        "mean_ms": statistics.fmean(samples_ms),
        "max_ms": max(samples_ms),
    }


def timed(call: Callable[[], Any], n: int, warmup: int) -> dict[str, Any]:
    """p50/p99 in ms of n sequential calls; warm-up calls (not counted) settle the connection."""
    return timed_within(call, n, math.inf, warmup)


def timed_within(
    call: Callable[[], Any], n: int, seconds: float, warmup: int, least: int = 3
) -> dict[str, Any]:
    """As `timed`, but stops after `seconds` once `least` samples are in: for calls that take
    seconds each at scale. `n` in the result says how many were taken."""
    for _ in range(warmup):
        call()
    samples: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(samples) < n and (len(samples) < least or time.perf_counter() < deadline):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    return summary(samples)


def table_lines(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """An aligned text table: the header, a rule, then the rows."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    ]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return lines


def write_results(doc: dict[str, Any], out: Path, as_json: bool, table: str) -> None:
    """Keep the figures in `out`; print them as JSON or as the table for people."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        print(table)
        print(f"\nwritten to {out}")
