"""The floor under the kill switch: a bare grpc.aio server pushes one message to N open streams
and reads N acks back, nothing else (no store, no auth, no heartbeats).

  server   this process: N bidi streams, one writer task and one reader per stream, as the
           coordinator's WorkerGateway; a push queues the same bytes on every stream
  clients  a child process with N channels (one per stream, as N workers), each answering a
           push with an ack at once
  figure   push queued -> all N acks read by the server, over C pushes

Usage: python -m bench.raw_fanout [--streams N] [--pushes C] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import grpc

from bench.stats import summary

ROOT = Path(__file__).resolve().parent.parent

IDENTITY = (lambda b: b, lambda b: b)
PUSH = b"k" * 96  # about the size of a serialized KillState


async def clients(port: int, n: int) -> None:
    """The child: N channels, each one stream that acks every push."""

    async def one() -> None:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.stream_stream("/raw.Fanout/Connect", *IDENTITY)()
            await call.write(b"hello")
            while await call.read() is not grpc.aio.EOF:
                await call.write(b"ack")

    await asyncio.gather(*(one() for _ in range(n)))


async def serve(n: int, pushes: int) -> list[float]:
    outboxes: list[asyncio.Queue[bytes]] = []
    connected = asyncio.Event()
    acks = 0
    all_acked = asyncio.Event()

    async def connect(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        nonlocal acks
        outbox: asyncio.Queue[bytes] = asyncio.Queue()
        await context.read()  # hello
        outboxes.append(outbox)
        if len(outboxes) == n:
            connected.set()

        async def write() -> None:
            while True:
                await context.write(await outbox.get())

        writer = asyncio.create_task(write())
        try:
            while await context.read() is not grpc.aio.EOF:
                acks += 1
                if acks == n:
                    all_acked.set()
        finally:
            writer.cancel()

    server = grpc.aio.server(options=[("grpc.max_concurrent_streams", 1 << 20)])
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "raw.Fanout", {"Connect": grpc.stream_stream_rpc_method_handler(connect, *IDENTITY)}
            )
        ]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.raw_fanout",
        "--client",
        str(port),
        "--streams",
        str(n),
        stdout=asyncio.subprocess.DEVNULL,
        cwd=ROOT,  # where `-m bench.raw_fanout` finds the package
    )
    try:
        await asyncio.wait_for(connected.wait(), 120)
        await asyncio.sleep(0.5)
        times = []
        for _ in range(pushes + 2):
            acks = 0
            all_acked.clear()
            started = time.perf_counter()
            for outbox in outboxes:
                outbox.put_nowait(PUSH)
            await asyncio.wait_for(all_acked.wait(), 30)
            times.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.05)
        return times[2:]  # the first two warm the streams up
    finally:
        child.terminate()
        await child.wait()
        await server.stop(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--pushes", type=int, default=20)
    parser.add_argument("--client", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.client:
        asyncio.run(clients(args.client, args.streams))
        return 0
    times = asyncio.run(serve(args.streams, args.pushes))
    doc = {"streams": args.streams, "pushes": args.pushes, "push_to_all_acked": summary(times)}
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        s = doc["push_to_all_acked"]
        print(
            f"bare grpc.aio: push to {args.streams} streams -> all acks read:"
            f" p50 {s['p50_ms']:.1f} / p99 {s['p99_ms']:.1f} ms over {args.pushes} pushes"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
