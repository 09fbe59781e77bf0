"""Live view at 1280x800: a change on the screen until a viewer has it, CPU per viewer, and what
a still screen costs, beside a raw grab + encode in the same run.

Real processes: a coordinator, an enrolled `deskfleet-worker run` on an Xvfb display showing a
Chromium --app page (bench/live_screen.py), and viewers in this process, each an admin's
DesktopService.WatchScreen stream by worker (10 frames/s, quality 70: the defaults, as the
console asks).

  latency    the marker (an X window of this process, over the page) is painted a new colour at
             a known time (XSync returned); the figure is the time until the viewer's stream
             yields the first frame whose pixel at the marker's centre is that colour (JPEG
             decoded at 1/8 scale; the decode is not counted, receipt is). N changes, each after
             a random 150-350 ms pause so that they fall anywhere in the worker's 100 ms grab
             interval; the page stands still meanwhile, so each frame is there for a change
  baseline   mss grab + the worker's conversion and JPEG encode (quality 70) of the same
             screen (worker_agent/desktop/screen.py `Screen.grab`, `encode`) in this process:
             what one frame costs with no waiting, no stream and no coordinator
  cpu        CPU seconds per wall second (psutil: user + system of the process) of the worker
             and of the coordinator over the same length of window with the page's counter
             changing every 50 ms, with no viewer, then 1 viewer, then 4 (one worker feed that
             the coordinator fans out: the worker's share should not grow with viewers)
  still      frames and bytes per second one viewer receives over a window in which nothing
             on the screen changes (after its first frame; keepalives counted in the bytes),
             beside the same in the 1-viewer window of the busy page

Bytes are protobuf message sizes of the LiveFrames received (no gRPC or HTTP/2 framing).

Usage: python -m bench.live_view [--quick] [--json] [--out bench/results/live_view.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import queue
import random
import shlex
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import psutil

from bench.live_screen import HEIGHT, PALETTE, WIDTH, WatchedScreen, frame_shows
from bench.stats import summary, table_lines, write_results
from shared.credentials import auth_metadata
from shared.gen.deskfleet.v1 import desktop_pb2, desktop_pb2_grpc
from tests.harness import CoordinatorProcess, WorkerProcess, Xvfb, tail

ROOT = Path(__file__).resolve().parent.parent

FPS = 10.0
QUALITY = 70
GOAL_P50_MS = 150.0
CHANGE_TIMEOUT = 5.0  # a change no frame shows within this is a failure, not a slow sample
FIRST_FRAME = 20.0
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]


@dataclass(frozen=True)
class Sizes:
    changes: int  # marker changes timed, after `warmup` untimed ones
    warmup: int
    raw: int  # baseline grabs + encodes
    cpu_s: float  # each CPU window
    still_s: float  # the still screen's window


SIZES = {True: Sizes(30, 3, 30, 4.0, 5.0), False: Sizes(200, 10, 200, 15.0, 10.0)}

Received = tuple[float, float, desktop_pb2.LiveFrame]  # perf_counter, time.time(), the frame


class Viewer:
    """One WatchScreen stream read on a thread of its own, counting what it receives; with
    `keep`, every message also goes to `received` with its time of receipt."""

    def __init__(self, coordinator: CoordinatorProcess, worker_id: str, client: str, keep: bool):
        self.channel = grpc.insecure_channel(coordinator.address, options=CHANNEL_OPTIONS)
        self.metadata = auth_metadata(coordinator.admin_token_file.read_text().strip())
        self.request = desktop_pb2.WatchScreenRequest(
            worker=worker_id, max_fps=FPS, quality=QUALITY, client=client
        )
        self.received: queue.Queue[Received] | None = queue.Queue() if keep else None
        self.frames = self.keepalives = self.image_bytes = self.wire_bytes = 0
        self.first = threading.Event()
        self.error = ""
        self._lock = threading.Lock()
        self._call: Any = None
        self._thread = threading.Thread(target=self._read, daemon=True)

    def start(self) -> Viewer:
        stub = desktop_pb2_grpc.DesktopServiceStub(self.channel)
        self._call = stub.WatchScreen(self.request, metadata=self.metadata)
        self._thread.start()
        return self

    def wait_first(self) -> None:
        if not self.first.wait(FIRST_FRAME) or self.error:
            raise RuntimeError(f"no first frame within {FIRST_FRAME:.0f} s: {self.error or '-'}")

    def counts(self) -> tuple[int, int, int, int]:
        with self._lock:
            return self.frames, self.keepalives, self.image_bytes, self.wire_bytes

    def _read(self) -> None:
        try:
            for frame in self._call:
                at, wall = time.perf_counter(), time.time()
                with self._lock:
                    if frame.seq:
                        self.frames += 1
                        self.image_bytes += len(frame.data)
                    else:
                        self.keepalives += 1
                    self.wire_bytes += frame.ByteSize()
                if self.received is not None:
                    self.received.put((at, wall, frame))
                if frame.seq:
                    self.first.set()
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                self.error = f"{exc.code().name}: {exc.details()}"
        finally:
            self.first.set()  # a waiter learns of the error at once

    def stop(self) -> None:
        if self._call is not None:
            self._call.cancel()
        self._thread.join(10)
        self.channel.close()
        if self.error:
            raise RuntimeError(f"a viewer's stream failed: {self.error}")


def raw_grab_encode(n: int, warmup: int) -> dict[str, Any]:
    """The worker's grab + conversion + JPEG encode of the display, sequentially, here."""
    from worker_agent.desktop.screen import Screen, encode

    grabber = Screen()
    try:
        geometry = grabber.display(0)
        grab_ms: list[float] = []
        total_ms: list[float] = []
        sizes: list[int] = []
        for i in range(warmup + n):
            t0 = time.perf_counter()
            image = grabber.grab(geometry)
            t1 = time.perf_counter()
            data = encode(image, "jpeg", QUALITY)
            t2 = time.perf_counter()
            if i >= warmup:
                grab_ms.append((t1 - t0) * 1000)
                total_ms.append((t2 - t0) * 1000)
                sizes.append(len(data))
    finally:
        grabber.close()
    return {
        **summary(total_ms),
        "grab_p50_ms": summary(grab_ms)["p50_ms"],
        "mean_bytes": sum(sizes) / len(sizes),
        "size": [geometry.width, geometry.height],
    }


