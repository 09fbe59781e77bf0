"""The local site's server: static topic pages plus the special cases tests need."""

from __future__ import annotations

import html
import json
import struct
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote_plus, urlparse

# The facts a research run must find, with the page that states each.
FACTS = {
    "/varn/north-light.html": "The North Light of Varn was first lit in 1847",
    "/varn/keepers.html": "Its last keeper, Ada Morrow, left the tower in 1962",
    "/varn/lens.html": "The lens is a first-order Fresnel lens made by Chance Brothers",
    "/varn/range.html": "The light can be seen from 23 nautical miles",
}

_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>{title}</title></head>
<body><nav><a href="/">Home</a> | <a href="/search?q=lighthouse">Search</a></nav>
<article><h1>{title}</h1>{body}</article>
<footer>Isle of Varn Heritage Society. Cookie notice. All rights reserved.</footer></body></html>"""


def _paragraphs(fact: str, topic: str) -> str:
    filler = (
        f"<p>Visitors to the Isle of Varn often ask about {topic}. The island archive keeps "
        "letters, log books and drawings that describe the station through the years, and the "
        "heritage society publishes short notes like this one for anyone curious.</p>"
    )
    return f"<p>{html.escape(fact)}.</p>{filler}{filler}"


def _topic_pages() -> dict[str, tuple[str, str]]:
    pages = {}
    for path, fact in FACTS.items():
        title = path.rsplit("/", 1)[1].removesuffix(".html").replace("-", " ").title()
        pages[path] = (f"Varn {title}", _paragraphs(fact, title.lower()))
    # Forty more pages on the same island, for the throughput benchmark.
    for i in range(40):
        pages[f"/varn/notes/{i}.html"] = (
            f"Varn note {i}",
            _paragraphs(f"Note {i}: the tower was painted in {1900 + i}", f"note {i}"),
        )
    return pages


PAGES = _topic_pages()


def _png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    raw = b"\x00\xff\x00\x00" * 1
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


PDF = (
    b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[]"
    b"/Count 0>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"
)


ESCAPE_TARGET = "file:///etc/passwd"
LATE_TEXT = "The relief keeper rowed out every second Tuesday"
LATE_DATA = "The station log records 211 foggy days in 1921"

# Paths (with their query) that were requested, for tests that check what never left the
# browser. Only the /embeds family is recorded.
REQUESTED: list[str] = []


class Handler(BaseHTTPRequestHandler):
    server_version = "VarnSite/1.0"

    def log_message(self, *args: object) -> None:  # quiet: tests read their own output
        pass

    def _send(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _html(self, title: str, body: str, status: int = 200) -> None:
        page = _PAGE.format(title=html.escape(title), body=body)
        self._send(status, page.encode("utf-8"), "text/html; charset=utf-8")

    def do_GET(self) -> None:
        url = urlparse(self.path)
        path = url.path
        if path.startswith("/embeds") or "via=" in url.query:
            REQUESTED.append(self.path)
        if path in PAGES:
            self._html(*PAGES[path])
        elif path == "/":
            links = "".join(
                f'<li><a href="{p}">{html.escape(t)}</a></li>' for p, (t, _) in PAGES.items()
            )
            self._html("Isle of Varn", f"<ul>{links}</ul>")
        elif path == "/search":
            self._search(parse_qs(url.query).get("q", [""])[0])
        elif path == "/files/report.pdf":
            self._send(200, PDF, "application/pdf")
        elif path == "/files/photo.png":
            self._send(200, _png(), "image/png")
        elif path == "/challenge":
            self._html("Access denied", "<p>403 Forbidden: access denied.</p>", status=403)
        elif path == "/captcha":
            self._html(
                "Just a moment",
                "<p>Please verify you are human to continue.</p><div class='g-recaptcha'></div>",
            )
        elif path.startswith("/loop/"):
            n = int(path.rsplit("/", 1)[1] or 0)
            self._send(302, b"", "text/plain", {"Location": f"/loop/{n + 1}"})
        elif path == "/embeds":
            # An image and a frame whose requests are redirected elsewhere: to this site under
            # the name "localhost" (?to=out, which a policy can deny) or to itself (?to=in).
            to = parse_qs(url.query).get("to", ["out"])[0]
            self._html(
                "Embeds",
                f"<p>The Varn station drawings.</p><img src='/embeds/hop/img?to={to}'>"
                f"<iframe src='/embeds/hop/frame?to={to}'></iframe>",
            )
        elif path.startswith("/embeds/hop/"):
            what = path.rsplit("/", 1)[1]
            to = parse_qs(url.query).get("to", ["out"])[0]
            port = urlparse(f"http://{self.headers.get('Host', '')}").port
            host = f"http://localhost:{port}" if to == "out" else ""
            target = "/files/photo.png" if what == "img" else "/varn/lens.html"
            self._send(302, b"", "text/plain", {"Location": f"{host}{target}?via={what}-{to}"})
        elif path == "/escape/redirect":
            # Pages that try to leave the web for the worker's own files: a redirect, a script
            # and a link click. The worker's policy must stop each
            # (tests/e2e/worker/test_browser.py).
            self._send(302, b"", "text/plain", {"Location": ESCAPE_TARGET})
        elif path == "/escape/script":
            self._html(
                "Varn escape",
                f"<p>The keeper's log.</p><script>location.href = '{ESCAPE_TARGET}';</script>",
            )
        elif path == "/escape/link":
            self._html(
                "Varn escape",
                f"<p>The keeper's log.</p><a id='go' href='{ESCAPE_TARGET}'>log</a>"
                "<script>document.getElementById('go').click();</script>",
            )
        elif path == "/redirect-to-north":
            self._send(301, b"", "text/plain", {"Location": "/varn/north-light.html"})
        elif path == "/slow":
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<html><body><p>loading")
            time.sleep(120)  # never finishes within any sane timeout
        elif path.startswith("/delay/"):
            # /delay/SECONDS/varn/...: a topic page that takes its time to answer.
            seconds, _, rest = path.removeprefix("/delay/").partition("/")
            time.sleep(float(seconds))
            self._html(*PAGES.get("/" + rest, ("Not found", "<p>No such page.</p>")))
        elif path == "/big":
            para = "<p>" + "The island keeps a long archive. " * 30 + "</p>\n"
            body = _PAGE.format(title="Big", body=para * (5 * 1024 * 1024 // len(para) + 1))
            self._send(200, body.encode(), "text/html; charset=utf-8")
        elif path == "/latin1":
            body = _PAGE.replace('<meta charset="utf-8">', "").format(
                title="Café du Phare", body="<p>Le café du phare de Varn sert des crêpes.</p>"
            )
            self._send(200, body.encode("iso-8859-1"), "text/html; charset=iso-8859-1")
        elif path == "/js":
            body = (
                "<p id='t'>…</p><script>document.getElementById('t').textContent = "
                "'The fog signal of Varn sounds twice every 30 seconds.';</script>"
            )
            self._html("Fog signal", body)
        elif path == "/late":
            # Client-rendered: the text arrives 500 ms after load
            # (tests/e2e/worker/test_browser.py).
            body = (
                "<p id='t'>Loading…</p><script>addEventListener('load', () => setTimeout(() => {"
                "document.getElementById('t').textContent = "
                f"'{LATE_TEXT}';}}, 500));</script>"
            )
            self._html("Late keeper", body)
        elif path == "/late-fetch":
            # Rendered from data a script fetches after load; the data takes 400 ms.
            body = (
                "<p id='t'>Loading…</p><script>addEventListener('load', () => "
                "fetch('/data/late.json').then(r => r.json()).then(d => {"
                "document.getElementById('t').textContent = d.text;}));</script>"
            )
            self._html("Late data", body)
        elif path == "/data/late.json":
            time.sleep(0.4)
            self._send(200, json.dumps({"text": LATE_DATA}).encode(), "application/json")
        else:
            self._html("Not found", "<p>No such page.</p>", status=404)

    def _search(self, query: str) -> None:
        words = [w.lower() for w in query.split() if w]
        hits = []
        for path, (title, body) in PAGES.items():
            text = (title + " " + body).lower()
            score = sum(text.count(w) for w in words)
            if score:
                hits.append((score, path, title, html.unescape(body.split("</p>")[0][3:])))
        hits.sort(key=lambda h: (-h[0], h[1]))
        items = "".join(
            f'<li class="result"><a class="result-link" href="{p}">{html.escape(t)}</a>'
            f'<p class="snippet">{html.escape(s[:160])}</p></li>'
            for _, p, t, s in hits[:10]
        )
        self._html(
            f"Search: {query}",
            f"<form action='/search'><input name='q' value='{html.escape(query)}'></form>"
            f"<ol id='results'>{items}</ol>",
        )


def start(port: int = 0) -> tuple[ThreadingHTTPServer, str]:
    """Serve on 127.0.0.1 in a daemon thread; returns the server and its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True, name="local-site").start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def search_template(base: str) -> str:
    return f"{base}/search?q={{query}}"


__all__ = [
    "ESCAPE_TARGET",
    "FACTS",
    "LATE_DATA",
    "LATE_TEXT",
    "PAGES",
    "REQUESTED",
    "quote_plus",
    "search_template",
    "start",
]
