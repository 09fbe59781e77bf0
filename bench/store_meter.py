"""The coordinator's store writer, read from its /metrics (`deskfleet_store_*`), so that a
benchmark can say what the writer spent on each unit of its work."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from tests.harness import CoordinatorProcess

METRICS_ARGS = ("--metrics-listen", "127.0.0.1:0")

Meter = Callable[[], dict[str, float]]


def store_meter(metrics_port: int) -> Meter:
    """The coordinator's store writer so far, from its /metrics: transactions, seconds busy in
    units and in commits, CPU seconds."""

    def read() -> dict[str, float]:
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as reply:
            text = reply.read().decode()
        found: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.labels.get("access") != "write":
                    continue
                if sample.name == "deskfleet_store_transactions_total":
                    found["transactions"] = sample.value
                elif sample.name == "deskfleet_store_busy_seconds_total":
                    found[sample.labels["phase"]] = sample.value
                elif sample.name == "deskfleet_store_cpu_seconds_total":
                    found["cpu"] = sample.value
        return found

    return read


def metered(
    meter: Meter | None, work: Callable[[], dict[str, float]], per: float
) -> dict[str, float]:
    """`work()`'s figures, with what the store writer spent on it divided by `per` units, and
    the share of the time the writer was busy (near 1: the writer is what limits the work)."""
    before = meter() if meter is not None else {}
    start = time.perf_counter()
    found = work()
    elapsed = time.perf_counter() - start
    if meter is not None:
        after = meter()
        spent = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
        found["store_write_busy_share"] = (spent["unit"] + spent["commit"]) / elapsed
        found["store_write_transactions"] = spent["transactions"] / per
        found["store_write_unit_ms"] = spent["unit"] * 1000 / per
        found["store_write_commit_ms"] = spent["commit"] * 1000 / per
        found["store_write_cpu_ms"] = spent["cpu"] * 1000 / per
    return found


def metrics_port(coordinator: CoordinatorProcess) -> int:
    """The /metrics port `serve` prints right after the line the harness waits for."""
    assert coordinator.proc is not None and coordinator.proc.stdout is not None
    line = coordinator.proc.stdout.readline().strip()
    if " metrics on " not in line:
        raise RuntimeError(f"the coordinator did not say where its metrics are: {line!r}")
    return int(line.rsplit(":", 1)[1])
