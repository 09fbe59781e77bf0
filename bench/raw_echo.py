"""The baseline for a round trip: raw grpc.aio, client -> relay -> echo -> relay -> client.

Run as `raw_echo.py` in its own process: it serves an echo server and a relay on loopback and
prints `PORT <relay port>`. The relay forwards each unary call over one long-lived bidi
stream to the echo server, as the coordinator forwards an action to a worker's stream.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import grpc

IDENTITY = (lambda b: b, lambda b: b)


async def main() -> None:
    echo = grpc.aio.server()

    async def echo_stream(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        async for message in requests:
            yield message

    echo.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "raw.Echo",
                {"Stream": grpc.stream_stream_rpc_method_handler(echo_stream, *IDENTITY)},
            )
        ]
    )
    echo_port = echo.add_insecure_port("127.0.0.1:0")
    await echo.start()

    channel = grpc.aio.insecure_channel(f"127.0.0.1:{echo_port}")
    stream = channel.stream_stream("/raw.Echo/Stream", *IDENTITY)()
    waiting: asyncio.Queue[asyncio.Future[bytes]] = asyncio.Queue()
    lock = asyncio.Lock()

    async def reader() -> None:
        while (message := await stream.read()) is not grpc.aio.EOF:
            (await waiting.get()).set_result(message)

    reading = asyncio.create_task(reader())

    async def relay(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        async with lock:  # replies come back in order on the one stream
            await waiting.put(future)
            await stream.write(request)
        return await future

    front = grpc.aio.server()
    front.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "raw.Relay", {"Call": grpc.unary_unary_rpc_method_handler(relay, *IDENTITY)}
            )
        ]
    )
    port = front.add_insecure_port("127.0.0.1:0")
    await front.start()
    print(f"PORT {port}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    reading.cancel()
    stream.cancel()
    await channel.close()
    await front.stop(0)
    await echo.stop(0)


if __name__ == "__main__":
    asyncio.run(main())
