"""The console's fleet page at fleet scale: its first page over HTTP beside the RPC page alone.

Run from the repository root:
    .venv/bin/python -m bench.fleet_page [--quick] [--workers 10000] [--json]

One coordinator (SQLite) gets K simulated workers that speak the real WorkerGateway protocol
and stay connected (bench/simulated_workers.py), so the page counts and lists live presence,
not enrolled-and-offline rows. A console process (`deskfleet-coordinator console`) is put in
front of it and an admin signs in through its form. Then, with all K online:

  page       GET /fleet through the console, one keep-alive HTTP connection: the whole page
             (its session check, the chrome's approvals and kill switch reads, the fleet
             counts, one page of workers, the fleet activity, the template) until the body
             has been read
  filtered   GET /fleet?q=WORKER_ID&online=yes: a text filter the store applies to every row
             (one match)
  baseline   FleetService.GetWorkerStatus with a page of the same size, the same admin token,
             from a plain gRPC client: the page's counts and rows without the console

Each is sequential: N calls (after warm-up), p50 and p99.
"""

from __future__ import annotations

import argparse
import http.client
import re
import shlex
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import grpc

from bench import machine
from bench.simulated_workers import SimulatedFleet
from bench.stats import table_lines, timed, write_results
from coordinator.console.model import PAGE_SIZE
from shared.credentials import auth_metadata
from shared.gen.deskfleet.v1 import fleet_pb2, fleet_pb2_grpc
from tests.harness import ConsoleProcess, CoordinatorProcess

ROOT = Path(__file__).resolve().parent.parent

FULL_WORKERS, QUICK_WORKERS = 10_000, 300
SAMPLES = {False: 200, True: 40}
ROW = re.compile(r'<a href="/workers/([^"]+)">')


class Browser:
    """A signed-in console session over one keep-alive HTTP connection (no cookie jar needed:
    the session cookie is the one that matters)."""

    def __init__(self, url: str, token: str) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, 30)
        self.cookie = ""
        body = self.get("/signin")
        pre = re.search(r'name="pre" value="([^"]+)"', body)
        if pre is None:
            raise RuntimeError("the sign-in form has no pre token")
        self.conn.request(
            "POST",
            "/signin",
            urlencode({"pre": pre.group(1), "token": token, "next": "/fleet"}),
            {"content-type": "application/x-www-form-urlencoded", "cookie": self.cookie},
        )
        response = self.conn.getresponse()
        response.read()
        session = _cookie(response, "df_session")
        if response.status != 303 or not session:
            raise RuntimeError(f"sign-in refused ({response.status})")
        self.cookie = f"df_session={session}"

    def get(self, path: str) -> str:
        self.conn.request("GET", path, headers={"cookie": self.cookie} if self.cookie else {})
        response = self.conn.getresponse()
        body = response.read().decode()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status}")
        pre = _cookie(response, "df_signin")
        if pre and not self.cookie:
            self.cookie = f"df_signin={pre}"
        return body

    def close(self) -> None:
        self.conn.close()


def _cookie(response: http.client.HTTPResponse, name: str) -> str:
    for header in response.headers.get_all("set-cookie") or []:
        key, _, rest = header.partition("=")
        if key.strip() == name:
            return rest.split(";", 1)[0]
    return ""


def run(workers: int, quick: bool) -> dict[str, Any]:
    n = SAMPLES[quick]
    with tempfile.TemporaryDirectory(prefix="deskfleet-bench-") as tmp:
        coordinator = CoordinatorProcess(Path(tmp) / "coord", sweep=60.0)
        fleet: SimulatedFleet | None = None
        console: ConsoleProcess | None = None
        channel: grpc.Channel | None = None
        browser: Browser | None = None
        try:
            coordinator.start()
            fleet = SimulatedFleet(coordinator.address, coordinator.admin_token_file, Path(tmp))
            grow_s = fleet.grow(workers, timeout=600)
            admin = coordinator.admin_token_file.read_text().strip()
            channel = grpc.insecure_channel(coordinator.address)
            stub = fleet_pb2_grpc.FleetServiceStub(channel)
            metadata = auth_metadata(admin)

            def status() -> fleet_pb2.WorkerStatus:
                reply: fleet_pb2.WorkerStatus = stub.GetWorkerStatus(
                    fleet_pb2.GetWorkerStatusRequest(limit=PAGE_SIZE),
                    metadata=metadata,
                    timeout=60,
                )
                return reply

            deadline = time.monotonic() + 120
            while (online := status().online) < workers and time.monotonic() < deadline:
                time.sleep(0.5)
            console = ConsoleProcess(coordinator).start()
            browser = Browser(console.url, admin)
            page = browser.get("/fleet")
            needle = ROW.findall(page)[-1]  # a worker id: the store scans every row for it
            filtered_path = "/fleet?" + urlencode({"q": needle, "online": "yes"})
            filtered = browser.get(filtered_path)
            rows, matches = len(ROW.findall(page)), len(ROW.findall(filtered))
            b = browser
            figures = {
                "page": timed(lambda: b.get("/fleet"), n, warmup=5),
                "filtered": timed(lambda: b.get(filtered_path), n, warmup=5),
                "status_rpc": timed(status, n, warmup=5),
            }
            fleet.check()
        finally:
            if browser is not None:
                browser.close()
            if console is not None:
                console.stop()
            if channel is not None:
                channel.close()
            if fleet is not None:
                fleet.stop()
            coordinator.stop()
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "machine": machine.describe(),
        "settings": {
            "quick": quick,
            "workers": workers,
            "page_size": PAGE_SIZE,
            "samples": n,
            "store": "sqlite",
            "filter": filtered_path,
        },
        "grow_s": grow_s,
        "online": online,
        "rows_on_page": rows,
        "filter_matches": matches,
        "figures": figures,
    }


def table(doc: dict[str, Any]) -> str:
    f = doc["figures"]
    rows = [
        (name, f"{f[key]['p50_ms']:.1f} ms", f"{f[key]['p99_ms']:.1f} ms")
        for name, key in (
            ("GET /fleet (console, first page)", "page"),
            ("GET /fleet?q=... (filtered)", "filtered"),
            ("GetWorkerStatus page (baseline)", "status_rpc"),
        )
    ]
    head = f"K={doc['settings']['workers']} simulated workers, {doc['online']} online"
    return "\n".join([head, *table_lines(("path", "p50", "p99"), rows)])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help=f"K={QUICK_WORKERS}")
    parser.add_argument("--workers", type=int, default=0, help="K (default 10000)")
    parser.add_argument("--json", action="store_true", help="print the JSON document, no table")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/fleet_page.json")
    args = parser.parse_args()
    if args.workers < 0:
        parser.error("--workers: a positive number")
    k = args.workers or (QUICK_WORKERS if args.quick else FULL_WORKERS)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        doc = run(k, args.quick)
    except KeyboardInterrupt:
        print("fleet_page: interrupted", file=sys.stderr)
        return 1
    write_results(doc, args.out, args.json, table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
