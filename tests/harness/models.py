"""A model service on loopback: the Anthropic Messages API (`POST /v1/messages`) answering
from a script of turns and recording every request, for goals driven by the coordinator's
real provider code. It lives in the test process, so it outlives the coordinators a test
kills and restarts, and the test reads exactly what the model was sent."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

KEY = "sk-ant-test-key-for-a-local-stand-in"


def computer(action: str, **inputs: Any) -> dict[str, Any]:
    """A computer tool_use block's input, as the model writes it (`coordinate` [x, y])."""
    return {"action": action, **inputs}


@dataclass
class AnthropicStandIn:
    """Answers each request with the next turn of `turns` (a turn: text and computer calls),
    then `end_turn` with "script finished"."""

    turns: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._served = 0
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length))
                raw = json.dumps(stand_in._answer(body)).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,))
        self._thread.daemon = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def env(self) -> dict[str, str]:
        """What a coordinator needs to call it."""
        return {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": self.url}

    def start(self) -> AnthropicStandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.requests.append(body)
            turn = self.turns[self._served] if self._served < len(self.turns) else None
            number = self._served = self._served + 1
        content: list[dict[str, Any]] = []
        if turn is None:
            content.append({"type": "text", "text": "script finished"})
        else:
            if turn.get("text"):
                content.append({"type": "text", "text": turn["text"]})
            for i, inputs in enumerate(turn.get("computer", ())):
                content.append(
                    {
                        "type": "tool_use",
                        "id": f"toolu_{number:02d}_{i}",
                        "name": "computer",
                        "input": inputs,
                    }
                )
        calls = any(block["type"] == "tool_use" for block in content)
        return {
            "id": f"msg_{number:02d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", ""),
            "content": content,
            "stop_reason": "tool_use" if calls else "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }

    def tool_results(self, request: int) -> dict[str, Any]:
        """The tool_result blocks the `request`-th request (from 0) carried, by tool_use id."""
        found: dict[str, Any] = {}
        for message in self.requests[request]["messages"]:
            content = message.get("content")
            if isinstance(content, list):
                for block in content:
                    if block.get("type") == "tool_result":
                        found[block["tool_use_id"]] = block
        return found
