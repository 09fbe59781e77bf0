"""Stand-ins for the remote model services, on loopback in the test process: the Anthropic
Messages API (`POST /v1/messages`) and the OpenAI Responses API (`POST /v1/responses`), each
answering the public wire format from a script and recording every request as it arrived.

They are the one mock of the agent-framework tests: the SDKs (their tool runners, retries,
parsing) and everything on the fleet side are real. A script entry is a reply (status,
headers, JSON body); `before` runs a step of the test when a given request arrives, ahead of
its answer (a kill switch engaged between two model turns, say).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

ANTHROPIC_KEY = "sk-ant-test-key-for-a-local-stand-in"
OPENAI_KEY = "sk-test-key-for-a-local-stand-in"
_ids = itertools.count(1)


@dataclass(frozen=True)
class Reply:
    body: dict[str, Any]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Request:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class ModelStandIn:
    """Answers the n-th POST with the n-th reply of `script` (a model that has said all it
    had to say answers 500, so a runner that asks once too often fails loudly)."""

    def __init__(
        self, script: Iterable[Reply], *, before: dict[int, Callable[[], None]] | None = None
    ) -> None:
        self.script = list(script)
        self.before = dict(before or {})
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                reply = stand_in._answer(
                    Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                raw = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                for name, value in {"content-type": "application/json", **reply.headers}.items():
                    self.send_header(name, value)
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

    def __enter__(self) -> ModelStandIn:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _answer(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            number = len(self.requests)
            step = self.before.get(number)
            reply = self.script[number - 1] if number <= len(self.script) else None
        if step is not None:
            step()
        if reply is None:
            return Reply({"error": {"message": f"request {number}: the script has ended"}}, 500)
        return reply


def rate_limited(kind: str = "anthropic") -> Reply:
    """A 429 the SDK retries: `retry-after-ms: 1` asks for a wait of one millisecond (a zero
    is read as no advice, and the SDK's own back-off would add about half a second)."""
    if kind == "anthropic":
        body: dict[str, Any] = {
            "type": "error",
            "error": {"type": "rate_limit_error", "message": "slow down"},
        }
    else:
        body = {
            "error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}
        }
    return Reply(body, 429, {"retry-after-ms": "1", "retry-after": "0"})


# ----------------------------------------------------------------------- Anthropic Messages


def member(name: str, **tool_input: Any) -> dict[str, Any]:
    """A computer toolset member call, as the Messages API writes it."""
    return {
        "type": "tool_use",
        "id": f"toolu_{next(_ids):04d}",
        "name": name,
        "input": tool_input,
        "toolset_name": "computer",
    }


def message(*blocks: dict[str, Any], text: str = "") -> Reply:
    """An assistant message: `tool_use` when it calls members, else `end_turn`."""
    content = ([{"type": "text", "text": text}] if text else []) + list(blocks)
    calls = any(b["type"] == "tool_use" for b in blocks)
    return Reply(
        {
            "id": f"msg_{next(_ids):04d}",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-5-5",
            "content": content,
            "stop_reason": "tool_use" if calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 10},
        }
    )


def tool_results(request: Request) -> list[dict[str, Any]]:
    """The `tool_result` blocks a Messages request carries (a threaded turn sends only the new
    messages, so these are the answers to the model's last turn)."""
    return [
        block
        for msg in request.body.get("messages", [])
        if msg.get("role") == "user" and isinstance(msg.get("content"), list)
        for block in msg["content"]
        if block.get("type") == "tool_result"
    ]


def result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    return " ".join(part.get("text", "") for part in content or [] if part.get("type") == "text")


# ----------------------------------------------------------------------- OpenAI Responses


def _response(output: list[dict[str, Any]]) -> Reply:
    return Reply(
        {
            "id": f"resp_{next(_ids):04d}",
            "object": "response",
            "created_at": int(time.time()),
            "model": "gpt-5.5",
            "status": "completed",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "metadata": {},
            "temperature": None,
            "top_p": None,
            "text": {"format": {"type": "text"}},
            "usage": {
                "input_tokens": 10,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 10,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 20,
            },
        }
    )


def computer_call(*actions: dict[str, Any]) -> Reply:
    """A response whose output is one batched `computer_call` of the GA computer tool."""
    n = next(_ids)
    return _response(
        [
            {
                "type": "computer_call",
                "id": f"cu_{n:04d}",
                "call_id": f"call_{n:04d}",
                "actions": list(actions),
                "pending_safety_checks": [],
                "status": "completed",
            }
        ]
    )


def said(text: str) -> Reply:
    """A response whose output is the assistant's final message."""
    return _response(
        [
            {
                "type": "message",
                "id": f"msg_{next(_ids):04d}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ]
    )


def computer_outputs(request: Request) -> list[dict[str, Any]]:
    """The `computer_call_output` items of a Responses request."""
    items = request.body.get("input")
    if not isinstance(items, list):
        return []
    return [i for i in items if isinstance(i, dict) and i.get("type") == "computer_call_output"]