def latency(
    screen: WatchedScreen, coordinator: CoordinatorProcess, worker_id: str, n: int, warmup: int
) -> dict[str, Any]:
    """Change -> the first received frame that shows it, n times (the page still)."""
    assert screen.marker is not None
    viewer = Viewer(coordinator, worker_id, "bench-latency", keep=True).start()
    received = viewer.received
    assert received is not None
    total_ms: list[float] = []
    to_grab_ms: list[float] = []
    grab_to_viewer_ms: list[float] = []
    stale = 0
    try:
        viewer.wait_first()
        for i in range(warmup + n):
            colour = PALETTE[(i + 1) % len(PALETTE)]
            time.sleep(random.uniform(0.15, 0.35))
            while not received.empty():  # frames of the last change, not of this one
                received.get_nowait()
            changed, changed_wall = screen.marker.paint(colour)
            frames = 0
            while True:
                left = changed + CHANGE_TIMEOUT - time.perf_counter()
                try:
                    at, wall, frame = received.get(timeout=max(0.0, left))
                except queue.Empty:
                    raise RuntimeError(
                        f"change {i}: no frame showed the marker's new colour within"
                        f" {CHANGE_TIMEOUT:.0f} s ({frames} frames came) {viewer.error}"
                    ) from None
                if not frame.seq:
                    continue
                frames += 1
                if frame_shows(frame.data, frame.width, colour):
                    break
            if i < warmup:
                continue
            captured = frame.captured_at.seconds + frame.captured_at.nanos / 1e9
            total_ms.append((at - changed) * 1000)
            to_grab_ms.append((captured - changed_wall) * 1000)
            grab_to_viewer_ms.append((wall - captured) * 1000)
            stale += frames - 1
    finally:
        viewer.stop()
    return {
        **summary(total_ms),
        "change_to_grab_p50_ms": summary(to_grab_ms)["p50_ms"],
        "grab_to_viewer_p50_ms": summary(grab_to_viewer_ms)["p50_ms"],
        "grab_to_viewer_p99_ms": summary(grab_to_viewer_ms)["p99_ms"],
        "frames_without_the_change": stale,
    }


def cpu_window(processes: dict[str, psutil.Process], seconds: float) -> dict[str, float]:
    """CPU of each process over `seconds`: % of one core (user + system)."""
    before = {name: p.cpu_times() for name, p in processes.items()}
    started = time.perf_counter()
    time.sleep(seconds)
    elapsed = time.perf_counter() - started
    out = {"window_s": elapsed}
    for name, p in processes.items():
        after, was = p.cpu_times(), before[name]
        used = (after.user - was.user) + (after.system - was.system)
        out[f"{name}_cpu_percent"] = 100 * used / elapsed
    return out


