"""`runs watch` and the client library's `RunHandle.watch` against what a hostile or broken
coordinator does, and against numbers nobody should type: a stream that keeps replaying old
events and dropping ends after the reconnect window (each replay restarted the window, so the
watch reconnected forever), a `reconnect_for` of NaN or infinity is refused (NaN compared false
with every deadline and reconnected forever), an `--after-seq` the wire cannot carry is one
line instead of a traceback, and a coordinator gone silent (a host without power: no FIN, no
RST) is found by keepalive pings where a quiet run's watch waited for it forever. A real gRPC
server on loopback plays the coordinator."""

from __future__ import annotations

import asyncio
import math
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

import deskfleet
from shared.gen.deskfleet.v1 import runs_pb2, runs_pb2_grpc
from tests.harness.cli import run_in_process
from tests.harness.processes import BIN, base_env

RUN = "run_01m971y1dh6fvwra3dg13jh9xt"


class Replaying(runs_pb2_grpc.RunServiceServicer):
    """Accepts every watch, sends an event the watcher has already seen, then drops it."""

    def __init__(self) -> None:
        self.calls = 0

    async def WatchRun(
        self, request: runs_pb2.WatchRunRequest, context: Any
    ) -> AsyncIterator[runs_pb2.JournalEvent]:
        self.calls += 1
        if request.after_seq > 0:
            yield runs_pb2.JournalEvent(seq=request.after_seq, kind="run.submitted")
        await context.abort(grpc.StatusCode.UNAVAILABLE, "going away")


class Quiet(Replaying):
    """A run's watch that sends its history (one event) and then nothing: a quiet run."""

    async def WatchRun(
        self, request: runs_pb2.WatchRunRequest, context: Any
    ) -> AsyncIterator[runs_pb2.JournalEvent]:
        self.calls += 1
        if request.after_seq < 1:
            yield runs_pb2.JournalEvent(seq=1, kind="run.submitted")
        await asyncio.sleep(3600)


class FreezingRelay:
    """A loopback relay to `port` that can go silent, as a coordinator's host does when it
    loses power or its network: nothing is closed, nothing more arrives, and new connections
    are refused."""

    def __init__(self, port: int) -> None:
        self.port_to = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.frozen = threading.Event()
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.port_to))
            self.held += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self.frozen.is_set() and (data := src.recv(65536)):
                if not self.frozen.is_set():
                    dst.sendall(data)
        except OSError:
            pass

    def freeze(self) -> None:
        self.frozen.set()
        # A reconnection is refused at once; shutdown() first, or the listener a thread
        # blocks in accept() on stays open.
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()

    def close(self) -> None:
        for conn in self.held:
            conn.close()


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Replaying]]:
    """The server on a loop of its own thread: the watching client runs on the test's."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    servicer = Replaying()

    async def start() -> tuple[grpc.aio.Server, int]:
        srv = grpc.aio.server()
        runs_pb2_grpc.add_RunServiceServicer_to_server(servicer, srv)
        port = srv.add_insecure_port("127.0.0.1:0")
        await srv.start()
        return srv, port

    srv, port = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        asyncio.run_coroutine_threadsafe(srv.stop(None), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def _watch(address: str, servicer: Replaying, **kwargs: Any) -> list[int]:
    fleet = await deskfleet.AsyncClient.connect(address, token="dfa_test")
    async with fleet:
        return [e.seq async for e in fleet.run(RUN).watch(**kwargs)]


def test_a_stream_that_replays_and_drops_ends_after_the_window(
    server: tuple[str, Replaying], tmp_path: Path
) -> None:
    address, servicer = server
    servicer.calls = 0
    env = base_env(tmp_path) | {"DESKFLEET_COORDINATOR": address}
    token = tmp_path / "t"
    token.write_text("dfa_test\n")
    env["DESKFLEET_TOKEN_FILE"] = str(token)
    started = time.monotonic()
    done = run_in_process(
        [str(BIN / "deskfleet"), "runs", "watch", RUN, "--after-seq", "7", "--reconnect-for", "2"],
        env,
        None,
        30,
    )
    took = time.monotonic() - started
    assert done.returncode == 5, done.stderr
    assert took < 10, took
    assert 2 <= servicer.calls <= 8, servicer.calls  # paused between tries, never a spin
    assert done.stderr.splitlines()[-1].endswith(
        f"resume with: deskfleet runs watch {RUN} --after-seq 7"
    ), done.stderr


def test_the_library_gives_up_on_the_replaying_stream_too(server: tuple[str, Replaying]) -> None:
    address, servicer = server

    async def watch() -> None:
        await asyncio.wait_for(_watch(address, servicer, after_seq=3, reconnect_for=1.0), 10)

    with pytest.raises(deskfleet.WatchLostError) as lost:
        asyncio.run(watch())
    assert lost.value.last_seq == 3


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_the_library_refuses_a_window_that_never_ends(
    server: tuple[str, Replaying], value: float
) -> None:
    address, servicer = server
    with pytest.raises(ValueError, match="reconnect_for: a finite number of seconds"):
        asyncio.run(asyncio.wait_for(_watch(address, servicer, reconnect_for=value), 10))


WINDOW = "--reconnect-for must be 0 or more seconds (a finite number)"
SEQ = "--after-seq must be from 0 to 2147483647"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--reconnect-for", "nan"), WINDOW),
        (("--reconnect-for", "inf"), WINDOW),
        (("--reconnect-for", "1e400"), WINDOW),
        (("--reconnect-for", "-1"), WINDOW),
        (("--after-seq", "99999999999"), SEQ),
        (("--after-seq", "-1"), SEQ),
    ],
)
def test_numbers_the_watch_cannot_use_are_one_line(
    server: tuple[str, Replaying], tmp_path: Path, args: tuple[str, str], said: str
) -> None:
    address, servicer = server
    servicer.calls = 0
    token = tmp_path / "t"
    token.write_text("dfa_test\n")
    env = base_env(tmp_path) | {
        "DESKFLEET_COORDINATOR": address,
        "DESKFLEET_TOKEN_FILE": str(token),
    }
    done = run_in_process([str(BIN / "deskfleet"), "runs", "watch", RUN, *args], env, None, 30)
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"deskfleet: {said}\n"
    assert servicer.calls == 0


@pytest.mark.slow  # 15 s of keepalive before the silence is known
def test_a_coordinator_gone_silent_is_found_and_the_watch_gives_up() -> None:
    """No FIN, no RST: a watch of a quiet run heard nothing either way and waited forever.
    The client's keepalive pings find the silent peer, then the reconnect window runs."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    servicer = Quiet()

    async def start() -> tuple[grpc.aio.Server, int]:
        srv = grpc.aio.server()
        runs_pb2_grpc.add_RunServiceServicer_to_server(servicer, srv)
        port = srv.add_insecure_port("127.0.0.1:0")
        await srv.start()
        return srv, port

    srv, port = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    relay = FreezingRelay(port)
    seen: list[int] = []

    async def watch() -> None:
        fleet = await deskfleet.AsyncClient.connect(f"127.0.0.1:{relay.port}", token="dfa_t")
        async with fleet:
            async for event in fleet.run(RUN).watch(reconnect_for=1.0):
                seen.append(event.seq)
                relay.freeze()

    try:
        started = time.monotonic()
        with pytest.raises(deskfleet.WatchLostError) as lost:
            asyncio.run(asyncio.wait_for(watch(), 60))
        took = time.monotonic() - started
        assert seen == [1]
        assert lost.value.last_seq == 1
        assert took < 30, took
    finally:
        relay.close()
        asyncio.run_coroutine_threadsafe(srv.stop(None), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
