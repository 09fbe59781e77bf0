"""`deskfleet-coordinator console`: serve the web console with uvicorn on one socket."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from coordinator.console.app import ConsoleSettings, asgi
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


def _server(
    options: ConsoleOptions, settings: ConsoleSettings
) -> tuple[uvicorn.Config, socket.socket]:
    sock = _bind(options.listen)
    config = uvicorn.Config(
        asgi(settings),
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
    settings = ConsoleSettings(
        coordinator=ClientConfig(options.coordinator, None, options.ca_file),
        session_ttl=options.session_ttl,
        secure_cookies=options.tls_cert is not None,
    )
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
    settings = ConsoleSettings(
        coordinator=ClientConfig(options.coordinator, None, options.ca_file),
        session_ttl=options.session_ttl,
        secure_cookies=options.tls_cert is not None,
        tls_name=tls_name,
    )
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
