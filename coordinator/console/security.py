"""What every console response and request goes through before a page handler sees it: the
security headers, the Host check, and the bound on request bodies."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
    " connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self';"
    " frame-ancestors 'none'"
)
# The console's forms are a few kilobytes at most (guidance is 4,000 characters).
MAX_BODY = 1024 * 1024


class SecurityHeaders:
    """Every response: the CSP, no sniffing, no framing, no referrer; pages are not cached."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                extra = {
                    b"content-security-policy": CSP.encode(),
                    b"x-content-type-options": b"nosniff",
                    b"x-frame-options": b"DENY",
                    b"referrer-policy": b"same-origin",
                    b"cross-origin-opener-policy": b"same-origin",
                }
                if not scope["path"].startswith("/static/"):
                    extra[b"cache-control"] = b"no-store"
                headers += [(k, v) for k, v in extra.items() if k not in names]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


def default_host_names(extra: Iterable[str] = ()) -> frozenset[str]:
    """The names the console answers to: `localhost`, this machine's names, and `extra`
    (the operator's `--host-name`). An IP address is always accepted (`host_allowed`)."""
    names = {"localhost", socket.gethostname(), socket.getfqdn(), *extra}
    return frozenset(n.strip().lower().rstrip(".") for n in names if n and n.strip())


def _host_name(header: str) -> str:
    """`Example.com:8080` -> `example.com`; `[::1]:80` -> `::1`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    name, sep, port = header.rpartition(":")
    return name.rstrip(".") if sep and port.isdigit() else header.rstrip(".")


def host_allowed(header: str, names: frozenset[str]) -> bool:
    """Whether a request's Host names this console. A page on another name that resolves to
    this console's address (DNS rebinding) sends that other name; an IP address cannot be
    rebound, so any IP address is this console's own."""
    name = _host_name(header)
    if not name:
        return False
    if name in names:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


async def _plain(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class RequestChecks:
    """Refuse, before any handler runs, a request whose Host is not one of the console's names
    (400) and a body over MAX_BODY or of unknown length (413, 411)."""

    def __init__(self, app: ASGIApp, names: frozenset[str], max_body: int = MAX_BODY) -> None:
        self.app = app
        self.names = names
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        host = headers.get(b"host", b"").decode("latin-1")
        if not host_allowed(host, self.names):
            shown = "".join(c if c.isprintable() else "?" for c in host[:100])
            await _plain(
                send,
                400,
                f"refused: this console does not answer to the name {shown!r}; an operator adds"
                " names with --host-name\n",
            )
            return
        length = headers.get(b"content-length")
        if scope["method"] in ("POST", "PUT", "PATCH"):
            if length is None or b"transfer-encoding" in headers:
                await _plain(send, 411, "refused: a request body needs a Content-Length\n")
                return
            if not length.isdigit() or int(length) > self.max_body:
                await _plain(
                    send, 413, f"refused: a request body is at most {self.max_body} bytes\n"
                )
                return
        await self.app(scope, receive, send)