def received_over(viewers: list[Viewer], measure: Any) -> tuple[Any, list[dict[str, float]]]:
    """What `measure()` returns, and per viewer what it received while it ran, per second."""
    before = [v.counts() for v in viewers]
    started = time.perf_counter()
    result = measure()
    elapsed = time.perf_counter() - started
    rates = []
    for v, was in zip(viewers, before, strict=True):
        now = v.counts()
        frames, keepalives, image, wire = (a - b for a, b in zip(now, was, strict=True))
        rates.append(
            {
                "frames_per_s": frames / elapsed,
                "keepalives": keepalives,
                "image_bytes_per_s": image / elapsed,
                "bytes_per_s": wire / elapsed,
                "window_s": elapsed,
            }
        )
    return result, rates


def cpu_per_viewer(
    screen: WatchedScreen,
    coordinator: CoordinatorProcess,
    worker_id: str,
    processes: dict[str, psutil.Process],
    seconds: float,
) -> dict[str, Any]:
    """The busy page with 0, 1 and 4 viewers, the same length of window each."""
    screen.set("run")
    time.sleep(1.0)
    out: dict[str, Any] = {"no_viewer": cpu_window(processes, seconds)}
    viewers: list[Viewer] = []
    try:
        for count in (1, 4):
            while len(viewers) < count:
                viewers.append(
                    Viewer(coordinator, worker_id, f"bench-cpu-{len(viewers)}", keep=False).start()
                )
            for v in viewers:
                v.wait_first()
            time.sleep(1.0)  # the feed settled: the new viewers' first frames are in
            cpu, rates = received_over(viewers, lambda: cpu_window(processes, seconds))
            out[f"viewers_{count}"] = {
                **cpu,
                "viewer_fps_min": min(r["frames_per_s"] for r in rates),
                "viewer_fps_mean": sum(r["frames_per_s"] for r in rates) / len(rates),
                "received": rates[0],
            }
    finally:
        for v in viewers:
            v.stop()
    return out


def still(
    screen: WatchedScreen, coordinator: CoordinatorProcess, worker_id: str, seconds: float
) -> dict[str, Any]:
    """One viewer of a screen where nothing changes, after its first frame."""
    screen.set("still")
    viewer = Viewer(coordinator, worker_id, "bench-still", keep=False).start()
    try:
        viewer.wait_first()
        time.sleep(0.5)
        _, [rates] = received_over([viewer], lambda: time.sleep(seconds))
    finally:
        viewer.stop()
    return rates


def run(args: argparse.Namespace) -> dict[str, Any]:
    size = SIZES[bool(args.quick)]
    if not Xvfb.available():
        raise RuntimeError("Xvfb and xauth are not installed (apt-get install xvfb xauth)")
    with tempfile.TemporaryDirectory(prefix="deskfleet-bench-") as tmp:
        xvfb = Xvfb(Path(tmp) / "xvfb", WIDTH, HEIGHT)
        screen = WatchedScreen(xvfb, Path(tmp) / "chromium")
        coordinator = CoordinatorProcess(Path(tmp) / "coord", heartbeat=5.0, lease=15.0, sweep=60.0)
        # No browser: its Chromium would be CPU the worker's figure does not mean.
        worker = WorkerProcess(coordinator, "bench-live", browser=False)
        try:
            xvfb.start()
            worker.display_env = xvfb.env
            shown = screen.start()
            screen.set("still")
            assert screen.marker is not None
            screen.marker.paint(PALETTE[0])
            if not screen.marker_shows(PALETTE[0]):
                raise RuntimeError("the marker window is not on top of the page")
            coordinator.start()
            row = worker.start().wait_online(90)
            caps = {c["name"]: c for c in row["capabilities"]}
            if not caps.get("computer_use", {}).get("available"):
                raise RuntimeError(f"the worker has no computer_use: {caps.get('computer_use')}")
            assert coordinator.proc is not None and worker.proc is not None
            processes = {
                "worker": psutil.Process(worker.proc.pid),
                "coordinator": psutil.Process(coordinator.proc.pid),
            }
            # The baseline with the same processes up and idle, on the same (still) screen.
            raw = raw_grab_encode(size.raw, 5)
            lat = latency(screen, coordinator, worker.worker_id, size.changes, size.warmup)
            calm = still(screen, coordinator, worker.worker_id, size.still_s)
            cpu = cpu_per_viewer(screen, coordinator, worker.worker_id, processes, size.cpu_s)
            if worker.proc.poll() is not None:
                raise RuntimeError(f"the worker exited: {tail(worker.log, 3)}")
        finally:
            worker.stop()
            coordinator.stop()
            screen.stop()
            xvfb.stop()
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
            "quick": bool(args.quick),
            "changes": size.changes,
            "warmup": size.warmup,
            "raw_frames": size.raw,
            "cpu_window_s": size.cpu_s,
            "still_window_s": size.still_s,
            "resolution": f"{WIDTH}x{HEIGHT}",
            "max_fps": FPS,
            "quality": QUALITY,
            "screen": shown,
            "change": "an X window's colour (python-xlib, XSync), over the page",
            "viewer": "admin DesktopService.WatchScreen by worker, in the bench process",
        },
        "baseline": {"what": "mss grab + conversion + JPEG encode, one process", **raw},
        "latency": {"what": "marker painted -> first received frame showing it", **lat},
        "cpu": cpu,
        "still": {"what": "one viewer, nothing changing, after the first frame", **calm},
        "changing": {
            "what": "the same viewer counts in the 1-viewer CPU window, page busy",
            **cpu["viewers_1"]["received"],
        },
        "goal_p50_ms": GOAL_P50_MS,
        "goal_met": lat["p50_ms"] < GOAL_P50_MS,
    }


