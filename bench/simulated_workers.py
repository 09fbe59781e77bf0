"""K simulated workers in one process, speaking the real WorkerGateway protocol.

Usage: python -m bench.simulated_workers --coordinator ADDR --admin-token-file PATH --count K
           [--reconnect]

Creates one enrollment token with K uses, enrolls K workers concurrently, opens K Connect
streams from one event loop (Hello, then only what the coordinator sends: liveness is the
stream's keepalive; an older coordinator gets heartbeats at the welcome interval, and acks),
prints `READY K` once every stream got its Welcome, and runs until stdin closes or SIGTERM.
Timing lines (`TIMING enroll=... connect=...`) come before READY for the caller to record.
Kill switch pushes are applied and acknowledged (`kill_ack`) at once, as a worker does; once a
change has reached all K streams, one line `KILL ID ENGAGED first=T median=T last=T` gives the
wall-clock (time.time()) arrival times. SimulatorProcess is the parent side of that protocol,
used by bench/fleet_status.py, bench/runs.py and bench/kill_switch.py; SimulatedFleet starts
several of them in waves, for fleets larger than one process should hold (bench/recovery.py).
With --reconnect a stream that ends is opened again after the worker's own backoff, as a real
worker does (bench/recovery.py kills the coordinator under them); without it, it is fatal.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import platform
import selectors
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import grpc

from shared.advertisement import Advertisement, Capability
from shared.credentials import auth_metadata
from shared.gen.deskfleet.v1 import admin_pb2, admin_pb2_grpc, worker_pb2, worker_pb2_grpc
from worker_agent.backoff import Backoff

ROOT = Path(__file__).resolve().parent.parent

# Same keepalives as the real worker; a local subchannel pool gives every simulated worker its
# own TCP connection, as K separate machines would have (channels otherwise share one).
CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.ping_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.use_local_subchannel_pool", 1),
]
WELCOME_TIMEOUT = 30.0
T = TypeVar("T")


def advertisement(index: int) -> Advertisement:
    """A headless-capable worker without a display, like a server running Chromium."""
    return Advertisement(
        hostname=f"sim-{index}",
        labels={"bench": "simulated"},
        capabilities=(
            Capability("headless", True),
            Capability("computer_use", False, "simulated worker: no display"),
        ),
        os=f"{platform.system()} {platform.release()}",
        versions={"deskfleet": "bench-sim", "python": platform.python_version()},
    )


# A saturated coordinator (thousands of streams on two cores) may drop a call: enrollment
# tries again, with the calls in flight bounded so that it does not add to the burst.
TRANSIENT = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
)
ENROLL_PATIENCE, ENROLL_IN_FLIGHT = 180.0, 100  # seconds of retrying; calls at once


async def enroll_all(address: str, admin_token: str, count: int) -> list[str]:
    """One token, then K concurrent Enroll calls; returns the worker credentials. The token has
    twice K uses: a retried Enroll whose first reply was lost has used one already."""
    async with grpc.aio.insecure_channel(address) as channel:
        token = await _retried(
            lambda: admin_pb2_grpc.AdminServiceStub(channel).CreateEnrollmentToken(
                admin_pb2.CreateEnrollmentTokenRequest(uses=2 * count),
                metadata=auth_metadata(admin_token),
                timeout=60,
            )
        )
        gateway = worker_pb2_grpc.WorkerGatewayStub(channel)
        slots = asyncio.Semaphore(ENROLL_IN_FLIGHT)

        async def enroll(i: int) -> str:
            request = worker_pb2.EnrollRequest(
                token=token.token, name=f"sim-{i}", labels={"bench": "simulated"}
            )
            async with slots:
                reply = await _retried(lambda: gateway.Enroll(request, timeout=60))
            return str(reply.credential)

        return list(await asyncio.gather(*(enroll(i) for i in range(count))))


async def _retried(call: Callable[[], Awaitable[T]]) -> T:
    """The call, again after each transient failure (backoff up to 10 s) for ENROLL_PATIENCE."""
    deadline = time.monotonic() + ENROLL_PATIENCE
    attempt = 0
    while True:
        try:
            return await call()
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in TRANSIENT or time.monotonic() > deadline:
                raise RuntimeError(
                    f"enrolling: {exc.code().name}: {exc.details()} (after {attempt + 1} tries)"
                ) from exc
        await asyncio.sleep(min(10.0, 0.5 * 2**attempt))
        attempt += 1


class KillArrivals:
    """When each kill switch change reached each stream; one `KILL` line once all K have it."""

    def __init__(self, count: int, emit: Callable[[str], None]) -> None:
        self.count = count
        self.emit = emit
        self.arrived: dict[tuple[str, bool], list[float]] = {}

    def record(self, kill_id: str, engaged: bool, at: float) -> None:
        times = self.arrived.setdefault((kill_id, engaged), [])
        times.append(at)
        if len(times) == self.count:
            del self.arrived[(kill_id, engaged)]
            self.emit(
                f"KILL {kill_id} {int(engaged)} first={min(times):.6f}"
                f" median={statistics.median(times):.6f} last={max(times):.6f}"
            )


class SimulatedWorker:
    """One stream: Hello, Welcome, then heartbeats and acks until cancelled."""

    def __init__(
        self,
        index: int,
        address: str,
        credential: str,
        arrivals: KillArrivals | None = None,
        reconnect: bool = False,
    ) -> None:
        self.index = index
        self.reconnect = reconnect
        self.connects = 0
        self.address = address
        self.metadata = auth_metadata(credential)
        self.welcomed = asyncio.Event()
        self.acks = 0
        self.arrivals = arrivals
        self.kills: set[str] = set()  # engaged kill switches: a real worker runs no input now
        # grpc.aio allows one write in flight per stream: receipts and heartbeats take turns.
        self.writing = asyncio.Lock()

    async def run(self) -> None:
        """One stream; with `reconnect`, a new one after each end, paced like a real worker."""
        backoff = Backoff()
        while True:
            welcomed_before = self.connects
            try:
                await self._stream()
            except (grpc.aio.AioRpcError, RuntimeError, TimeoutError):
                if not self.reconnect:
                    raise
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # we are being stopped
                # grpc.aio raises CancelledError for a call that gRPC itself cancelled (a
                # keepalive ping unanswered by a saturated coordinator, say): the stream ended.
                if not self.reconnect:
                    raise RuntimeError(f"sim-{self.index}: the stream was cancelled") from None
            if self.connects > welcomed_before:  # a stream that was welcome starts over
                backoff.reset()
            await asyncio.sleep(backoff.next_delay())

    async def _stream(self) -> None:
        async with grpc.aio.insecure_channel(self.address, options=CHANNEL_OPTIONS) as channel:
            call = worker_pb2_grpc.WorkerGatewayStub(channel).Connect(metadata=self.metadata)
            try:
                await call.write(
                    worker_pb2.WorkerMessage(
                        hello=worker_pb2.Hello(
                            advertisement=advertisement(self.index).to_proto(),
                            stream_liveness=True,
                        )
                    )
                )
                first = await asyncio.wait_for(call.read(), WELCOME_TIMEOUT)
                if first is grpc.aio.EOF or first.WhichOneof("body") != "welcome":
                    await call  # raises the stream's status if it carries one
                    raise RuntimeError(f"sim-{self.index}: no welcome")
                # Switches engaged before the connection apply at once and are acknowledged too.
                self.kills = {k.kill_id for k in first.welcome.kills}
                for kill in first.welcome.kills:
                    async with self.writing:
                        await call.write(_kill_ack(kill))
                self.connects += 1
                self.welcomed.set()
                # A coordinator with stream liveness wants no heartbeats (keepalive pings in
                # gRPC's core do their work); an older one wants them, and acks them.
                beats = asyncio.create_task(
                    self._heartbeats(call, first.welcome)
                    if not first.welcome.stream_liveness
                    else asyncio.Event().wait()
                )
                try:
                    while (message := await call.read()) is not grpc.aio.EOF:
                        kind = message.WhichOneof("body")
                        if kind == "heartbeat_ack":
                            self.acks += 1
                        elif kind == "dispatch":
                            async with self.writing:
                                await call.write(_receipt_for(message.dispatch))
                        elif kind == "kill":
                            await self._apply_kill(call, message.kill, time.time())
                    await call
                    raise RuntimeError(f"sim-{self.index}: the coordinator closed the stream")
                finally:
                    beats.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await beats
            finally:
                # Cancelling ends the stream at once, so the coordinator releases the lease.
                call.cancel()

    async def _apply_kill(
        self,
        call: grpc.aio.StreamStreamCall[worker_pb2.WorkerMessage, worker_pb2.CoordinatorMessage],
        kill: worker_pb2.KillState,
        arrived: float,
    ) -> None:
        """Apply the change, then acknowledge it at once (the arrival time is taken first)."""
        if kill.engaged:
            self.kills.add(kill.kill_id)
        else:
            self.kills.discard(kill.kill_id)
        async with self.writing:
            await call.write(_kill_ack(kill))
        if self.arrivals is not None:
            self.arrivals.record(kill.kill_id, kill.engaged, arrived)

    async def _heartbeats(
        self, call: grpc.aio.StreamStreamCall, welcome: worker_pb2.Welcome
    ) -> None:
        seq = 0
        while True:
            await asyncio.sleep(welcome.heartbeat_interval_seconds)
            seq += 1
            async with self.writing:
                await call.write(worker_pb2.WorkerMessage(heartbeat=worker_pb2.Heartbeat(seq=seq)))


def _receipt_for(d: worker_pb2.Dispatch) -> worker_pb2.WorkerMessage:
    """Answer at once, from memory: this measures the coordinator, not a worker's disk."""
    now = time.time()
    return worker_pb2.WorkerMessage(
        receipt=worker_pb2.Receipt(
            action_id=d.action_id,
            run_id=d.run_id,
            attempt_id=d.attempt_id,
            epoch=d.epoch,
            status="succeeded",
            result_json='{"echo":null}',
            started_at=now,
            finished_at=now,
        )
    )


