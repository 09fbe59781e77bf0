"""`deskfleet-coordinator console`: serve the web console with uvicorn on one socket."""

from __future__ import annotations

import asyncio
import socket
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


def serve(options: ConsoleOptions) -> None:
    check(options)
    tls = options.tls_cert is not None
    settings = ConsoleSettings(
        coordinator=ClientConfig(options.coordinator, None, options.ca_file),
        session_ttl=options.session_ttl,
        secure_cookies=tls,
    )
    sock = _bind(options.listen)
    host, port = sock.getsockname()[:2]
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
    server = uvicorn.Server(config)
    scheme = "https" if tls else "http"
    shown = f"[{host}]" if ":" in host else host
    print(f"console listening on {scheme}://{shown}:{port}", flush=True)
    asyncio.run(server.serve(sockets=[sock]))
