"""Research throughput: pages fetched and extracted per second on 40 local pages.

Figure: one research run over the 40 note pages of the local site, through the coordinator
and a real worker (parallel work units, policy checks, extraction, receipts, journal).
Baseline, in the same run: a naive sequential Playwright loop (goto + inner_text) over the
same pages with the same Chromium.

Usage: python bench/research.py [--quick] [--workers N] [--out bench/results/research.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from scripts.local_site.server import start  # noqa: E402
from tests.harness import CoordinatorProcess, WorkerProcess  # noqa: E402
from worker_agent.capabilities import CHROMIUM_ARGS, DEFAULT_CHROMIUM  # noqa: E402


def naive(urls: list[str]) -> dict[str, float]:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=DEFAULT_CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto(urls[0])  # warm up outside the timing
        start_t = time.perf_counter()
        chars = 0
        for url in urls:
            page.goto(url)
            chars += len(page.inner_text("body"))
        elapsed = time.perf_counter() - start_t
        browser.close()
    return {
        "pages": len(urls),
        "seconds": elapsed,
        "pages_per_s": len(urls) / elapsed,
        "chars": chars,
    }


def research(coordinator: CoordinatorProcess, urls: list[str]) -> dict[str, float]:
    args = [x for u in urls for x in ("--url", u)]
    warm = coordinator.cli("research", "warm up", "--url", urls[0], "--wait", check=False)
    if warm.returncode != 0:
        raise RuntimeError(f"warm-up research failed: {warm.stderr.strip()}")
    start_t = time.perf_counter()
    done = coordinator.cli(
        "research",
        "tower painted",
        *args,
        "--max-sources",
        "20",
        "--wait",
        json_out=True,
        check=False,
        timeout=300,
    )
    elapsed = time.perf_counter() - start_t
    if done.returncode != 0:
        raise RuntimeError(f"research failed: {done.stderr.strip()}")
    report = json.loads(done.stdout)["report"]
    found = sum(1 for s in report["sources"] if s["evidence"])
    if found != len(urls):
        raise RuntimeError(f"research found evidence in {found} of {len(urls)} pages")
    return {
        "pages": len(urls),
        "seconds": elapsed,
        "pages_per_s": len(urls) / elapsed,
        "evidence_pages": found,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    server, site = start()
    count = 10 if args.quick else 40
    urls = [f"{site}/varn/notes/{i}.html" for i in range(count)]
    # A research run takes at most 20 sources: the 40 pages go as two runs back to back.
    batches = [urls[i : i + 20] for i in range(0, count, 20)]
    try:
        baseline = naive(urls)
        with tempfile.TemporaryDirectory() as tmp:
            coordinator = CoordinatorProcess(
                Path(tmp) / "coord", heartbeat=1.0, lease=5.0, sweep=60.0
            ).start()
            workers = [WorkerProcess(coordinator, f"w{i}") for i in range(args.workers)]
            try:
                for w in workers:
                    w.start().wait_online(60)
                parts = [research(coordinator, batch) for batch in batches]
            finally:
                for w in workers:
                    w.stop()
                coordinator.stop()
    finally:
        server.shutdown()
        server.server_close()
    seconds = sum(p["seconds"] for p in parts)
    figure = {
        "pages": count,
        "seconds": seconds,
        "pages_per_s": count / seconds,
        "workers": args.workers,
        "runs": len(parts),
    }
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
        },
        "baseline": {"what": "sequential Playwright goto + inner_text, one page", **baseline},
        "figure": {"what": "research runs through coordinator and worker(s), end to end", **figure},
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "research.json")
    args = parser.parse_args()
    try:
        doc = run(args)
    except (RuntimeError, TimeoutError, OSError) as exc:
        print(f"research bench: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    base, fig = doc["baseline"], doc["figure"]
    print(
        f"naive sequential goto + inner_text (baseline): {base['pages_per_s']:.1f} pages/s"
        f" ({base['pages']} pages in {base['seconds']:.2f} s)"
    )
    print(
        f"research runs, {fig['workers']} worker(s): {fig['pages_per_s']:.1f} pages/s"
        f" ({fig['pages']} pages in {fig['seconds']:.2f} s)"
        f" = {fig['pages_per_s'] / base['pages_per_s']:.2f}x the baseline"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
