"""Browser egress in a real Chromium: a redirect to loopback in any spelling never connects,
service workers never register, a websocket to loopback is refused, allowed pages load with
their subresources. The guard's rules alone are tests/unit/worker/test_egress.py."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.conftest import require
from tests.unit.worker.test_egress import PUBLIC_IP, SECRET, SETTINGS, serve_raw
from worker_agent.actions import ActionContext, ActionRegistry
from worker_agent.browser.actions import BrowserActions
from worker_agent.capabilities import DEFAULT_CHROMIUM


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
    " (`deskfleet-coordinator serve --allow-private-networks` allows them)"
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
