"""Screenshot action end to end at 1280x800, beside a raw grab + encode in the same run.

  figure     `desktop.screenshot` through the real path: a coordinator process, an enrolled
             `deskfleet-worker run` on an Xvfb display, a desktop run requested and approved,
             then N sequential DesktopService.Act calls (PNG, the worker's default encoding)
             each followed by GetArtifact, so that every picture really arrived (size and
             sha256 checked)
  baseline   mss grab + the worker's own `to_image` and `encode` (worker_agent/desktop/
             screen.py), N times in this process, on the same display
  beside     the same path without a picture: N Act(desktop.cursor_position) in the same run,
             so that e2e minus it minus the worker's capture and encode is what moving and
             storing the picture costs

The display shows a Chromium --app window with a colourful page whose counter changes every
50 ms, so that successive frames differ (a blank screen encodes unrealistically fast).

Usage: python -m bench.screenshot [--quick] [--json] [--out bench/results/screenshot.json]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform
import shlex
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
from PIL import Image

from bench.stats import summary, table_lines, write_results
from bench.store_meter import METRICS_ARGS, metered, metrics_port, store_meter
from shared.credentials import auth_metadata
from shared.gen.deskfleet.v1 import desktop_pb2, desktop_pb2_grpc
from tests.harness import ChromiumApp, CoordinatorProcess, WorkerProcess, Xvfb, tail
from worker_agent.desktop.screen import encode, to_image

ROOT = Path(__file__).resolve().parent.parent

WIDTH, HEIGHT = 1280, 800
AIM = 0.70  # e2e frames/s at least this share of the raw grab + encode
PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>bench</title><style>
body{margin:0;height:100vh;font:28px sans-serif;color:#fff;
background:linear-gradient(135deg,#e63946 0%,#f4a261 25%,#2a9d8f 50%,#264653 75%,#8338ec 100%)}
.grid{display:grid;grid-template-columns:repeat(8,1fr);gap:12px;padding:24px}
.grid div{height:120px;border-radius:12px;display:flex;align-items:center;justify-content:center}
#tick{position:fixed;bottom:24px;right:32px;font:bold 48px monospace;color:#111;
background:#fffb;padding:8px 16px;border-radius:8px}
</style></head><body><div class="grid" id="g"></div><div id="tick">0</div><script>
const g=document.getElementById('g');
for(let i=0;i<32;i++){const d=document.createElement('div');
d.style.background='hsl('+(i*37%360)+',70%,'+(35+i%4*10)+'%)';d.textContent='cell '+i;
g.appendChild(d);}
let n=0;setInterval(()=>{document.getElementById('tick').textContent=(++n)+' frames';},50);
</script></body></html>
"""
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]


class Window:
    """The page in a Chromium --app window filling the display (tests/harness/x11.py)."""

    def __init__(self, xvfb: Xvfb, workdir: Path) -> None:
        self.xvfb = xvfb
        self.workdir = workdir
        self.app: ChromiumApp | None = None

    def start(self) -> str:
        """Shows the page; returns what is on the screen, for the report."""
        if not ChromiumApp.available():
            return "blank (chromium or xdotool is not installed)"
        self.workdir.mkdir(parents=True, exist_ok=True)
        page = self.workdir / "page.html"
        page.write_text(PAGE)
        self.app = ChromiumApp(self.xvfb.env, page.as_uri(), self.workdir)
        self.app.start(WIDTH, HEIGHT)
        time.sleep(1.5)  # first paint
        return "chromium --app page: 32 coloured cells on a gradient, counter every 50 ms"

    def stop(self) -> None:
        if self.app is not None:
            self.app.stop()


