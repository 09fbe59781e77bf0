"""An estimate of how many tokens a model call's input takes, without any provider's tokenizer.

Text and JSON count one token per four characters, an image a fixed ~1,500 (a screenshot
scaled to the computer tool's space costs about that with the providers we speak). It is an
estimate, good for budgets and trends, not for billing: providers report real usage per call.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable

from coordinator.agent.conversation import Content, ImagePart, Message, ToolSpec

CHARS_PER_TOKEN = 4
IMAGE_TOKENS = 1500
# Per message and per tool: role markers, ids and block framing the wire formats add.
MESSAGE_OVERHEAD = 4
TOOL_OVERHEAD = 8
COMPUTER_TOOL_TOKENS = 700  # the providers' built-in computer tools carry a long definition


def estimate_tokens(
    messages: Iterable[Message], system: str = "", tools: Iterable[ToolSpec] = ()
) -> int:
    """Estimated input tokens of a call with this system prompt, conversation and tools."""
    chars = len(system)
    tokens = 0
    for message in messages:
        tokens += MESSAGE_OVERHEAD
        chars += len(message.text)
        for call in message.tool_calls:
            chars += len(call.id) + len(call.name) + len(_json(call.arguments))
        for result in message.tool_results:
            chars += len(result.call_id)
            content_chars, content_tokens = _content(result.content)
            chars += content_chars
            tokens += content_tokens
    for tool in tools:
        tokens += TOOL_OVERHEAD
        if tool.computer is not None:
            tokens += COMPUTER_TOOL_TOKENS
        chars += len(tool.name) + len(tool.description) + len(_json(tool.parameters))
    return tokens + math.ceil(chars / CHARS_PER_TOKEN)


def estimate_content_tokens(content: Iterable[Content]) -> int:
    """Estimated tokens of one tool result's content (what archiving it would save)."""
    chars, tokens = _content(content)
    return tokens + math.ceil(chars / CHARS_PER_TOKEN)


def _content(content: Iterable[Content]) -> tuple[int, int]:
    chars = tokens = 0
    for part in content:
        if isinstance(part, ImagePart):
            tokens += IMAGE_TOKENS
        else:
            chars += len(part.text)
    return chars, tokens


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
