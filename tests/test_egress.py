"""Browser egress is decided at the connection, by the egress guard Chromium must use.

The "public" site is served on 127.0.0.2 under the name public.test (a resolver the test
controls; the guard treats 127.0.0.2 as public). A loopback server on 127.0.0.1 and [::1]
records every connection it accepts: each attack below must leave its log empty.
"""

from __future__ import annotations

import asyncio
import ipaddress
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.conftest import require
from worker_agent.actions import ActionContext, ActionRegistry
from worker_agent.browser.actions import BrowserActions
from worker_agent.browser.egress import EgressGuard, EgressSettings, address_refusal
from worker_agent.browser.policy import BrowserPolicy
from worker_agent.capabilities import DEFAULT_CHROMIUM

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
    )
    assert check({}, "nowhere.test")[1].startswith("nowhere.test cannot be resolved")
    assert check({"allow_private": True}, "nowhere.test")[0] is None  # even when private is open
    assert check({}, "public.test") == (ipaddress.ip_address(PUBLIC_IP), "")
    assert check({}, "[::ffff:7f00:1]")[1].startswith("127.0.0.1 is a loopback address")


def test_the_guard_checks_ports_and_domains_on_the_host_the_browser_connects_to() -> None:
    assert check({}, "public.test", 22)[1] == "port 22 is refused (80, 443 and 1024-65535 only)"
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

    public_log, public_port = serve_raw(PUBLIC_IP)
    loop_log, _ = serve_raw("127.0.0.1", public_port)

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
            " the policy does not allow loopback or private addresses",
        )
    ]
    assert SECRET.encode() in tunnelled and public_log == [b"HELLO tunnel"] and loop_log == []


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


