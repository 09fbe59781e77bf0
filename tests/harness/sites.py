"""Local web sites that tests drive real programs against, each a server in a daemon thread.

DesktopSite: one page for desktop tests (a red marker, a text field) that reports what the
browser really received (submitted text, clicks, wheel turns, drags) back to this server, so
tests assert effects on a real window, not calls made.

SearchSite: the search backends' counterpart: a fake SearXNG (its real JSON shape) and results
pages modelled on real engines' markup (tests/fixtures/search).
"""

from __future__ import annotations

import gzip
import html
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

# Page coordinates of the things on the page (the window is at 0,0 and fills the screen).
MARKER = (600, 100, 200, 200)  # x, y, width, height of the solid #ff0000 block
FIELD = (100, 420, 800, 40)

_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>deskfleet desktop</title>
<style>
html, body {{ margin: 0; padding: 0; background: #ffffff; overflow: hidden;
             width: 100%; height: 100%; }}
#marker {{ position: absolute; left: {mx}px; top: {my}px; width: {mw}px; height: {mh}px;
          background: #ff0000; }}
#field {{ position: absolute; left: {fx}px; top: {fy}px; width: {fw}px; height: {fh}px;
         font-size: 18px; box-sizing: border-box; }}
</style></head>
<body>
<div id="marker"></div>
<form id="form"><input id="field" name="text" autocomplete="off" spellcheck="false"></form>
<script>
function report(kind, data) {{
  fetch("/" + kind, {{method: "POST", headers: {{"Content-Type": "application/json"}},
                      body: JSON.stringify(data)}});
}}
document.getElementById("form").addEventListener("submit", e => {{
  e.preventDefault();
  const field = document.getElementById("field");
  report("submit", {{text: field.value}});
  field.value = "";
}});
for (const kind of ["click", "dblclick", "contextmenu", "mousedown", "mouseup", "auxclick"]) {{
  document.addEventListener(kind, e => {{
    if (kind === "contextmenu") e.preventDefault();  // a native menu would grab the pointer
    report("event", {{type: kind, button: e.button, x: e.clientX, y: e.clientY,
                    detail: e.detail, t: e.timeStamp}});
  }});
}}
document.addEventListener("wheel", e => report("event", {{
  type: "wheel", dx: Math.sign(e.deltaX), dy: Math.sign(e.deltaY), x: e.clientX, y: e.clientY
}}), {{passive: true}});
</script></body></html>"""


def page() -> bytes:
    mx, my, mw, mh = MARKER
    fx, fy, fw, fh = FIELD
    return _PAGE.format(mx=mx, my=my, mw=mw, mh=mh, fx=fx, fy=fy, fw=fw, fh=fh).encode()


class DesktopSite:
    """The server in a daemon thread; `submitted` and `events` are what the page reported."""

    def __init__(self) -> None:
        self.submitted: list[str] = []
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet: tests read their own output
                pass

            def do_GET(self) -> None:
                body = page()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                data = json.loads(self.rfile.read(length).decode("utf-8"))
                with site._lock:
                    if self.path == "/submit":
                        site.submitted.append(data["text"])
                    else:
                        site.events.append(data)
                self.send_response(204)
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/"

    def start(self) -> DesktopSite:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reset(self) -> None:
        with self._lock:
            self.submitted.clear()
            self.events.clear()

    def snapshot(self) -> tuple[list[str], list[dict[str, Any]]]:
        with self._lock:
            return list(self.submitted), list(self.events)


# ------------------------------------------------------------------ search

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "search"


def searxng_answer(query: str, results: list[tuple[str, str, str]]) -> dict[str, object]:
    """A SearXNG `format=json` answer, as an instance returns it."""
    return {
        "query": query,
        "number_of_results": 0,
        "results": [
            {
                "url": url,
                "title": title,
                "content": content,
                "engine": "duckduckgo",
                "parsed_url": list(urlparse(url)),
                "template": "default.html",
                "engines": ["duckduckgo", "brave"],
                "positions": [i + 1, i + 2],
                "score": 2.0 / (i + 1),
                "category": "general",
                "publishedDate": None,
            }
            for i, (url, title, content) in enumerate(results)
        ],
        "answers": [],
        "corrections": [],
        "infoboxes": [],
        "suggestions": ["lighthouse keeper"],
        "unresponsive_engines": [["google", "timeout"]] if not results else [],
    }


class SearchSite:
    """Serves /searxng/search (JSON), /closed/search (an instance without json: 403),
    /ddg?q= and /bing?q= (fixtures); `results` is what the fake SearXNG answers."""

    def __init__(self) -> None:
        self.results: list[tuple[str, str, str]] = []
        self.asked: list[str] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                url = urlparse(self.path)
                query = parse_qs(url.query)
                q = query.get("q", [""])[0]
                site.asked.append(self.path)
                if url.path == "/searxng/search" and query.get("format") == ["json"]:
                    hits = [r for r in site.results if any(w in r[2].lower() for w in q.split())]
                    body = json.dumps(searxng_answer(q, hits)).encode()
                    self._send(200, body, "application/json")
                elif url.path in ("/searxng/search", "/closed/search"):
                    self._send(403, b"<html><body>403 Forbidden</body></html>", "text/html")
                elif url.path in ("/ddg", "/bing"):
                    name = "ddg_html.html" if url.path == "/ddg" else "bing.html"
                    page = (FIXTURES / name).read_text().replace("{query}", html.escape(q))
                    self._send(200, page.encode(), "text/html; charset=utf-8")
                else:
                    self._send(404, b"not found", "text/plain")

            def _send(self, status: int, body: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> SearchSite:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# ------------------------------------------------------------------ hostile pages

_INFLATE = """<!doctype html><html><head><meta charset="utf-8"><title>small page</title></head>
<body><p>A small page.</p><script>
window.addEventListener('load', () => {{
  document.body.textContent = 'lorem ipsum dolor sit amet '.repeat({repeat});
}});
</script></body></html>"""
_HEAP = """<!doctype html><html><head><title>heap</title></head><body><p>heap</p><script>
// Synchronously, before `load`: the page is never read while its heap is still growing, however
// slowly a loaded machine runs it.
const kept = [];
for (;;) {
  for (let i = 0; i < 20000; i++) kept.push({n: i, s: 'x' + Math.random()});
  kept.push(new Array(1000000).fill(Math.random()));
}
</script></body></html>"""


_LOCAL_FILE = "file:///etc/passwd"
_ESCAPES = {
    "meta": f'<meta http-equiv="refresh" content="0; url={_LOCAL_FILE}">',
    "iframe": f'<iframe src="{_LOCAL_FILE}"></iframe>',
    "fetch": (
        f"<pre id='out'>waiting</pre><script>fetch('{_LOCAL_FILE}').then(r => r.text())"
        ".then(t => out.textContent = t, e => out.textContent = 'fetch refused: ' + e);</script>"
    ),
}


class HostileSite:
    """Pages that attack the worker, each small as served. Its memory (30.9):

    /inflate?mb=N   a 300-byte page that sets N MiB of text once it has loaded
    /heap           a page whose script piles up objects until something stops it
    /stream?mb=N    a document streamed without a Content-Length (N MiB, then the end)

    and the worker's files and the browser's reach (the forms that held, kept in the tests):

    /escape/meta, /escape/iframe, /escape/fetch   file:///etc/passwd by a meta refresh, a frame
                                                  and a fetch (each page says "keeper's log")
    /popup          a page that opens pop-ups (window.open, a target=_blank click) to /opened
    /download       a document served as an attachment (Chromium would save it)

    `requested` lists the paths asked for, in order.
    """

    def __init__(self) -> None:
        self.requested: list[str] = []
        self._compressed: dict[float, bytes] = {}
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                url = urlparse(self.path)
                mb = float(parse_qs(url.query).get("mb", ["40"])[0])
                if url.path == "/inflate":
                    repeat = int(mb * 1024 * 1024 / 27) + 1
                    self._send(_INFLATE.format(repeat=repeat).encode())
                elif url.path == "/heap":
                    self._send(_HEAP.encode())
                elif url.path == "/stream":
                    self._stream(int(mb * 1024 * 1024))
                elif url.path == "/compressed":
                    self._send(site.compressed(mb), headers={"Content-Encoding": "gzip"})
                elif url.path.startswith("/escape/") and url.path[8:] in _ESCAPES:
                    page = f"<title>escape</title><p>The keeper's log.</p>{_ESCAPES[url.path[8:]]}"
                    self._send(page.encode())
                elif url.path == "/popup":
                    script = "window.open('/opened?by=open');document.getElementById('go').click();"
                    self._send(
                        b"<title>popup</title><p>The keeper's log.</p>"
                        b"<a id='go' href='/opened?by=click' target='_blank'>more</a>"
                        + f"<script>{script}</script>".encode()
                    )
                elif url.path == "/opened":
                    self._send(b"<title>opened</title><p>a pop-up</p>")
                elif url.path == "/download":
                    self._send(
                        b"keeper,year\nAda Morrow,1962\n",
                        "text/csv",
                        {"Content-Disposition": 'attachment; filename="keepers.csv"'},
                    )
                else:
                    self.send_error(404)

            def _send(
                self,
                body: bytes,
                kind: str = "text/html; charset=utf-8",
                headers: dict[str, str] | None = None,
            ) -> None:
                site.requested.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def _stream(self, size: int) -> None:
                # The end of the body is the end of the connection: nothing says how long.
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                chunk = b"<p>" + b"The keeper's log, again. " * 2000 + b"</p>\n"
                sent = 0
                try:
                    self.wfile.write(b"<!doctype html><title>stream</title>")
                    while sent < size:
                        self.wfile.write(chunk)
                        sent += len(chunk)
                except OSError:
                    pass  # the worker's guard cut it: what the test is about

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def compressed(self, mb: float) -> bytes:
        """N MiB of page once decoded, about a thousandth of it on the wire (made once: a test
        that measures the worker's memory must not count the site's)."""
        if mb not in self._compressed:
            page = b"<title>compressed</title><p>The keeper's log.</p><script type=x>"
            page += b"a" * int(mb * 1024 * 1024) + b"</script>"
            self._compressed[mb] = gzip.compress(page, compresslevel=9)
        return self._compressed[mb]

    def start(self) -> HostileSite:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
