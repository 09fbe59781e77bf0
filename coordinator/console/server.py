"""`deskfleet-coordinator console`: serve the web console with uvicorn on one socket."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from coordinator.console.app import asgi
from coordinator.console.connections import ConnectionLimits, protocol_class
from coordinator.console.limits import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_PER_CLIENT,
    DEFAULT_REQUEST_TIMEOUT,
)
from coordinator.console.pages import ConsoleSettings
from coordinator.console.security import default_host_names
from shared.config import ClientConfig
from shared.errors import InvalidArgumentError
from shared.transport import is_loopback


@dataclass(frozen=True)
class ConsoleOptions:
    coordinator: str
    listen: str
    ca_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    plaintext: bool = False
    session_ttl: float = 8 * 3600.0
    host_names: tuple[str, ...] = ()  # names the Host header may carry beyond the defaults
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_client: int = DEFAULT_MAX_PER_CLIENT
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT

    def settings(self, coordinator: ClientConfig, tls_name: str = "") -> ConsoleSettings:
        listen_host = self.listen.rpartition(":")[0].strip("[]")
        return ConsoleSettings(
            coordinator=coordinator,
            session_ttl=self.session_ttl,
            secure_cookies=self.tls_cert is not None,
            tls_name=tls_name,
            host_names=default_host_names((*self.host_names, listen_host)),
        )


def _bind(listen: str) -> socket.socket:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise InvalidArgumentError(f"--listen {listen!r}: expected HOST:PORT")
    host = host.strip("[]") or "127.0.0.1"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, int(port)))
    except OSError as exc:
        sock.close()
        raise InvalidArgumentError(f"--listen {listen}: {exc.strerror or exc}") from exc
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def check(options: ConsoleOptions) -> None:
    if (options.tls_cert is None) != (options.tls_key is None):
        raise InvalidArgumentError("--tls-cert and --tls-key go together")
    tls = options.tls_cert is not None
    if not tls and not is_loopback(options.listen) and not options.plaintext:
        raise InvalidArgumentError(
            f"--listen {options.listen} is not loopback: serve the console over TLS"
            " (--tls-cert/--tls-key) so that tokens and session cookies are not sent in the"
            " clear, or pass --plaintext"
        )
    if options.session_ttl <= 0:
        raise InvalidArgumentError("--session-ttl must be positive")
    if options.max_connections < 1 or options.max_connections_per_client < 1:
        raise InvalidArgumentError("--max-connections and --max-connections-per-client: 1 or more")
    if not options.request_timeout > 0:
        raise InvalidArgumentError("--request-timeout must be positive")
    for name in options.host_names:
        if not name.strip() or any(c in name for c in "/: \t") or len(name) > 253:
            raise InvalidArgumentError(f"--host-name {name!r}: a DNS name, without port or scheme")


def _server(
    options: ConsoleOptions, settings: ConsoleSettings
) -> tuple[uvicorn.Config, socket.socket]:
    sock = _bind(options.listen)
    limits = ConnectionLimits(
        max_connections=options.max_connections,
        max_per_client=options.max_connections_per_client,
        request_timeout=options.request_timeout,
    )
    config = uvicorn.Config(
        asgi(settings),
        http=protocol_class(limits),
        log_level="warning",
        access_log=False,
        proxy_headers=False,
        server_header=False,
        ssl_certfile=str(options.tls_cert) if options.tls_cert else None,
        ssl_keyfile=str(options.tls_key) if options.tls_key else None,
        timeout_graceful_shutdown=2,
    )
    return config, sock


def _url(options: ConsoleOptions, sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    scheme = "https" if options.tls_cert is not None else "http"
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}"


def serve(options: ConsoleOptions) -> None:
    check(options)
    settings = options.settings(ClientConfig(options.coordinator, None, options.ca_file))
    config, sock = _server(options, settings)
    print(f"console listening on {_url(options, sock)}", flush=True)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


class _Beside(uvicorn.Server):
    """The console inside the coordinator's process: the coordinator's own signal handlers
    stop it (uvicorn's would replace them)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.up = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.up.set()


@dataclass
class Embedded:
    server: _Beside
    task: asyncio.Task[None]
    url: str

    async def stop(self) -> None:
        self.server.should_exit = True
        await self.task


async def start_beside(options: ConsoleOptions, *, tls_name: str = "") -> Embedded:
    """`serve --console-listen`: the console on this event loop, calling the coordinator's own
    API address like any client, so the guard still decides every request."""
    check(options)
    settings = options.settings(ClientConfig(options.coordinator, None, options.ca_file), tls_name)
    config, sock = _server(options, settings)
    beside = _Beside(config)
    task = asyncio.create_task(beside.serve(sockets=[sock]))
    up = asyncio.create_task(beside.up.wait())
    await asyncio.wait((task, up), return_when=asyncio.FIRST_COMPLETED)
    if not up.done():
        up.cancel()
        task.result()  # its error, raised here
        raise InvalidArgumentError(f"--console-listen {options.listen}: the console stopped")
    return Embedded(beside, task, _url(options, sock))
