"""A worker's browser returns to its level between runs: many research runs (several at once,
each with units that arrive together) on one worker, then renderer processes and memory are
measured again once the runs' contexts have idled out."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from shared.gen.deskfleet.v1 import runs_pb2, runs_pb2_grpc
from tests.harness import STOPPED, CoordinatorProcess, WorkerProcess, wait_run
from worker_agent.browser.service import SPARE_PAGES

pytestmark = pytest.mark.slow
# 200 runs take about 6 minutes on two quiet cores: CI runs them (.ci/run sets the variable);
# a plain `make test` runs 20 (about 60 s instead of 90 for 30): a context, renderer or some
# megabytes left over per run shows as plainly after 20 as after 30 (20 renderers against a
# resting level of 4); a leak of one run in many is what CI's 200 are for.
RUNS = int(os.environ.get("DESKFLEET_LEAK_RUNS", "20"))
AT_ONCE = 4
IDLE = 2.0


def _chromium(worker: WorkerProcess) -> tuple[int, int, int]:
    """Chromium processes under the worker, its renderers, and their total RSS in bytes."""
    assert worker.proc is not None
    procs, renderers, rss = 0, 0, 0
    for proc in psutil.Process(worker.proc.pid).children(recursive=True):
        try:
            cmdline = proc.cmdline()
            if not cmdline or "chrom" not in cmdline[0]:
                continue
            procs += 1
            renderers += "--type=renderer" in cmdline
            rss += proc.memory_info().rss
        except psutil.Error:
            continue  # it ended meanwhile
    return procs, renderers, rss


def _settled(worker: WorkerProcess, renderers: int, timeout: float) -> tuple[int, int, int]:
    """Chromium once it has no more than `renderers` renderers and the count held for 2 s
    (the spare context is made in the background when the browser goes idle)."""
    deadline = time.monotonic() + timeout
    seen, since = _chromium(worker), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = _chromium(worker)
        if now[1] != seen[1]:
            since = time.monotonic()
        seen = now
        if seen[1] <= renderers and time.monotonic() - since >= 2.0:
            break
    return seen


# 200 runs beside the other test process (the suite runs two) take longer than alone.
@pytest.mark.timeout(1500)
def test_many_research_runs_leave_no_contexts_renderers_or_memory_behind(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], site: str
) -> None:
    worker = workers("w", extra_args=("--browser-idle", str(IDLE)))
    worker.wait_online()

    channel = coordinator.channel()
    assert channel is not None  # plaintext on loopback, no TRACEPARENT: the harness's channel
    stub = runs_pb2_grpc.RunServiceStub(channel)
    md = coordinator.admin_metadata()

    def research(i: int) -> str:
        urls = [f"{site}/varn/notes/{(i + k) % 40}.html" for k in range(3)]
        request = runs_pb2.ResearchRequest(query=f"tower {i}", urls=urls)
        run_id: str = stub.StartResearch(request, metadata=md, timeout=60).id
        return run_id

    def wait_all(ids: list[str]) -> None:
        for run_id in ids:
            run = wait_run(coordinator, run_id, lambda r: r["status"] in STOPPED, timeout=300)
            assert run["status"] == "SUCCEEDED", run["stopReason"]

    # The starting level: the browser up, one run done and its context idled out; what is
    # left is the spare context's blank pages (a renderer or two each).
    wait_all([research(-1)])
    start = _settled(worker, 2 * SPARE_PAGES, IDLE * 10)
    assert start[1] <= 2 * SPARE_PAGES, start
    with ThreadPoolExecutor(AT_ONCE) as pool:
        ids = list(pool.map(research, range(RUNS)))
    wait_all(ids)
    busy = _chromium(worker)
    # No renderer left behind: back to the resting level (Chromium may keep one spare
    # renderer of its own beside the spare context's, so the count at rest varies by one).
    # Waited for down to that level, not to the start's count: a count one above it would
    # wait out the whole timeout and then pass.
    end = _settled(worker, 2 * SPARE_PAGES, IDLE * 10)
    assert end[1] <= 2 * SPARE_PAGES, (start, busy, end)
    # The browser's own processes (browser, GPU, utilities) stay as they were.
    assert end[0] - end[1] <= start[0] - start[1] + 1, (start, busy, end)
    # Memory back near where it was (the browser process keeps some caches).
    assert end[2] <= start[2] * 1.3 + 64 * 1024 * 1024, (start, busy, end)
