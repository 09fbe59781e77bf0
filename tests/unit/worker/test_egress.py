"""Browser egress is decided at the connection, by the egress guard Chromium must use.

The "public" site is served on 127.0.0.2 under the name public.test (a resolver the test
controls; the guard treats 127.0.0.2 as public). A loopback server on 127.0.0.1 and [::1]
records every connection it accepts: each attack below must leave its log empty.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from typing import Any

import pytest

from worker_agent.browser.egress import EgressGuard, EgressSettings, address_refusal
from worker_agent.browser.policy import BrowserPolicy

PUBLIC_IP = "127.0.0.2"
SECRET = "SECRET-FROM-LOOPBACK"
NAMES = {"public.test": [PUBLIC_IP], "rebind.test": ["127.0.0.1"]}


async def resolve(host: str, port: int) -> list[str]:
    if host in NAMES:
        return NAMES[host]
    raise OSError(f"no address for {host}")


SETTINGS = EgressSettings(resolver=resolve, public=frozenset({ipaddress.ip_address(PUBLIC_IP)}))


# -- the address and name rules, without a browser ------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.8.9.10",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "224.0.0.1",
        "0.0.0.0",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "64:ff9b::7f00:1",
        "64:ff9b::a00:1",
        "::7f00:1",
        "2002:7f00:1::",
    ],
)
def test_non_public_addresses_and_their_ipv6_forms_are_refused(address: str) -> None:
    assert address_refusal(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:2800:220:1::1", "64:ff9b::5db8:d822"])
def test_public_addresses_are_allowed(address: str) -> None:
    assert address_refusal(ipaddress.ip_address(address)) is None


def check(policy: dict[str, Any], host: str, port: int = 80) -> tuple[Any, str]:
    guard = EgressGuard(BrowserPolicy.from_args(policy), SETTINGS)
    return asyncio.run(guard.check(host, port))


def test_the_guard_resolves_names_itself_and_refuses_what_it_cannot_resolve() -> None:
    assert check({}, "rebind.test", 8080)[1] == (
        "rebind.test resolves to 127.0.0.1 is a loopback address;"
        " the policy does not allow loopback or private addresses"
        " (`deskfleet-coordinator serve --allow-private-networks` allows them)"
    )
    assert check({}, "nowhere.test")[1].startswith("nowhere.test cannot be resolved")
    assert check({"allow_private": True}, "nowhere.test")[0] is None  # even when private is open
    assert check({}, "public.test") == (ipaddress.ip_address(PUBLIC_IP), "")
    assert check({}, "[::ffff:7f00:1]")[1].startswith("127.0.0.1 is a loopback address")


def test_the_guard_checks_ports_and_domains_on_the_host_the_browser_connects_to() -> None:
    assert check({}, "public.test", 22)[1] == (
        "port 22 is refused (80, 443 and 1024-65535 only;"
        " `deskfleet-coordinator serve --allow-private-networks` allows them)"
    )
    assert check({}, "public.test", 443)[0] is not None
    assert check({"deny_domains": ["test"]}, "PUBLIC.test.")[1] == (
        "domain public.test is denied by the policy"
    )
    assert check({"allow_domains": ["example.org"]}, "public.test")[1] == (
        "domain public.test is not in the policy's allowed domains"
    )
    assert check({"allow_private": True}, "127.0.0.1", 22)[0] is not None


def test_the_guard_connects_to_the_address_it_checked_never_resolving_twice() -> None:
    """DNS rebinding: a name that answers public, then loopback, is connected to as checked."""
    calls: list[str] = []
    answers = [[PUBLIC_IP], ["127.0.0.1"]]

    async def rebinding(host: str, port: int) -> list[str]:
        calls.append(host)
        return answers[min(len(calls) - 1, 1)]

    port = _port_free_on(PUBLIC_IP, "127.0.0.1")
    public_log, public_port = serve_raw(PUBLIC_IP, port)
    loop_log, _ = serve_raw("127.0.0.1", port)

    async def go() -> bytes:
        settings = EgressSettings(rebinding, SETTINGS.public)
        guard = await EgressGuard(BrowserPolicy(), settings).start()
        reader, writer = await asyncio.open_connection("127.0.0.1", guard.port)
        writer.write(f"GET http://rebind.test:{public_port}/x HTTP/1.1\r\n\r\n".encode())
        answer = await reader.read()
        writer.close()
        await guard.close()
        return answer

    answer = asyncio.run(go())
    assert calls == ["rebind.test"] and SECRET.encode() in answer
    assert public_log == [b"GET /x HTTP/1.1"] and loop_log == []


def test_a_tunnel_to_loopback_is_refused_and_reported_and_an_allowed_one_is_connected() -> None:
    public_log, port = serve_raw(PUBLIC_IP)
    loop_log, _ = serve_raw("127.0.0.1", port)
    seen: list[tuple[str, str]] = []

    class Listener:
        def refused(self, target: str, reason: str) -> None:
            seen.append((target, reason))

        def redirected(self, url: str, location: str) -> None:
            pass

        def oversized(self, url: str, reason: str) -> None:
            pass

        def unreachable(self, target: str, reason: str) -> None:
            pass

    async def go() -> tuple[bytes, bytes]:
        guard = await EgressGuard(BrowserPolicy(), SETTINGS).start()
        guard.listen(Listener())
        reader, writer = await asyncio.open_connection("127.0.0.1", guard.port)
        writer.write(f"CONNECT [::ffff:127.0.0.1]:{port} HTTP/1.1\r\n\r\n".encode())
        refused = await reader.read()
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", guard.port)
        writer.write(f"CONNECT public.test:{port} HTTP/1.1\r\n\r\n".encode())
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HELLO tunnel\r\n\r\n")
        tunnelled = await reader.read()
        writer.close()
        await guard.close()
        return refused, tunnelled

    refused, tunnelled = asyncio.run(go())
    assert refused.startswith(b"HTTP/1.1 403 ") and SECRET.encode() not in refused
    assert seen == [
        (
            f"[::ffff:127.0.0.1]:{port}",
            "127.0.0.1 is a loopback address (inside ::ffff:7f00:1);"
            " the policy does not allow loopback or private addresses"
            " (`deskfleet-coordinator serve --allow-private-networks` allows them)",
        )
    ]
    assert SECRET.encode() in tunnelled and public_log == [b"HELLO tunnel"] and loop_log == []


def test_a_closed_port_is_reported_as_connection_refused_not_as_the_proxys_502() -> None:
    """What failed upstream reaches the navigation as the cause (the browser sees only a 502,
    or for a tunnel a failed connection), and the 502 is marked as the guard's own."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    seen: list[tuple[str, str]] = []

    class Listener:
        def refused(self, target: str, reason: str) -> None:
            raise AssertionError(f"refused {target}: {reason}")

        def redirected(self, url: str, location: str) -> None:
            pass

        def oversized(self, url: str, reason: str) -> None:
            pass

        def unreachable(self, target: str, reason: str) -> None:
            seen.append((target, reason))

    async def ask(guard: EgressGuard, request: str) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", guard.port)
        writer.write(request.encode())
        answer = await reader.read()
        writer.close()
        return answer

    async def go() -> tuple[bytes, bytes]:
        guard = await EgressGuard(BrowserPolicy(allow_private=True), SETTINGS).start()
        guard.listen(Listener())
        plain = await ask(guard, f"GET http://127.0.0.1:{port}/x HTTP/1.1\r\n\r\n")
        tunnel = await ask(guard, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n")
        await guard.close()
        return plain, tunnel

    plain, tunnel = asyncio.run(go())
    reason = f"connection refused at 127.0.0.1:{port}"
    assert seen == [(f"http://127.0.0.1:{port}/x", reason), (f"127.0.0.1:{port}", reason)]
    for answer in (plain, tunnel):
        assert answer.startswith(b"HTTP/1.1 502 ") and b"X-Deskfleet-Unreachable: 1" in answer
        assert answer.endswith(reason.encode() + b"\n")


def test_a_late_request_refused_between_navigations_is_reported_with_its_redirect_origin() -> None:
    """A kept page's worker can follow a redirect and be refused while no navigation listens;
    the run's next navigation reports it with the URL the page asked for, whichever of the
    redirect event and the refusal arrives first."""
    from worker_agent.browser.navigation import Navigation

    loop_log, port = serve_raw("127.0.0.1")
    origin, target = "http://public.test:9/go?k=worker", f"http://127.0.0.1:{port}/?worker"

    async def refuse(guard: EgressGuard) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", guard.port)
        writer.write(f"GET {target} HTTP/1.1\r\n\r\n".encode())
        assert (await reader.read()).startswith(b"HTTP/1.1 403 ")
        writer.close()

    async def go(redirect_first: bool) -> list[dict[str, str]]:
        guard = await EgressGuard(BrowserPolicy(), SETTINGS).start()
        if redirect_first:
            guard.followed(target, origin)
        await refuse(guard)  # no navigation listens: an orphan
        nav = Navigation("http://public.test:9/next", via=guard.origins)
        guard.listen(nav)
        if not redirect_first:
            guard.followed(target, origin)
        await guard.close()
        return nav.refusals()

    for redirect_first in (True, False):
        (refused,) = asyncio.run(go(redirect_first))
        assert refused["redirect_of"] == origin, refused
        assert refused["reason"].startswith(f"redirect of {origin}: 127.0.0.1 is a loopback")
    assert loop_log == []


# -- in a real Chromium ------------------------------------------------------------------


def _port_free_on(*hosts: str) -> int:
    """A port no listener holds on any of the hosts: the one the system picks for the first
    may be taken on another (by a test running beside this one), which failed the bind."""
    for _ in range(50):
        taken: list[socket.socket] = []
        try:
            for host in hosts:
                s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
                taken.append(s)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((host, taken[0].getsockname()[1] if len(taken) > 1 else 0))
            port: int = taken[0].getsockname()[1]
            return port
        except OSError:
            continue
        finally:
            for s in taken:
                s.close()
    raise AssertionError(f"no port free on all of {hosts}")


def serve_raw(host: str, port: int = 0) -> tuple[list[bytes], int]:
    """A TCP server that logs the first line of every connection and answers with SECRET."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(16)
    except OSError:
        listener.close()
        raise
    log: list[bytes] = []

    def accept() -> None:
        while True:
            conn, _ = listener.accept()
            conn.settimeout(2)
            try:
                first = conn.recv(4096).split(b"\r\n")[0]
            except OSError:
                first = b"(nothing)"
            log.append(first)
            body = f"<title>{SECRET}</title><p>{SECRET}</p>".encode()
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nAccess-Control-Allow-Origin: *"
                + f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    return log, listener.getsockname()[1]