def serve_raw(host: str, port: int = 0) -> tuple[list[bytes], int]:
    """A TCP server that logs the first line of every connection and answers with SECRET."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(16)
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


@dataclass
class Site:
    public: str
    port: int  # the loopback server's port
    loopback_log: list[bytes]
    public_log: list[str] = field(default_factory=list)
    targets: dict[str, str] = field(default_factory=dict)


def attacks(port: int) -> dict[str, str]:
    """Each spelling of a loopback (or unusable) target, by name."""
    return {
        "percent-encoded host": f"http://%31%32%37.0.0.1:{port}/",
        "backslash userinfo": f"http://127.0.0.1:{port}\\@public.test/",
        "decimal IPv4": f"http://2130706433:{port}/",
        "hex IPv4": f"http://0x7f000001:{port}/",
        "octal IPv4": f"http://0177.0.0.1:{port}/",
        "short IPv4": f"http://127.1:{port}/",
        "IPv6 loopback": f"http://[::1]:{port}/",
        "IPv4-mapped IPv6": f"http://[::ffff:127.0.0.1]:{port}/",
        "name resolving to loopback": f"http://rebind.test:{port}/",
        "unresolvable name": f"http://nowhere.test:{port}/",
    }


def page(body: str) -> bytes:
    # The slow image holds the load event while the page's scripts make their requests.
    return f"<html><body>{body}<img src='/slow.png'></body></html>".encode()


def make_handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def send(
            self, body: bytes, kind: str = "text/html", extra: dict[str, str] | None = None
        ) -> None:
            self.send_response(200 if not extra else 302)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:  # a beacon
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.do_GET()

        def do_GET(self) -> None:
            site.public_log.append(self.path)
            url = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            name = query.get("n", "")
            if url.path == "/go":
                kind = query.get("k", "")
                self.send(b"", extra={"Location": f"{site.targets[name]}?{kind}"})
            elif url.path == "/embeds":
                script = f"""
                  fetch('/go?n={name}&k=fetch').then(r => r.text())
                    .then(t => document.getElementById('out').textContent = t,
                          e => document.getElementById('out').textContent = 'fetch failed');
                  new Worker('/worker.js?n={name}');
                  navigator.sendBeacon('/go?n={name}&k=beacon', 'x');"""
                self.send(
                    page(
                        f"<link rel='prefetch' href='/go?n={name}&k=prefetch'>"
                        f"<p>Embeds.</p><img src='/go?n={name}&k=img'>"
                        f"<iframe src='/go?n={name}&k=frame'></iframe>"
                        f"<pre id='out'></pre><script>{script}</script>"
                    )
                )
            elif url.path == "/worker.js":
                self.send(f"fetch('/go?n={name}&k=worker');".encode(), "text/javascript")
            elif url.path == "/sw":
                script = """navigator.serviceWorker.register('/sw.js').then(
                    r => out.textContent = 'sw: ' + r, e => out.textContent = 'sw: ' + e);"""
                self.send(page(f"<pre id='out'></pre><script>{script}</script>"))
            elif url.path == "/sw.js":
                target = f"http://127.0.0.1:{site.port}/from-service-worker"
                self.send(
                    f"self.oninstall = e => e.waitUntil(fetch('{target}'));"
                    f"self.onfetch = e => e.respondWith(fetch('{target}'));".encode(),
                    "text/javascript",
                )
            elif url.path == "/ws":
                script = f"""const ws = new WebSocket('ws://127.0.0.1:{site.port}/');
                  ws.onopen = () => out.textContent = 'open';"""
                self.send(page(f"<pre id='out'></pre><script>{script}</script>"))
            elif url.path == "/ok":
                script = """fetch('/data.txt').then(r => r.text())
                  .then(t => document.getElementById('out').textContent = t);"""
                self.send(
                    page(
                        "<h1>Allowed</h1><p>The keeper's log is kept here.</p>"
                        "<img src='/pic.png'><iframe src='/inner'></iframe>"
                        f"<pre id='out'></pre><script>{script}</script>"
                    )
                )
            elif url.path == "/inner":
                self.send(b"<p>inner frame</p>")
            elif url.path == "/data.txt":
                self.send(b"fetched data 4721", "text/plain")
            elif url.path in ("/pic.png", "/slow.png"):
                if url.path == "/slow.png":
                    time.sleep(0.4)
                self.send(b"\x89PNG\r\n\x1a\n", "image/png")
            else:
                self.send_error(404)

    return Handler


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    log, port = serve_raw("127.0.0.1")
    try:
        serve_raw("::1", port)
    except OSError:
        pass  # no IPv6 loopback here: the guard still refuses [::1] by its address
    holder = Site("", port, log)
    server = ThreadingHTTPServer((PUBLIC_IP, 0), make_handler(holder))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    holder.public = f"http://public.test:{server.server_address[1]}"
    holder.targets = {str(i): url for i, url in enumerate(attacks(port).values())}
    yield holder
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[ActionRegistry]:
    from worker_agent.browser.service import BrowserService

    require(shutil.which(DEFAULT_CHROMIUM) is not None, f"no Chromium at {DEFAULT_CHROMIUM}")
    service = BrowserService(DEFAULT_CHROMIUM, egress=SETTINGS)
    registry = ActionRegistry()
    BrowserActions(service).register(registry)
    yield registry
    service.close()


def fetch(registry: ActionRegistry, url: str) -> dict[str, Any]:
    handler, _ = registry.resolve("browser.fetch", "{}")
    result: dict[str, Any] = handler(
        {"url": url, "policy": {"timeout": 10}}, ActionContext("act_e", 1, 40, run_id="run_e")
    )
    return result


def screenshot(registry: ActionRegistry, url: str) -> dict[str, Any]:
    handler, _ = registry.resolve("browser.screenshot", "{}")
    result: dict[str, Any] = handler(
        {"url": url, "policy": {"timeout": 10}}, ActionContext("act_s", 1, 40, run_id="run_e")
    )
    return result


REFUSAL = ("loopback address", "cannot be resolved")
LOOPBACK = (
    "127.0.0.1 is a loopback address; the policy does not allow loopback or private addresses"
)


@pytest.mark.slow
@pytest.mark.parametrize("form", list(attacks(1)))
def test_a_redirect_to_loopback_in_any_spelling_never_connects(
    browser: ActionRegistry, site: Site, form: str
) -> None:
    n = list(attacks(1)).index(form)
    start = f"{site.public}/go?n={n}&k=document"
    document = fetch(browser, start)
    assert document["outcome"] == "refused" and document["evidence"] is False, document
    assert document["reason"].startswith("redirect to http://")
    assert any(r in document["reason"] for r in REFUSAL), document["reason"]
    assert SECRET not in document["text"] + document["title"]

    embeds = fetch(browser, f"{site.public}/embeds?n={n}")
    assert embeds["outcome"] == "ok", embeds
    assert SECRET not in embeds["text"]
    # A text read never requests images (nor media and fonts); a screenshot loads them all.
    shot = screenshot(browser, f"{site.public}/embeds?n={n}")
    assert shot["outcome"] == "ok", shot
    # A refusal that comes after a page was read (a worker's late request) is reported with
    # the run's next browser action: here, the screenshot.
    blocked = embeds["blocked_requests"] + shot["blocked_requests"]
    refused = {b.get("redirect_of", ""): b for b in blocked}
    for kind in ("img", "frame", "fetch", "worker", "beacon", "prefetch"):
        origin = f"{site.public}/go?n={n}&k={kind}"
        entry = refused.get(origin) or next(
            (b for b in blocked if b["reason"].startswith(f"redirect of {origin}")), None
        )
        assert entry is not None, (kind, blocked)
        assert any(r in entry["reason"] for r in REFUSAL), entry
    assert site.loopback_log == [], site.loopback_log


@pytest.mark.slow
def test_a_service_worker_is_never_registered(browser: ActionRegistry, site: Site) -> None:
    site.public_log.clear()
    result = fetch(browser, f"{site.public}/sw")
    assert result["outcome"] == "ok"
    time.sleep(0.5)
    assert "/sw.js" not in site.public_log and site.loopback_log == []


@pytest.mark.slow
def test_a_websocket_to_loopback_is_refused(browser: ActionRegistry, site: Site) -> None:
    result = fetch(browser, f"{site.public}/ws")
    assert result["outcome"] == "ok" and "open" not in result["text"]
    assert {
        "url": f"127.0.0.1:{site.port}",
        "reason": LOOPBACK,
    } in result["blocked_requests"], result["blocked_requests"]
    assert site.loopback_log == []


@pytest.mark.slow
def test_allowed_pages_load_with_their_subresources(browser: ActionRegistry, site: Site) -> None:
    site.public_log.clear()
    result = fetch(browser, f"{site.public}/ok")
    assert (result["outcome"], result["status"], result["blocked_requests"]) == ("ok", 200, [])
    assert "The keeper's log is kept here." in result["text"]
    assert {"/ok", "/inner", "/data.txt"} <= set(site.public_log)
    assert "/pic.png" not in site.public_log  # a text read skips images
    site.public_log.clear()
    shot = screenshot(browser, f"{site.public}/ok")
    assert (shot["outcome"], shot["blocked_requests"]) == ("ok", [])
    assert {"/ok", "/pic.png", "/inner", "/data.txt"} <= set(site.public_log)
    direct = fetch(browser, f"http://127.0.0.1:{site.port}/")
    assert direct["outcome"] == "refused" and direct["status"] == 0
    assert direct["reason"] == LOOPBACK
    assert site.loopback_log == []