def table(doc: dict[str, Any]) -> str:
    lat, raw, cpu = doc["latency"], doc["baseline"], doc["cpu"]
    calm, busy = doc["still"], doc["changing"]
    none = cpu["no_viewer"]

    def cpu_row(label: str, key: str) -> tuple[str, str, str, str]:
        got = cpu[key]
        return (
            f"CPU at {doc['settings']['max_fps']:.0f} frames/s, {label}",
            f"worker {got['worker_cpu_percent']:.1f}%, coordinator"
            f" {got['coordinator_cpu_percent']:.1f}% (viewer fps min {got['viewer_fps_min']:.1f})",
            f"no viewer: worker {none['worker_cpu_percent']:.1f}%, coordinator"
            f" {none['coordinator_cpu_percent']:.1f}%",
            "-",
        )

    rows = [
        (
            "raw mss grab + JPEG encode (baseline)",
            f"p50 {raw['p50_ms']:.1f} / p99 {raw['p99_ms']:.1f} ms",
            "-",
            "-",
        ),
        (
            f"live view: change -> frame showing it received, {doc['settings']['resolution']}",
            f"p50 {lat['p50_ms']:.1f} / p99 {lat['p99_ms']:.1f} ms",
            f"p50 {raw['p50_ms']:.1f} / p99 {raw['p99_ms']:.1f} ms",
            f"{lat['p50_ms'] / raw['p50_ms']:.2f}x p50 (goal < {doc['goal_p50_ms']:.0f} ms:"
            f" {'met' if doc['goal_met'] else 'NOT met'})",
        ),
        (
            "  of which change -> grab started / grab -> viewer p50",
            f"{lat['change_to_grab_p50_ms']:.1f} / {lat['grab_to_viewer_p50_ms']:.1f} ms",
            "-",
            "-",
        ),
        cpu_row("1 viewer", "viewers_1"),
        cpu_row("4 viewers", "viewers_4"),
        (
            "still screen, 1 viewer: frames/s, bytes/s",
            f"{calm['frames_per_s']:.2f}, {calm['bytes_per_s']:.0f} B/s"
            f" ({calm['keepalives']} keepalives in {calm['window_s']:.0f} s)",
            f"busy: {busy['frames_per_s']:.1f}, {busy['bytes_per_s'] / 1024:.0f} KiB/s",
            "-",
        ),
    ]
    lines = table_lines(("figure", "value", "baseline (same run)", "ratio"), rows)
    lines.append(
        f"screen: {doc['settings']['screen']}; {lat['n']} changes,"
        f" {lat['frames_without_the_change']} frames came without the change"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="30 changes and short windows")
    parser.add_argument("--json", action="store_true", help="print the JSON document, no table")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "live_view.json")
    args = parser.parse_args()
    # SIGTERM unwinds like Ctrl-C, so the finally blocks stop every child process.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        doc = run(args)
    except KeyboardInterrupt:
        print("live view bench: interrupted", file=sys.stderr)
        return 1
    except (RuntimeError, TimeoutError, grpc.RpcError, OSError, ValueError) as exc:
        detail = str(exc).strip().splitlines()
        print(
            f"live view bench: {type(exc).__name__}: {detail[0] if detail else ''}",
            file=sys.stderr,
        )
        return 1
    write_results(doc, args.out, args.json, table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