def raw_grab_encode(xvfb: Xvfb, n: int, warmup: int) -> dict[str, Any]:
    """mss grab + conversion + the worker's PNG encode, sequentially, in this process."""
    import mss

    os.environ.update(xvfb.env)  # Xlib reads DISPLAY and XAUTHORITY when mss connects
    grab_ms: list[float] = []
    encode_ms: list[float] = []
    total_ms: list[float] = []
    sizes: list[int] = []
    with mss.MSS() as grabber:
        monitor = grabber.monitors[1]
        started = 0.0
        for i in range(warmup + n):
            if i == warmup:
                started = time.perf_counter()
            t0 = time.perf_counter()
            raw = grabber.grab(monitor)
            image = to_image(raw.raw, raw.size)
            t1 = time.perf_counter()
            data = encode(image, "png")
            t2 = time.perf_counter()
            if i >= warmup:
                grab_ms.append((t1 - t0) * 1000)
                encode_ms.append((t2 - t1) * 1000)
                total_ms.append((t2 - t0) * 1000)
                sizes.append(len(data))
        elapsed = time.perf_counter() - started
    return {
        **summary(total_ms),
        "fps": n / elapsed,
        "grab_p50_ms": summary(grab_ms)["p50_ms"],
        "encode_p50_ms": summary(encode_ms)["p50_ms"],
        "size": image.size,
        "mean_bytes": sum(sizes) / len(sizes),
    }


class Desk:
    """Admin client of the desktop API: request, approve, then screenshots."""

    def __init__(self, coordinator: CoordinatorProcess) -> None:
        self.channel = grpc.insecure_channel(coordinator.address, options=CHANNEL_OPTIONS)
        grpc.channel_ready_future(self.channel).result(timeout=10)
        self.metadata = auth_metadata(coordinator.admin_token_file.read_text().strip())
        self.desktop = desktop_pb2_grpc.DesktopServiceStub(self.channel)
        self.approvals = desktop_pb2_grpc.ApprovalServiceStub(self.channel)
        self.run_id = ""

    def open(self, worker_id: str, actions: int) -> None:
        run = self.desktop.RequestDesktop(
            desktop_pb2.RequestDesktopRequest(
                worker=worker_id,
                scope=desktop_pb2.DesktopScope(
                    actions=["screenshot", "cursor_position"], max_actions=actions
                ),
                title="screenshot benchmark",
                reason="measure screenshot throughput",
            ),
            metadata=self.metadata,
            timeout=30,
        )
        self.run_id = run.id
        pending = self.approvals.ListApprovals(
            desktop_pb2.ListApprovalsRequest(), metadata=self.metadata, timeout=30
        )
        [mine] = [a for a in pending.approvals if a.run_id == run.id]
        approved = self.approvals.Approve(
            desktop_pb2.ApproveRequest(id=mine.id, reason="benchmark"),
            metadata=self.metadata,
            timeout=30,
        )
        if approved.status != "approved":
            raise RuntimeError(f"approval {mine.id} is {approved.status}, not approved")

    def screenshot(self) -> tuple[float, float, bytes, dict[str, Any]]:
        """One Act + GetArtifact: (act ms, fetch ms, the PNG, the worker's result)."""
        t0 = time.perf_counter()
        reply = self.desktop.Act(
            desktop_pb2.DesktopActRequest(
                run_id=self.run_id, action="screenshot", args_json="{}", timeout_seconds=30
            ),
            metadata=self.metadata,
            timeout=45,
        )
        t1 = time.perf_counter()
        if reply.status != "succeeded":
            raise RuntimeError(f"screenshot {reply.status} ({reply.code}): {reply.error}")
        art = next((a for a in reply.artifacts if a.role == "screenshot"), None)
        if art is None:
            raise RuntimeError(f"screenshot succeeded without an artifact: {reply.result_json}")
        data = self.desktop.GetArtifact(
            desktop_pb2.GetArtifactRequest(run_id=self.run_id, sha256=art.sha256),
            metadata=self.metadata,
            timeout=30,
        ).data
        t2 = time.perf_counter()
        if len(data) != art.size or hashlib.sha256(data).hexdigest() != art.sha256:
            raise RuntimeError(f"artifact {art.sha256[:12]}: the bytes fetched do not match")
        result: dict[str, Any] = json.loads(reply.result_json) if reply.result_json else {}
        return (t1 - t0) * 1000, (t2 - t1) * 1000, data, result

    def no_picture(self) -> float:
        """One Act(desktop.cursor_position): the same path without a picture; ms."""
        t0 = time.perf_counter()
        reply = self.desktop.Act(
            desktop_pb2.DesktopActRequest(
                run_id=self.run_id, action="cursor_position", args_json="{}", timeout_seconds=30
            ),
            metadata=self.metadata,
            timeout=45,
        )
        if reply.status != "succeeded":
            raise RuntimeError(f"cursor_position {reply.status} ({reply.code}): {reply.error}")
        return (time.perf_counter() - t0) * 1000

    def close(self) -> None:
        self.channel.close()


