"""A local search site for the search backends: a fake SearXNG (its real JSON shape) and
results pages modelled on real engines' markup (tests/fixtures/search)."""

from __future__ import annotations

import html
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

FIXTURES = Path(__file__).parent / "fixtures" / "search"


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
