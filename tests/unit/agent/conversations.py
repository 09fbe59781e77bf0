"""What the provider tests send and where: a conversation with every kind of content, the
tools it offers, and a local stand-in for a model service.

The real model services cannot be reached from here, so each adapter, on its official SDK,
talks to a stdlib HTTP server in a thread that records the request it got and answers with a
recorded-style response body (or an error, with its headers) queued by the test.
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from coordinator.agent.conversation import (
    ComputerSpec,
    ImagePart,
    Message,
    TextPart,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from coordinator.agent.providers.anthropic import MEMBERS

KEY = "sk-test-0123456789abcdef"
PNG = b"\x89PNG\r\n\x1a\n" + b"screenshot-bytes" * 4
PNG_B64 = base64.b64encode(PNG).decode()
SYSTEM = "You operate a fleet of machines."

RESEARCH = ToolSpec(
    "research",
    "Research a question on the web.",
    {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)


def computer_spec(actions: tuple[str, ...] = MEMBERS) -> ToolSpec:
    """The computer tool as the goal's tools offer it: `actions` in its schema's enum."""
    return ToolSpec(
        "computer",
        "Act on the approved desktop.",
        {"type": "object", "properties": {"action": {"type": "string", "enum": list(actions)}}},
        ComputerSpec(1280, 800),
    )


COMPUTER = computer_spec()
TOOLS = (RESEARCH, COMPUTER)

# A conversation with every kind of content: text, a function call and its text result, a
# computer call and its screenshot result.
CONVERSATION = (
    Message("user", "Find the form and fill it in.", kind="request"),
    Message(
        "assistant",
        "Let me look that up.",
        tool_calls=(ToolCall("toolu_01", "research", {"query": "form url"}),),
    ),
    Message(
        "user",
        tool_results=(ToolResult("toolu_01", (TextPart("http://site.test/form"),)),),
    ),
    Message(
        "assistant",
        tool_calls=(ToolCall("toolu_02", "computer", {"action": "left_click", "x": 10, "y": 20}),),
    ),
    Message(
        "user",
        "Guidance: use the work email.",
        tool_results=(ToolResult("toolu_02", (ImagePart("image/png", PNG),)),),
        kind="guidance",
    ),
)


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class Reply:
    status: int
    raw: bytes
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class FakeProvider:
    """A local stand-in for a model service: records requests, answers from a queue (a 500
    once the queue is empty)."""

    url: str
    requests: list[Recorded] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def reply(
        self,
        body: Any,
        status: int = 200,
        delay: float = 0.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.replies.append(Reply(status, raw, delay, headers or {}))

    @property
    def last(self) -> Recorded:
        return self.requests[-1]