def end_to_end(desk: Desk, n: int, warmup: int) -> dict[str, Any]:
    for _ in range(warmup):
        desk.screenshot()
    act_ms: list[float] = []
    fetch_ms: list[float] = []
    total_ms: list[float] = []
    sizes: list[int] = []
    worker: dict[str, list[float]] = {}
    distinct: set[bytes] = set()
    last = b""
    started = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        act, fetch, data, result = desk.screenshot()
        total_ms.append((time.perf_counter() - t0) * 1000)
        act_ms.append(act)
        fetch_ms.append(fetch)
        sizes.append(len(data))
        distinct.add(hashlib.sha256(data).digest())
        last = data
        for key, value in (result.get("timings") or {}).items():
            if isinstance(value, int | float):
                worker.setdefault(key, []).append(float(value))
    elapsed = time.perf_counter() - started
    image = Image.open(io.BytesIO(last))
    colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
    return {
        **summary(total_ms),
        "fps": n / elapsed,
        "act_p50_ms": summary(act_ms)["p50_ms"],
        "act_p99_ms": summary(act_ms)["p99_ms"],
        "get_artifact_p50_ms": summary(fetch_ms)["p50_ms"],
        "worker_timings_p50_ms": {k: summary(v)["p50_ms"] for k, v in sorted(worker.items())},
        "size": image.size,
        "format": image.format,
        "mean_bytes": sum(sizes) / len(sizes),
        "distinct_frames": len(distinct),
        "colours_in_last_frame": len(colours) if colours is not None else f">{1 << 16}",
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    n, warmup = (30, 5) if args.quick else (150, 10)
    if not Xvfb.available():
        raise RuntimeError("Xvfb and xauth are not installed (apt-get install xvfb xauth)")
    with tempfile.TemporaryDirectory(prefix="deskfleet-bench-") as tmp:
        xvfb = Xvfb(Path(tmp) / "xvfb", WIDTH, HEIGHT)
        window = Window(xvfb, Path(tmp) / "chromium")
        coordinator = CoordinatorProcess(
            Path(tmp) / "coord", heartbeat=5.0, lease=15.0, sweep=60.0, serve_args=METRICS_ARGS
        )
        worker = WorkerProcess(coordinator, "bench-desk")
        desk: Desk | None = None
        try:
            xvfb.start()
            worker.display_env = xvfb.env
            screen = window.start()
            coordinator.start()
            meter = store_meter(metrics_port(coordinator))
            row = worker.start().wait_online(90)
            caps = {c["name"]: c for c in row["capabilities"]}
            if not caps.get("computer_use", {}).get("available"):
                raise RuntimeError(f"the worker has no computer_use: {caps.get('computer_use')}")
            # The baseline runs with the same processes up and idle, on the same display.
            raw = raw_grab_encode(xvfb, n, warmup)
            desk = Desk(coordinator)
            desk.open(worker.worker_id, 2 * (n + warmup))
            e2e = metered(meter, lambda: end_to_end(desk, n, warmup), n + warmup)
            for _ in range(warmup):
                desk.no_picture()
            no_picture = metered(meter, lambda: summary([desk.no_picture() for _ in range(n)]), n)
            if worker.proc is not None and worker.proc.poll() is not None:
                raise RuntimeError(f"the worker exited: {tail(worker.log, 3)}")
        finally:
            if desk is not None:
                desk.close()
            worker.stop()
            coordinator.stop()
            window.stop()
            xvfb.stop()
    ratio = e2e["fps"] / raw["fps"]
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "grpcio": grpc.__version__,
        },
        "settings": {
            "quick": args.quick,
            "frames": n,
            "warmup": warmup,
            "resolution": f"{WIDTH}x{HEIGHT}",
            "encoding": "png (worker default, compress_level=1)",
            "screen": screen,
            "store": "sqlite",
            "sequential": "one Act + GetArtifact at a time",
        },
        "baseline": {"what": "mss grab + frombytes + worker encode(), one process", **raw},
        "figure": {"what": "Act(desktop.screenshot) + GetArtifact, real processes", **e2e},
        "no_picture": {"what": "Act(desktop.cursor_position), same run", **no_picture},
        "ratio_fps": ratio,
        "aim_ratio_fps": AIM,
        "aim_met": ratio >= AIM,
    }


