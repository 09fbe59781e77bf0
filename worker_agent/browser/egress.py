"""The browser's only way out: a filtering forward proxy on loopback, one per browser context.

Chromium is launched and each context is created with this proxy as its fixed proxy server,
with loopback no longer bypassed (`<-loopback>`), QUIC off and non-proxied UDP (WebRTC)
disabled, and its own host resolver mapped to nothing: every connection a page, frame,
worker, WebSocket, prefetch or beacon opens arrives here as an HTTP `CONNECT host:port` (https,
wss) or an absolute-form request (http). The guard then

1. takes the host exactly as Chromium canonicalized it (so `%31%32%37.0.0.1`, `0x7f.1` or
   `127.0.0.1\\@x` are already 127.0.0.1, the address the browser would have used),
2. checks the port and the policy's allowed and denied domains,
3. resolves the name once (an unresolvable name is refused),
4. refuses if any resolved address is loopback, private, link-local, shared (CGNAT),
   multicast, unspecified or otherwise not globally routable, also inside IPv4-mapped,
   IPv4-compatible, NAT64, 6to4 and Teredo forms (unless the operator allows private
   networks),
5. connects to the address it checked, never to the name again.

Redirects are followed by Chromium; each hop is a new request, so each hop passes here.
Every refusal is reported to the navigations listening on the guard (`listeners`) with the
target and the rule, and the browser receives `403` (for a tunnel: a failed connection).

A plain-http document (a page or a frame: what Chromium asks for as a navigation) passes at
most the policy's `max_bytes` of body, however it is framed: a server that streams one without
a Content-Length (or declares less than it sends) is cut there, and the navigations are told
(`oversized`), so the page is `too_large` instead of a truncated success. Inside a tunnel
(https) the guard sees no response; the renderer's own bound (`memory.py`) holds there.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from worker_agent.browser.policy import BrowserPolicy

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# (host, port) -> addresses; raises OSError (or returns nothing) when the name does not resolve.
Resolver = Callable[[str, int], Awaitable[list[str]]]

HEAD_LIMIT = 64 * 1024
IDLE_TIMEOUT = 120.0
CONNECT_TIMEOUT = 10.0
PUBLIC_PORTS = (80, 443)
LOW_PORTS_END = 1024  # ports below this are services (ssh, smtp, dns...), except 80 and 443
SHARED = ipaddress.ip_network("100.64.0.0/10")
NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
COMPATIBLE = ipaddress.ip_network("::/96")
MAX_ORPHANS = 50
MAX_ORIGINS = 500
HOP_HEADERS = ("connection", "proxy-connection", "keep-alive", "proxy-authorization")
REFUSED_HEADER = "X-Deskfleet-Refused"
UNREACHABLE_HEADER = "X-Deskfleet-Unreachable"
# Loopback, private addresses and service ports are the operator's to open, not a plan's.
PRIVATE_HINT = "`deskfleet-coordinator serve --allow-private-networks` allows them"


class Listener(Protocol):
    def refused(self, target: str, reason: str) -> None: ...

    def redirected(self, url: str, location: str) -> None: ...

    def oversized(self, url: str, reason: str) -> None: ...

    def unreachable(self, target: str, reason: str) -> None: ...


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return [str(info[4][0]) for info in infos]


@dataclass(frozen=True)
class EgressSettings:
    """How the guard resolves names; `public` addresses are treated as public (tests only)."""

    resolver: Resolver = system_resolver
    public: frozenset[IPAddress] = field(default_factory=frozenset)


def address_refusal(address: IPAddress) -> str | None:
    """Why a connection to `address` is not a connection to the public internet, or None."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_v4(address)
        if embedded is not None:
            inner = address_refusal(embedded)
            return f"{inner} (inside {address})" if inner else None
    kinds = (
        ("loopback", address.is_loopback),
        ("unspecified", address.is_unspecified),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("shared (CGNAT)", isinstance(address, ipaddress.IPv4Address) and address in SHARED),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
        ("not globally routable", not address.is_global),
    )
    for kind, hit in kinds:
        if hit:
            return f"{address} is a {kind} address"
    return None


