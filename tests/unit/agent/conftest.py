"""The provider tests' stand-in model service (tests/unit/agent/conversations.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.unit.agent.conversations import FakeProvider, Recorded, Reply


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    fake = FakeProvider(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            body = json.loads(self.rfile.read(length))
            headers = {k.lower(): v for k, v in self.headers.items()}
            fake.requests.append(Recorded(self.path, headers, body))
            reply = fake.replies.pop(0) if fake.replies else Reply(500, b"{}")
            if reply.delay:
                fake.release.wait(reply.delay)  # a stalled server, released at teardown
            self.send_response(reply.status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(reply.raw)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            try:
                self.wfile.write(reply.raw)
            except OSError:
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield fake
    fake.release.set()
    server.shutdown()
    server.server_close()
    thread.join(5)