def _kill_ack(kill: worker_pb2.KillState) -> worker_pb2.WorkerMessage:
    return worker_pb2.WorkerMessage(
        kill_ack=worker_pb2.KillAck(kill_id=kill.kill_id, engaged=kill.engaged)
    )


async def stdin_closed() -> None:
    """Returns when stdin reaches EOF (the parent closed the pipe or died)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
    )
    try:
        while await reader.read(4096):
            pass
    finally:
        transport.close()


async def main_async(args: argparse.Namespace, admin_token: str) -> None:
    started = time.perf_counter()
    credentials = await enroll_all(args.coordinator, admin_token, args.count)
    enrolled = time.perf_counter()
    arrivals = KillArrivals(args.count, lambda line: print(line, flush=True))
    workers = [
        SimulatedWorker(i, args.coordinator, c, arrivals, args.reconnect)
        for i, c in enumerate(credentials)
    ]
    tasks = [asyncio.create_task(w.run(), name=f"sim-{w.index}") for w in workers]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watchers = [asyncio.create_task(stdin_closed()), asyncio.create_task(stop.wait())]
    try:
        # Any stream failing before or after READY is fatal: counts would no longer be exact.
        welcomed = asyncio.gather(*(w.welcomed.wait() for w in workers))
        done, _ = await asyncio.wait(
            [welcomed, *tasks, *watchers], return_when=asyncio.FIRST_COMPLETED
        )
        if welcomed not in done:
            welcomed.cancel()
            for task in done:
                task.result()
            return  # stopped before everyone was welcome
        connected = time.perf_counter()
        print(
            f"TIMING enroll={enrolled - started:.3f} connect={connected - enrolled:.3f}", flush=True
        )
        print(f"READY {args.count}", flush=True)
        done, _ = await asyncio.wait([*tasks, *watchers], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()
    finally:
        for task in [*tasks, *watchers]:
            task.cancel()
        await asyncio.gather(*tasks, *watchers, return_exceptions=True)


class SimulatorProcess:
    """This script as a child process of the bench; stopped by closing its stdin."""

    def __init__(
        self, address: str, admin_token_file: Path, count: int, log: Path, reconnect: bool = False
    ) -> None:
        self.count = count
        self.log = log
        self._log_file = log.open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.simulated_workers",
                "--coordinator",
                address,
                "--admin-token-file",
                str(admin_token_file),
                "--count",
                str(count),
                *(["--reconnect"] if reconnect else []),
            ],
            # Unbuffered bytes: a buffered reader could swallow READY behind the select().
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            bufsize=0,
            cwd=ROOT,
        )

    def wait_ready(self, timeout: float) -> dict[str, float]:
        """Block until `READY K`; returns the simulator's TIMING figures."""
        assert self.proc.stdout is not None
        timings: dict[str, float] = {}
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while True:
                if not sel.select(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(
                        f"simulator (K={self.count}) not ready after {timeout:.0f} s"
                    )
                line = self.proc.stdout.readline().decode()
                if not line:
                    self.proc.wait(5)
                    raise RuntimeError(
                        f"simulator (K={self.count}) exited {self.proc.returncode}:"
                        f" {_last_line(self.log)}"
                    )
                if line.startswith("TIMING "):
                    timings = {k: float(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
                elif line.strip() == f"READY {self.count}":
                    return timings

    def wait_kill(self, kill_id: str, engaged: bool, timeout: float) -> dict[str, float]:
        """Block until the change reached all K streams; its first/median/last arrival times."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while True:
                if not sel.select(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(
                        f"kill switch {kill_id} ({'engaged' if engaged else 'released'}) did not"
                        f" reach all {self.count} simulated workers in {timeout:.0f} s"
                    )
                line = self.proc.stdout.readline().decode()
                if not line:
                    self.proc.wait(5)
                    raise RuntimeError(
                        f"simulator (K={self.count}) exited {self.proc.returncode}:"
                        f" {_last_line(self.log)}"
                    )
                words = line.split()
                if words[:3] == ["KILL", kill_id, str(int(engaged))]:
                    return {k: float(v) for k, v in (kv.split("=") for kv in words[3:])}

    def stop(self) -> None:
        """Close stdin (the simulator's stop signal), then SIGTERM, then SIGKILL."""
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        for action in (None, self.proc.terminate, self.proc.kill):
            if self.proc.poll() is not None:
                break
            if action is not None:
                action()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        self._log_file.close()


class SimulatedFleet:
    """`total` simulated workers over several simulator processes of at most `size` each,
    started `wave` processes at a time: thousands of Hellos at once leave some streams
    without a Welcome for longer than WELCOME_TIMEOUT on a two-core machine."""

    SIZE, WAVE = 500, 2

    def __init__(
        self,
        address: str,
        admin_token_file: Path,
        logs: Path,
        *,
        size: int = SIZE,
        wave: int = WAVE,
        reconnect: bool = False,
    ) -> None:
        self.address = address
        self.admin_token_file = admin_token_file
        self.logs = logs
        self.size = size
        self.wave = wave
        self.reconnect = reconnect
        self.sims: list[SimulatorProcess] = []
        self.timings: list[dict[str, float]] = []

    @property
    def count(self) -> int:
        return sum(sim.count for sim in self.sims)

    def grow(self, total: int, timeout: float) -> float:
        """Add processes until `total` workers are welcome; returns the seconds it took."""
        started = time.perf_counter()
        self.logs.mkdir(parents=True, exist_ok=True)
        while (missing := total - self.count) > 0:
            wave: list[SimulatorProcess] = []
            for _ in range(self.wave):
                count = min(self.size, missing - sum(sim.count for sim in wave))
                if count <= 0:
                    break
                log = self.logs / f"simulator-{len(self.sims) + len(wave)}.log"
                wave.append(
                    SimulatorProcess(
                        self.address, self.admin_token_file, count, log, self.reconnect
                    )
                )
            self.sims += wave  # before waiting, so that stop() ends them whatever happens
            self.timings += [sim.wait_ready(timeout) for sim in wave]
        return time.perf_counter() - started

    def wait_kill(self, kill_id: str, engaged: bool, timeout: float) -> dict[str, float]:
        """Block until the change reached every stream of every process: the first and last
        arrival times over the fleet, and the median of the processes' medians."""
        deadline = time.monotonic() + timeout
        marks = [
            sim.wait_kill(kill_id, engaged, max(0.0, deadline - time.monotonic()))
            for sim in self.sims
        ]
        return {
            "first": min(m["first"] for m in marks),
            "median": statistics.median(m["median"] for m in marks),
            "last": max(m["last"] for m in marks),
        }

    def check(self) -> None:
        """Raises when a simulator process has exited (its counts would no longer hold)."""
        for sim in self.sims:
            if sim.proc.poll() is not None:
                raise RuntimeError(
                    f"a simulator (K={sim.count}) exited {sim.proc.returncode}:"
                    f" {_last_line(sim.log)}"
                )

    def stop(self) -> None:
        for sim in self.sims:
            sim.stop()


def _last_line(path: Path) -> str:
    lines = path.read_text(errors="replace").strip().splitlines()
    return lines[-1] if lines else "(no output)"


def main() -> int:
    parser = argparse.ArgumentParser(description="K simulated workers in one process.")
    parser.add_argument("--coordinator", required=True, help="HOST:PORT")
    parser.add_argument("--admin-token-file", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument(
        "--reconnect", action="store_true", help="open a stream again when it ends, with backoff"
    )
    args = parser.parse_args()
    if args.count < 1:
        parser.error("--count must be at least 1")
    try:
        asyncio.run(main_async(args, Path(args.admin_token_file).read_text().strip()))
    except grpc.aio.AioRpcError as exc:
        print(f"simulated_workers: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    except (Exception, asyncio.CancelledError) as exc:  # one line for the bench to show
        print(f"simulated_workers: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