def table(doc: dict[str, Any]) -> str:
    e2e, raw = doc["figure"], doc["baseline"]
    header = ("figure", "value", "baseline", "ratio")
    rows = [
        (
            "raw mss grab + PNG encode (baseline)",
            f"{raw['fps']:.1f} fps, p50 {raw['p50_ms']:.1f} / p99 {raw['p99_ms']:.1f} ms",
            "-",
            "-",
        ),
        (
            f"screenshot e2e {doc['settings']['resolution']} PNG (Act+GetArtifact)",
            f"{e2e['fps']:.1f} fps, p50 {e2e['p50_ms']:.1f} / p99 {e2e['p99_ms']:.1f} ms",
            f"{raw['fps']:.1f} fps, p50 {raw['p50_ms']:.1f} ms",
            f"{doc['ratio_fps']:.2f}x fps (aim >= {doc['aim_ratio_fps']:.2f}:"
            f" {'met' if doc['aim_met'] else 'NOT met'})",
        ),
        (
            "  of which Act / GetArtifact p50",
            f"{e2e['act_p50_ms']:.1f} / {e2e['get_artifact_p50_ms']:.1f} ms",
            "-",
            "-",
        ),
        (
            "  same path without a picture: Act(cursor_position)",
            f"p50 {doc['no_picture']['p50_ms']:.1f} / p99 {doc['no_picture']['p99_ms']:.1f} ms",
            "-",
            "-",
        ),
        *(
            (
                f"  its store writer: {fig['store_write_transactions']:.1f} transactions per"
                f" {what}, units {fig['store_write_unit_ms']:.1f} + commits"
                f" {fig['store_write_commit_ms']:.1f} ms (CPU {fig['store_write_cpu_ms']:.1f})",
                f"{fig['store_write_unit_ms'] + fig['store_write_commit_ms']:.1f} ms busy",
                "-",
                "-",
            )
            for what, fig in (("screenshot", e2e), ("Act(cursor_position)", doc["no_picture"]))
            if "store_write_unit_ms" in fig
        ),
        (
            "  raw grab / encode p50",
            f"{raw['grab_p50_ms']:.1f} / {raw['encode_p50_ms']:.1f} ms",
            "-",
            "-",
        ),
        (
            "  worker-reported timings p50",
            ", ".join(f"{k} {v:.1f}" for k, v in e2e["worker_timings_p50_ms"].items()) or "-",
            "-",
            "-",
        ),
        (
            "  PNG bytes (mean), e2e / raw",
            f"{e2e['mean_bytes'] / 1024:.0f} KiB / {raw['mean_bytes'] / 1024:.0f} KiB",
            "-",
            "-",
        ),
    ]
    lines = table_lines(header, rows)
    lines.append(
        f"screen: {doc['settings']['screen']}; {e2e['distinct_frames']} distinct of"
        f" {doc['settings']['frames']} frames"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="30 frames instead of 150")
    parser.add_argument("--json", action="store_true", help="print the JSON document, no table")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "screenshot.json")
    args = parser.parse_args()
    # SIGTERM unwinds like Ctrl-C, so the finally blocks stop every child process.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        doc = run(args)
    except KeyboardInterrupt:
        print("screenshot bench: interrupted", file=sys.stderr)
        return 1
    except (RuntimeError, TimeoutError, grpc.RpcError, OSError, ValueError) as exc:
        detail = str(exc).strip().splitlines()
        print(
            f"screenshot bench: {type(exc).__name__}: {detail[0] if detail else ''}",
            file=sys.stderr,
        )
        return 1
    write_results(doc, args.out, args.json, table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