def _embedded_v4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if any(address in net for net in NAT64) or (address in COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None


def _host_only(host: str) -> str:
    return host.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")


class EgressGuard:
    """One policy's proxy: a listening socket on 127.0.0.1 and the refusals it makes."""

    def __init__(self, policy: BrowserPolicy | None, settings: EgressSettings) -> None:
        self.policy = policy  # None: refuse everything (the browser's default context)
        self.settings = settings
        self.listeners: set[Listener] = set()
        # Refusals made while no navigation listened (a kept page's late requests): handed
        # to the next navigation that listens, so each refusal reaches a report.
        self.orphans: list[tuple[str, str]] = []
        # Each redirected request of the run's pages, to the first URL of its chain. Kept here,
        # not per navigation, because a late request's redirect and its refusal can each come
        # before or after the navigation that reports it starts listening.
        self.origins: dict[str, str] = {}
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def server(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> EgressGuard:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.listeners.clear()

    async def check(self, host: str, port: int) -> tuple[IPAddress | None, str]:
        """The address to connect to for `host:port`, or None and why not."""
        policy = self.policy
        if policy is None:
            return None, "no run's policy applies to this browser context"
        name = _host_only(host)
        if not name:
            return None, "the request has no host"
        if not 0 < port < 65536:
            return None, f"port {port} is not a port"
        if not policy.allow_private and port not in PUBLIC_PORTS and port < LOW_PORTS_END:
            return None, f"port {port} is refused (80, 443 and 1024-65535 only; {PRIVATE_HINT})"
        if any(_matches(name, d) for d in policy.deny_domains):
            return None, f"domain {name} is denied by the policy"
        if policy.allow_domains and not any(_matches(name, d) for d in policy.allow_domains):
            return None, f"domain {name} is not in the policy's allowed domains"
        literal = True
        try:
            addresses = [ipaddress.ip_address(name)]
        except ValueError:
            literal = False
            try:
                found = await asyncio.wait_for(self.settings.resolver(name, port), CONNECT_TIMEOUT)
                addresses = [ipaddress.ip_address(a.split("%")[0]) for a in found]
            except (OSError, ValueError, TimeoutError) as exc:
                return None, f"{name} cannot be resolved ({_short(exc)}): refused"
            if not addresses:
                return None, f"{name} cannot be resolved: refused"
        if not policy.allow_private:
            for address in addresses:
                if address in self.settings.public:
                    continue
                why = address_refusal(address)
                if why:
                    shown = why if literal else f"{name} resolves to {why}"
                    return None, (
                        f"{shown}; the policy does not allow loopback or private addresses"
                        f" ({PRIVATE_HINT})"
                    )
        return addresses[0], ""

    def followed(self, url: str, previous: str) -> None:
        """The browser followed a redirect from `previous` to `url`."""
        if len(self.origins) >= MAX_ORIGINS:
            del self.origins[next(iter(self.origins))]
        self.origins[url] = self.origins.get(previous, previous)

    def listen(self, listener: Listener) -> None:
        self.listeners.add(listener)
        orphans, self.orphans = self.orphans, []
        for target, reason in orphans:
            listener.refused(target, reason)

    def unlisten(self, listener: Listener) -> None:
        self.listeners.discard(listener)

    def _refuse(self, target: str, reason: str) -> None:
        if not self.listeners and len(self.orphans) < MAX_ORPHANS:
            self.orphans.append((target, reason))
        for listener in list(self.listeners):
            listener.refused(target, reason)

    def _unreachable(self, target: str, reason: str) -> None:
        for listener in list(self.listeners):
            listener.unreachable(target, reason)

    def _oversized(self, url: str, reason: str) -> None:
        for listener in list(self.listeners):
            listener.oversized(url, reason)

    def _redirected(self, url: str, headers: list[str]) -> None:
        for header in headers:
            name, _, value = header.partition(":")
            if name.strip().lower() == "location":
                for listener in list(self.listeners):
                    listener.redirected(url, value.strip())

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._proxy(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        except asyncio.CancelledError:  # the guard is closing: the connection ends here
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IDLE_TIMEOUT)
        if len(head) > HEAD_LIMIT:
            return
        line, _, rest = head.decode("latin-1").partition("\r\n")
        method, target, version = line.split(" ", 2)
        if method.upper() == "CONNECT":
            host, port = _split_authority(target, 443)
            where = target  # host:port as Chromium wrote it (an IPv6 host in brackets)
        else:
            scheme, sep, after = target.partition("://")
            if not sep or scheme.lower() != "http":
                await _answer(writer, 400, "the proxy takes CONNECT and absolute http URLs")
                return
            authority, _, path = after.partition("/")
            host, port = _split_authority(authority.rpartition("@")[2], 80)
            where = target
        address, reason = await self.check(host, port)
        if address is None:
            self._refuse(where, reason)
            await _answer(writer, 403, reason, refused=True)
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(str(address), port), CONNECT_TIMEOUT
            )
        except (OSError, TimeoutError) as exc:
            # The real cause, for the navigation's report: the browser sees only a 502 (or,
            # for a tunnel, a failed connection) and would report that instead.
            reason = _connect_failure(exc, _host_only(host), port)
            self._unreachable(where, reason)
            await _answer(writer, 502, reason, unreachable=True)
            return
        try:
            if method.upper() == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                await _pipe_both(reader, writer, up_reader, up_writer)
                return
            headers = _without_hop_headers(rest.split("\r\n"))
            # A document's body is held to the policy's limit (self.policy is set: checked).
            cap = self.policy.max_bytes if self.policy and _is_document(headers) else None
            request = f"{method} /{path} {version}\r\n" + "".join(
                f"{h}\r\n" for h in [*headers, "Connection: close"]
            )
            up_writer.write(request.encode("latin-1") + b"\r\n")
            await up_writer.drain()
            upload = asyncio.ensure_future(_pipe(reader, up_writer, close=False))
            try:
                answer = await asyncio.wait_for(up_reader.readuntil(b"\r\n\r\n"), IDLE_TIMEOUT)
                status, _, answer_rest = answer.decode("latin-1").partition("\r\n")
                kept = _without_hop_headers(answer_rest.split("\r\n"))
                if status[9:10] == "3":  # "HTTP/1.1 3xx": where it points, for the report
                    self._redirected(target, kept)
                writer.write(
                    (
                        f"{status}\r\n"
                        + "".join(f"{h}\r\n" for h in [*kept, "Connection: close"])
                        + "\r\n"
                    ).encode("latin-1")
                )
                if cap is None:
                    await _pipe(up_reader, writer, close=True)
                elif await _pipe(up_reader, writer, close=True, limit=cap + _framing(cap)):
                    self._oversized(target, _oversize_reason(_content_length(kept), cap))
            finally:
                upload.cancel()
        finally:
            up_writer.close()


def _without_hop_headers(lines: Iterable[str]) -> list[str]:
    return [h for h in lines if h and h.split(":", 1)[0].strip().lower() not in HOP_HEADERS]


def _split_authority(authority: str, default: int) -> tuple[str, int]:
    if authority.startswith("["):
        host, _, tail = authority[1:].partition("]")
        port = tail.removeprefix(":")
    else:
        host, _, port = authority.rpartition(":") if ":" in authority else (authority, "", "")
    return host, int(port) if port else default


def _connect_failure(exc: BaseException, host: str, port: int) -> str:
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused at {where}"
    if isinstance(exc, TimeoutError):
        return f"no connection to {where} within {CONNECT_TIMEOUT:g} s"
    return f"cannot connect to {where}: {_short(exc)}"


async def _answer(
    writer: asyncio.StreamWriter,
    status: int,
    reason: str,
    *,
    refused: bool = False,
    unreachable: bool = False,
) -> None:
    body = (reason + "\n").encode()
    names = {403: "Forbidden", 400: "Bad Request", 502: "Bad Gateway"}
    extra = f"{REFUSED_HEADER}: 1\r\n" if refused else ""
    extra += f"{UNREACHABLE_HEADER}: 1\r\n" if unreachable else ""
    writer.write(
        (
            f"HTTP/1.1 {status} {names[status]}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\n{extra}"
            "Connection: close\r\n\r\n"
        ).encode()
        + body
    )
    with contextlib.suppress(OSError):
        await writer.drain()


def _is_document(headers: list[str]) -> bool:
    """Whether Chromium asks for a document (a page or a frame): `Sec-Fetch-Dest`, sent to
    trustworthy origins, else the `Upgrade-Insecure-Requests` it sends with navigations only."""
    fields = {h.split(":", 1)[0].strip().lower(): h.partition(":")[2].strip() for h in headers}
    dest = fields.get("sec-fetch-dest")
    if dest is not None:
        return dest.lower() in ("document", "iframe", "frame")
    return fields.get("upgrade-insecure-requests") == "1"


def _oversize_reason(declared: int, cap: int) -> str:
    if declared > cap:  # as the navigation words a declared size (navigation.py)
        return f"{declared} bytes is more than the limit of {cap}"
    framing = f"declares {declared} bytes" if declared else "has no Content-Length"
    return (
        f"the document passed the limit of {cap} bytes while it streamed (it {framing}): cut there"
    )


def _framing(cap: int) -> int:
    """Room for chunked framing on the wire beyond a body of `cap` bytes (chunks of at least
    a hundred bytes or so stay within it)."""
    return max(64 * 1024, cap // 16)


def _content_length(headers: list[str]) -> int:
    for header in headers:
        name, _, value = header.partition(":")
        if name.strip().lower() == "content-length" and value.strip().isdigit():
            return int(value.strip())
    return 0


async def _pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    close: bool,
    limit: int | None = None,
) -> bool:
    """Copy until the end (or, past `limit` bytes, stop: returns True)."""
    sent = 0
    try:
        while True:
            data = await asyncio.wait_for(reader.read(65536), IDLE_TIMEOUT)
            if not data:
                break
            if limit is not None and sent + len(data) > limit:
                return True
            sent += len(data)
            writer.write(data)
            await writer.drain()
    except (OSError, TimeoutError):
        pass
    finally:
        if close:
            writer.close()
        elif writer.can_write_eof():
            with contextlib.suppress(OSError):
                writer.write_eof()
    return False


async def _pipe_both(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    upload = asyncio.ensure_future(_pipe(reader, up_writer, close=False))
    try:
        await _pipe(up_reader, writer, close=True)
    finally:
        upload.cancel()


def _matches(host: str, domain: str) -> bool:
    domain = domain.lstrip(".").rstrip(".").lower()
    return host == domain or host.endswith("." + domain)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:120] if text else type(exc).__name__
