"""One asyncio channel to a coordinator, its credential, and the mapping of failed calls to
the error tree. Every RPC the client makes goes through `unary` or `stream` here.

Their `timeout` is the gRPC deadline the call carries to the coordinator, not a local wait.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import grpc
import grpc.aio

from shared.config import ClientConfig, check_address
from shared.credentials import auth_metadata
from shared.errors import StoreUnavailableError, UnavailableError, from_rpc_error
from shared.gen.deskfleet.v1 import desktop_pb2_grpc, fleet_pb2_grpc, runs_pb2_grpc
from shared.tracing import METADATA_KEY, TraceParent
from shared.transport import is_loopback, plaintext_warning

log = logging.getLogger("deskfleet")
Reply = TypeVar("Reply")
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    # A coordinator whose host lost power or its network sends no FIN: without pings, a watch
    # of a quiet run (nothing to send, nothing to hear) waited for it forever. Pinged, its
    # loss is seen within 15 s and the watch's reconnect window runs. The coordinator
    # accepts pings this often (it pings workers as often; app/server.py).
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.ping_timeout_ms", 5_000),
    ("grpc.http2.max_pings_without_data", 0),
]
CONNECT_TIMEOUT = 10.0
CALL_TIMEOUT = 30.0
# A send that names itself (a guidance message id) and whose answer was lost is repeated
# after each of these pauses (seconds): 15 s in all, time for a coordinator to restart.
REPEAT_PAUSES = (1.0, 2.0, 4.0, 8.0)


def resolve(
    address: str | None, token: str | None, token_file: str | None, ca_file: str | None
) -> tuple[ClientConfig, str]:
    """Address, CA and credential as the CLI finds them: the arguments, then
    DESKFLEET_COORDINATOR / DESKFLEET_TOKEN_FILE / DESKFLEET_CA_FILE, then the CLI's config
    file. A token given as a string wins over every file."""
    config = ClientConfig.resolve(address, token_file, ca_file)
    if address:
        check_address(address, "address")
    secret = token.strip() if token is not None else config.read_token()
    return config, secret


class Connection:
    """The channel, the stubs and the metadata every call carries (the credential and one
    trace per client, so a program's calls show as one trace at the coordinator)."""

    def __init__(
        self,
        config: ClientConfig,
        token: str,
        *,
        timeout: float = CALL_TIMEOUT,
        traceparent: TraceParent | None = None,
    ) -> None:
        self.target = config.coordinator
        self.timeout = timeout
        ca = config.read_ca()
        if ca is not None:
            self.channel = grpc.aio.secure_channel(
                config.coordinator, grpc.ssl_channel_credentials(ca), options=CHANNEL_OPTIONS
            )
        else:
            if not is_loopback(config.coordinator):
                log.warning(plaintext_warning(config.coordinator))
            self.channel = grpc.aio.insecure_channel(config.coordinator, options=CHANNEL_OPTIONS)
        trace = (traceparent or TraceParent.new()).header()
        self.metadata = (*auth_metadata(token), (METADATA_KEY, trace))
        self.fleet = fleet_pb2_grpc.FleetServiceStub(self.channel)
        self.runs = runs_pb2_grpc.RunServiceStub(self.channel)
        self.journal = runs_pb2_grpc.JournalServiceStub(self.channel)
        self.desktop = desktop_pb2_grpc.DesktopServiceStub(self.channel)
        self.approvals = desktop_pb2_grpc.ApprovalServiceStub(self.channel)

    async def ready(self, timeout: float = CONNECT_TIMEOUT) -> None:  # noqa: ASYNC109
        try:
            await asyncio.wait_for(self.channel.channel_ready(), timeout)
        except TimeoutError:
            raise UnavailableError(
                f"cannot reach the coordinator at {self.target}: no connection in {timeout:g} s"
            ) from None

    async def unary(
        self,
        method: Callable[..., Any],
        request: Any,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> Any:
        try:
            return await method(request, metadata=self.metadata, timeout=timeout or self.timeout)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, self.target) from exc

    async def repeatable(self, method: Callable[..., Any], request: Any) -> Any:
        """`unary` for a request that names itself: one whose answer was lost (the
        coordinator unreachable or silent) is sent again, the same request, so the
        coordinator answers the one it already took."""
        for pause in REPEAT_PAUSES:
            try:
                return await self.unary(method, request)
            except StoreUnavailableError:
                raise  # the coordinator answered: its store is down
            except UnavailableError as exc:
                log.warning("%s; sending the same request again in %g s", exc, pause)
                await asyncio.sleep(pause)
        return await self.unary(method, request)

    async def stream(
        self,
        method: Callable[..., Any],
        request: Any,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> AsyncIterator[Any]:
        call = method(request, metadata=self.metadata, timeout=timeout)
        try:
            async for item in call:
                yield item
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, self.target) from exc
        finally:
            call.cancel()

    async def close(self) -> None:
        await self.channel.close()
