"""Research throughput: 40 pages fetched and extracted, against a naive loop on the same site.

Two sites, both served on loopback by this script:

- `latency`: each document answers after 150-300 ms (fixed per page), and each page has
  its own stylesheet (100 ms), script (150 ms), three images (200-400 ms) and a web font
  (300 ms), as a real site would;
- `zero`: the same pages answered at once (the overhead figure).

Figure, for each site: one research run over the 40 pages (`research --url ... --wait`)
through a real coordinator and N headless workers (parallel work units, egress guard,
settling, extraction, receipts, journal). Baseline, in the same run on the same site: the
naive sequential Playwright loop (`goto` + `document.body.innerText`) with the same Chromium.
Goals: >= 4x the naive loop with latency, >= 0.8x at zero latency.

Usage: python -m bench.research [--quick] [--workers 2] [--out bench/results/research.json]
"""

from __future__ import annotations

import argparse
import html
import json
import os
import platform
import shlex
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from playwright.sync_api import sync_playwright

from coordinator.heart.ledger import MAX_PER_WORKER as SLOTS
from tests.harness import CoordinatorProcess, WorkerProcess
from worker_agent.capabilities import CHROMIUM_ARGS, DEFAULT_CHROMIUM

ROOT = Path(__file__).resolve().parent.parent

PAGES = 40
QUERY = "tower painted"
# The 1x1 PNG the local site also serves.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de0000000c4944415478"
    "9c63f8ffff3f0005fe02fe0def46b80000000049454e44ae426082"
)


def _page(i: int) -> bytes:
    fact = f"Note {i}: the tower was painted in {1900 + i}."
    filler = (
        "<p>Visitors to the Isle of Varn often ask about the tower. The island archive keeps "
        "letters, log books and drawings that describe the station through the years.</p>"
    )
    images = "".join(f"<img src='/img/{i}-{k}.png' alt=''>" for k in range(3))
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>Varn note {i}</title><link rel='stylesheet' href='/css/site.css?p={i}'>"
        f"<style>@font-face{{font-family:V;src:url('/font/v.woff2?p={i}')}}"
        "body{font-family:V,serif}</style></head><body>"
        f"<nav><a href='/'>Home</a></nav><article><h1>Varn note {i}</h1>"
        f"<p>{html.escape(fact)}</p>{filler}{images}</article>"
        f"<script src='/js/site.js?p={i}'></script></body></html>"
    ).encode()


def serve(latency: bool) -> tuple[ThreadingHTTPServer, str]:
    """The bench site on 127.0.0.1, with or without realistic latency."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            path = urlparse(self.path).path
            delay, kind, body = 0.0, "text/html; charset=utf-8", b""
            if path.startswith("/notes/"):
                i = int(path.rsplit("/", 1)[1].removesuffix(".html"))
                delay, body = 0.150 + (i * 37 % 151) / 1000, _page(i)
            elif path.startswith("/css/"):
                delay, kind, body = 0.100, "text/css", b"article{max-width:40em}"
            elif path.startswith("/js/"):
                delay, kind, body = 0.150, "text/javascript", b"document.title += '';"
            elif path.startswith("/img/"):
                k = int(path.rsplit("-", 1)[1].split(".")[0])
                delay, kind, body = 0.200 + 0.100 * k, "image/png", PNG
            elif path.startswith("/font/"):
                delay, kind, body = 0.300, "font/woff2", b"wOF2" + b"\0" * 60
            else:
                self.send_error(404)
                return
            if latency:
                time.sleep(delay)
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True, name="bench-site").start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def naive(urls: list[str]) -> dict[str, float]:
    """The baseline: one page, goto then innerText, one URL after another."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=DEFAULT_CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto(urls[0])  # warm up outside the timing
        start_t = time.perf_counter()
        chars = 0
        for url in urls:
            page.goto(url)
            chars += len(page.evaluate("document.body.innerText"))
        elapsed = time.perf_counter() - start_t
        browser.close()
    return {"pages": len(urls), "seconds": elapsed, "pages_per_s": len(urls) / elapsed}


def research(coordinator: CoordinatorProcess, urls: list[str]) -> dict[str, float]:
    args = [x for u in urls for x in ("--url", u)]
    start_t = time.perf_counter()
    done = coordinator.cli(
        "research", QUERY, *args, "--wait", json_out=True, check=False, timeout=300
    )
    elapsed = time.perf_counter() - start_t
    if done.returncode != 0:
        raise RuntimeError(f"research failed: {done.stderr.strip()}")
    report = json.loads(done.stdout)["report"]
    found = sum(1 for s in report["sources"] if s["evidence"])
    if found != len(urls):
        raise RuntimeError(f"research found evidence in {found} of {len(urls)} pages")
    return {"pages": len(urls), "seconds": elapsed, "pages_per_s": len(urls) / elapsed}


def run(args: argparse.Namespace) -> dict[str, Any]:
    count = 10 if args.quick else PAGES
    sites = {name: serve(latency=name == "latency") for name in ("latency", "zero")}
    results: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            coordinator = CoordinatorProcess(
                Path(tmp) / "coord", heartbeat=1.0, lease=8.0, sweep=60.0
            ).start()
            workers = [WorkerProcess(coordinator, f"w{i}") for i in range(args.workers)]
            try:
                for w in workers:
                    w.start().wait_online(60)
                _, first = sites["zero"]
                # Every worker's browser starts here, outside the timing: as many units as
                # the workers have slots, so that each worker takes some.
                warm = [f"{first}/notes/{i}.html?warm" for i in range(SLOTS * args.workers)]
                research(coordinator, warm)
                for name, (_, base) in sites.items():
                    urls = [f"{base}/notes/{i}.html" for i in range(count)]
                    results[name] = {
                        "naive": naive(urls),
                        "research": research(coordinator, urls),
                    }
            finally:
                for w in workers:
                    w.stop()
                coordinator.stop()
    finally:
        for server, _ in sites.values():
            server.shutdown()
            server.server_close()
    for figures in results.values():
        figures["ratio"] = figures["research"]["pages_per_s"] / figures["naive"]["pages_per_s"]
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "load_1min": os.getloadavg()[0],
        },
        "pages": count,
        "workers": args.workers,
        "baseline": "naive sequential Playwright goto + document.body.innerText, one page",
        "figure": "one research run over the pages through the coordinator and the workers",
        "sites": results,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "research.json")
    args = parser.parse_args()
    try:
        doc = run(args)
    except (RuntimeError, TimeoutError, OSError) as exc:
        print(f"research bench: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    for name, fig in doc["sites"].items():
        base, ours = fig["naive"], fig["research"]
        print(
            f"{name}: naive {base['pages_per_s']:.1f} pages/s ({base['seconds']:.2f} s),"
            f" research with {doc['workers']} worker(s) {ours['pages_per_s']:.1f} pages/s"
            f" ({ours['seconds']:.2f} s) = {fig['ratio']:.2f}x"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
