"""The console's HTTP connections, bounded: how many are open, per client and in all, and how
long a request may take to arrive.

uvicorn closes a keep-alive connection that is idle, but waits forever for a request whose
head (or body) trickles in a byte at a time, and takes every connection offered: a few hundred
such sockets would hold the file descriptors of the coordinator the console is embedded in.
`protocol_class` is uvicorn's h11 protocol with three rules added:

- at most `max_connections` open, and `max_per_client` from one address; a connection over
  either is answered 503 and closed at once;
- a request (head and body) must have arrived `request_timeout` seconds after the connection
  opened or the previous response ended, or the connection is closed;
- once a request has arrived, its response may take as long as it needs: the live streams
  (`/events`) are not cut, and send keepalives of their own.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.utils import get_remote_addr

from coordinator.console.limits import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_PER_CLIENT,
    DEFAULT_REQUEST_TIMEOUT,
)

log = logging.getLogger(__name__)


_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
)


@dataclass
class ConnectionLimits:
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_per_client: int = DEFAULT_MAX_PER_CLIENT
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    open_by_client: Counter[str] = field(default_factory=Counter)
    refused: int = 0  # connections answered 503 at once
    timed_out: int = 0  # connections closed because their request did not arrive in time

    @property
    def open(self) -> int:
        return sum(self.open_by_client.values())


def _busy(text: str) -> bytes:
    body = text.encode()
    return _BUSY % (len(body), body)


def protocol_class(limits: ConnectionLimits) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol under `limits` (pass it as `uvicorn.Config(http=...)`)."""

    class Bounded(H11Protocol):
        _client = ""
        _refused = False
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            address = get_remote_addr(transport)
            client = address[0] if address else ""
            why = ""
            if limits.open >= limits.max_connections:
                why = f"the console has {limits.max_connections} connections open (its limit)"
            elif limits.open_by_client[client] >= limits.max_per_client:
                why = f"{limits.max_per_client} connections from {client} are open (the limit)"
            if why:
                self._refused = True
                limits.refused += 1
                if limits.refused in (1, 100) or limits.refused % 10_000 == 0:
                    log.warning("console connection refused: %s (%d so far)", why, limits.refused)
                transport.write(_busy(f"busy: {why}; try again shortly\n"))
                transport.close()
                return
            self._client = client
            limits.open_by_client[client] += 1
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if not self._refused:
                super().data_received(data)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._refused:
                return
            self._disarm()
            limits.open_by_client[self._client] -= 1
            if limits.open_by_client[self._client] <= 0:
                del limits.open_by_client[self._client]
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(limits.request_timeout, self._expired, self.cycle)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self, cycle_then: Any) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            cycle = self.cycle
            waiting_for_head = cycle is cycle_then  # no request began since the timer was set
            body_unfinished = cycle is not None and not cycle.response_complete and cycle.more_body
            if waiting_for_head or body_unfinished:
                limits.timed_out += 1
                self.transport.close()

    return Bounded
