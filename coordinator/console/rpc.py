"""The console's one asyncio channel to the coordinator; every call carries a user's token.

The console holds no authority of its own: it sends the signed-in user's token (as the CLI
does, `shared.credentials.auth_metadata`) and the coordinator's guard decides.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from coordinator.admin_cli.client import CHANNEL_OPTIONS, channel_credentials
from shared.config import ClientConfig
from shared.credentials import CONSOLE_CLIENT_KEY, auth_metadata
from shared.errors import from_rpc_error
from shared.gen.deskfleet.v1 import (
    admin_pb2_grpc,
    desktop_pb2_grpc,
    fleet_pb2_grpc,
    runs_pb2,
    runs_pb2_grpc,
)
from shared.tracing import METADATA_KEY, TraceParent

Response = TypeVar("Response")

# The address of the browser the current request came from (set per request by the app).
browser_address: contextvars.ContextVar[str] = contextvars.ContextVar("browser", default="")


class ConsoleClient:
    def __init__(self, config: ClientConfig, *, timeout: float = 10.0, tls_name: str = "") -> None:
        self.config = config
        self.timeout = timeout
        credentials = channel_credentials(config)
        if credentials is not None:
            named = [("grpc.ssl_target_name_override", tls_name)] if tls_name else []
            self._channel = grpc.aio.secure_channel(
                config.coordinator, credentials, options=[*CHANNEL_OPTIONS, *named]
            )
        else:
            self._channel = grpc.aio.insecure_channel(config.coordinator, options=CHANNEL_OPTIONS)
        self.admin = admin_pb2_grpc.AdminServiceStub(self._channel)
        self.fleet = fleet_pb2_grpc.FleetServiceStub(self._channel)
        self.runs = runs_pb2_grpc.RunServiceStub(self._channel)
        self.journal = runs_pb2_grpc.JournalServiceStub(self._channel)
        self.desktop = desktop_pb2_grpc.DesktopServiceStub(self._channel)
        self.approvals = desktop_pb2_grpc.ApprovalServiceStub(self._channel)
        self.kills = desktop_pb2_grpc.KillSwitchServiceStub(self._channel)

    async def close(self) -> None:
        await self._channel.close()

    @staticmethod
    def metadata(token: str) -> tuple[tuple[str, str], ...]:
        # One trace per page: the coordinator's spans of one request share a parent.
        traced = (*auth_metadata(token), (METADATA_KEY, TraceParent.new().header()))
        browser = browser_address.get()
        return (*traced, (CONSOLE_CLIENT_KEY, browser)) if browser else traced

    async def call(
        self,
        token: str,
        method: Callable[..., Awaitable[Response]],
        request: Any,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (the gRPC deadline of this call)
    ) -> Response:
        try:
            return await method(
                request, metadata=self.metadata(token), timeout=timeout or self.timeout
            )
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, self.config.coordinator) from exc

    async def journal_page(
        self, token: str, run_id: str, after_seq: int, limit: int
    ) -> list[runs_pb2.JournalEvent]:
        """Up to `limit` journal events after `after_seq` (history only, no following)."""
        events: list[runs_pb2.JournalEvent] = []
        call = self.runs.WatchRun(
            runs_pb2.WatchRunRequest(id=run_id, after_seq=after_seq, follow=False),
            metadata=self.metadata(token),
            timeout=self.timeout,
        )
        try:
            async for event in call:
                events.append(event)
                if len(events) >= limit:
                    break
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, self.config.coordinator) from exc
        finally:
            call.cancel()
        return events

    async def events_of(
        self, token: str, run_id: str, kinds: tuple[str, ...]
    ) -> list[runs_pb2.JournalEvent]:
        """Every journal event of these kinds, oldest first (the whole history is read)."""
        call = self.runs.WatchRun(
            runs_pb2.WatchRunRequest(id=run_id, after_seq=0, follow=False),
            metadata=self.metadata(token),
            timeout=self.timeout,
        )
        try:
            return [event async for event in call if event.kind in kinds]
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, self.config.coordinator) from exc

    async def entry_text(self, token: str, run_id: str, seq: int) -> str:
        """A journal entry's whole original text (an archived receipt's, page by page)."""
        parts: list[str] = []
        offset = 0
        while offset >= 0:
            page = await self.call(
                token,
                self.journal.ReadEntry,
                runs_pb2.ReadEntryRequest(run_id=run_id, seq=seq, offset=offset, limit=65536),
            )
            parts.append(page.text)
            offset = page.next_offset if page.next_offset > offset else -1
        return "".join(parts)
