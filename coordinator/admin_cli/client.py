"""A blocking gRPC client of the coordinator for the CLI; failed calls become DeskfleetError."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

import deskfleet
from shared.config import ClientConfig
from shared.credentials import auth_metadata
from shared.errors import StoreUnavailableError, UnavailableError, from_rpc_error
from shared.gen.deskfleet.v1 import (
    admin_pb2_grpc,
    desktop_pb2_grpc,
    fleet_pb2_grpc,
    runs_pb2_grpc,
    worker_pb2_grpc,
)
from shared.tracing import METADATA_KEY, TraceParent
from shared.transport import is_loopback, plaintext_warning

Response = TypeVar("Response")
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
# A send whose answer was lost is repeated after each of these pauses (seconds): 15 s in all,
# time for a coordinator to restart.
REPEAT_PAUSES = (1.0, 2.0, 4.0, 8.0)


def channel_credentials(config: ClientConfig) -> grpc.ChannelCredentials | None:
    """TLS verified against the configured CA, or None for plaintext (warned beyond loopback).

    Shared by the CLI's blocking channel and the console's asyncio channel.
    """
    ca = config.read_ca()
    if ca is not None:
        return grpc.ssl_channel_credentials(ca)
    if not is_loopback(config.coordinator):
        # Loopback stays silent: nothing leaves the machine, and tests match stderr.
        print(f"deskfleet: {plaintext_warning(config.coordinator)}", file=sys.stderr)
    return None


class CoordinatorClient:
    def __init__(
        self,
        config: ClientConfig,
        *,
        timeout: float = 10.0,
        traceparent: TraceParent | None = None,
    ) -> None:
        self.config = config
        self.timeout = timeout
        # One trace per command: every call of it carries the same parent span.
        self.traceparent = traceparent or TraceParent.new()
        self._trace = ((METADATA_KEY, self.traceparent.header()),)
        self._fleet_client: deskfleet.Client | None = None
        credentials = channel_credentials(config)
        if credentials is not None:
            self._channel = grpc.secure_channel(
                config.coordinator, credentials, options=CHANNEL_OPTIONS
            )
        else:
            self._channel = grpc.insecure_channel(config.coordinator, options=CHANNEL_OPTIONS)
        self.admin = admin_pb2_grpc.AdminServiceStub(self._channel)
        self.fleet = fleet_pb2_grpc.FleetServiceStub(self._channel)
        self.gateway = worker_pb2_grpc.WorkerGatewayStub(self._channel)
        self.runs = runs_pb2_grpc.RunServiceStub(self._channel)
        self.journal = runs_pb2_grpc.JournalServiceStub(self._channel)
        self.desktop = desktop_pb2_grpc.DesktopServiceStub(self._channel)
        self.approvals = desktop_pb2_grpc.ApprovalServiceStub(self._channel)
        self.kills = desktop_pb2_grpc.KillSwitchServiceStub(self._channel)
        self._metadata: tuple[tuple[str, str], ...] | None = None

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fleet_client is not None:
            self._fleet_client.close()
        self._channel.close()

    @property
    def fleet_client(self) -> deskfleet.Client:
        """The `deskfleet` client library on the same coordinator, credential and trace: the
        commands it covers (status, research, plans, watch, guidance, desktop sessions) go
        through it, so the CLI and a program using the library behave alike."""
        if self._fleet_client is None:
            self._fleet_client = deskfleet.Client.from_config(
                self.config,
                token=self.config.read_token(),
                timeout=self.timeout,
                traceparent=self.traceparent,
            )
        return self._fleet_client

    def metadata(self) -> tuple[tuple[str, str], ...]:
        if self._metadata is None:
            self._metadata = auth_metadata(self.config.read_token()) + self._trace
        return self._metadata

    def call(
        self,
        method: Callable[..., Response],
        request: Any,
        *,
        authenticated: bool = True,
        timeout: float | None = None,
    ) -> Response:
        metadata = self.metadata() if authenticated else self._trace
        try:
            return method(request, metadata=metadata, timeout=timeout or self.timeout)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, self.config.coordinator) from exc

    def call_repeatable(self, method: Callable[..., Response], request: Any) -> Response:
        """`call` for a request that names itself (a message id): one whose answer was lost
        (the coordinator unreachable, or silent past the deadline) is sent again, as the same
        request, so that the coordinator answers the one it already took."""
        for pause in REPEAT_PAUSES:
            try:
                return self.call(method, request)
            except StoreUnavailableError:
                raise  # the coordinator answered: its store is down, saying it again won't help
            except UnavailableError as exc:
                print(f"{exc}; sending the same request again in {pause:g} s", file=sys.stderr)
                time.sleep(pause)
        return self.call(method, request)
