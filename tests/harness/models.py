"""Model services on loopback, standing in for the remote ones no test can reach: the Anthropic
Messages API (`POST /v1/messages`) and the OpenAI Responses API (`POST /v1/responses`), each
answering from a script of turns and recording every request, for goals driven by the
coordinator's real provider code on the official SDKs. They live in the test process, so they
outlive the coordinators a test kills and restarts, and the test reads exactly what the model
was sent. Only the remote service is stood in for: the SDK, its retries and the adapters run
as they do against the real one.

Each speaks the computer tool the request declares: the Anthropic stand-in answers in the
`computer_toolset_20260801` format (member-named `tool_use` blocks with `toolset_name`) when
the request carries that toolset, and in the single `computer` tool's format otherwise; the
OpenAI stand-in batches a turn's actions in one `computer_call` for the `computer` tool, and
sends one action per call for `computer_use_preview`.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

KEY = "sk-ant-test-key-for-a-local-stand-in"
OPENAI_KEY = "sk-proj-test-key-for-a-local-stand-in"
TOOLSET = "computer_toolset_20260801"


def computer(action: str, **inputs: Any) -> dict[str, Any]:
    """A computer call as the model writes it, in the single tool's shape (`coordinate`
    [x, y]); the Anthropic stand-in sends it as the toolset member `action` when the request
    declares the toolset."""
    return {"action": action, **inputs}


@dataclass(frozen=True)
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class _LoopbackService:
    """A JSON service on 127.0.0.1 that records each request and answers it with `_answer`,
    or with the next of `failures` (status, body, headers) while any are left."""

    turns: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    recorded: list[Recorded] = field(default_factory=list)
    failures: list[tuple[int, dict[str, Any], dict[str, str]]] = field(default_factory=list)
    url: str = ""

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._served = 0
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length))
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, answer, extra = service._reply(Recorded(self.path, headers, body))
                raw = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                for name, value in extra.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,))
        self._thread.daemon = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Any:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _reply(self, request: Recorded) -> tuple[int, dict[str, Any], dict[str, str]]:
        with self._lock:
            self.recorded.append(request)
            if self.failures:
                return self.failures.pop(0)
            self.requests.append(request.body)
            turn = self.turns[self._served] if self._served < len(self.turns) else None
            number = self._served = self._served + 1
        return 200, self._answer(request.body, turn, number), {}

    def _answer(
        self, body: dict[str, Any], turn: dict[str, Any] | None, number: int
    ) -> dict[str, Any]:
        raise NotImplementedError


@dataclass
class AnthropicStandIn(_LoopbackService):
    """Answers each request with the next turn of `turns` (a turn: text and computer calls
    made with `computer(...)`), then `end_turn` with "script finished"."""

    @property
    def env(self) -> dict[str, str]:
        """What a coordinator needs to call it."""
        return {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": self.url}

    def start(self) -> AnthropicStandIn:
        super().start()
        return self

    def _answer(
        self, body: dict[str, Any], turn: dict[str, Any] | None, number: int
    ) -> dict[str, Any]:
        toolset = any(tool.get("type") == TOOLSET for tool in body.get("tools", ()))
        content: list[dict[str, Any]] = []
        if turn is None:
            content.append({"type": "text", "text": "script finished"})
        else:
            if turn.get("text"):
                content.append({"type": "text", "text": turn["text"]})
            for i, inputs in enumerate(turn.get("computer", ())):
                block: dict[str, Any] = {"type": "tool_use", "id": f"toolu_{number:02d}_{i}"}
                if toolset:
                    member = dict(inputs)
                    block["name"] = member.pop("action")
                    block["input"] = member
                    block["toolset_name"] = "computer"
                else:
                    block["name"] = "computer"
                    block["input"] = inputs
                content.append(block)
        calls = any(block["type"] == "tool_use" for block in content)
        return {
            "id": f"msg_{number:02d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", ""),
            "content": content,
            "stop_reason": "tool_use" if calls else "end_turn",
            "stop_sequence": None,
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


@dataclass
class OpenAIResponsesStandIn(_LoopbackService):
    """Answers each request with the next turn of `turns` (a turn: text and `actions`, the
    Responses API's own action objects such as `{"type": "click", "button": "left", "x": 1,
    "y": 2}`, all in one computer_call), then a message "script finished"."""

    @property
    def env(self) -> dict[str, str]:
        """What a coordinator needs to call it."""
        return {"OPENAI_API_KEY": OPENAI_KEY, "OPENAI_BASE_URL": self.url + "/v1"}

    def start(self) -> OpenAIResponsesStandIn:
        super().start()
        return self

    def _answer(
        self, body: dict[str, Any], turn: dict[str, Any] | None, number: int
    ) -> dict[str, Any]:
        preview = any(t.get("type") == "computer_use_preview" for t in body.get("tools", ()))
        output: list[dict[str, Any]] = []
        text = "script finished" if turn is None else turn.get("text")
        if text:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{number:02d}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            )
        actions = list(turn.get("actions", ())) if turn else []
        if actions:
            call: dict[str, Any] = {
                "type": "computer_call",
                "id": f"cu_{number:02d}",
                "call_id": f"call_{number:02d}",
                "pending_safety_checks": [],
                "status": "completed",
            }
            if preview:
                call["action"] = actions[0]
            else:
                call["actions"] = actions
            output.append(call)
        return {
            "id": f"resp_{number:02d}",
            "object": "response",
            "created_at": 0,
            "status": "completed",
            "model": body.get("model", ""),
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": body.get("tools", []),
            "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
        }

    def computer_outputs(self, request: int) -> dict[str, Any]:
        """The computer_call_output items the `request`-th request (from 0) carried, by
        call_id."""
        return {
            item["call_id"]: item
            for item in self.requests[request]["input"]
            if item.get("type") == "computer_call_output"
        }
