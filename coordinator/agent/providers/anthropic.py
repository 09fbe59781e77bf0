"""The Anthropic Messages API (`POST {base}/v1/messages`) with its built-in computer-use tool.

A ToolSpec with `computer` becomes `{"type": "computer_20250124", "name": "computer", ...}` and
the request carries `anthropic-beta: computer-use-2025-01-24`. Anthropic's action names are the
neutral ones already; only the argument shapes differ (see providers/computer.py):

    coordinate [x, y]                        -> x, y   (left_click_drag: -> to_x, to_y)
    start_coordinate [x, y] (left_click_drag) -> x, y
    text (type)                              -> text
    text (key)                               -> key
    scroll_direction + scroll_amount         -> dx / dy (down and right are positive)
    duration (wait)                          -> seconds

and back again when earlier computer calls are replayed in the next request, so the model sees
its own format. The tool_use id is kept as the ToolCall id.
"""

from __future__ import annotations

import base64
from typing import Any

from coordinator.agent.conversation import (
    Content,
    ImagePart,
    Message,
    ModelError,
    ModelTurn,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from coordinator.agent.providers import computer, wire
from coordinator.agent.providers.http import post_json

API_VERSION = "2023-06-01"
COMPUTER_BETA = "computer-use-2025-01-24"
COMPUTER_TOOL_TYPE = "computer_20250124"
COMPUTER_TOOL_NAME = "computer"  # the built-in tool's name is fixed by the API
DEFAULT_MAX_TOKENS = 4096

_STOPS = {
    "tool_use": "tool_use",
    "end_turn": "end",
    "stop_sequence": "end",
    "pause_turn": "end",
    "max_tokens": "max_tokens",
    "refusal": "refusal",
}
_SCROLL = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}


class AnthropicModel:
    """One Claude model over the Messages API."""

    def __init__(
        self, model: str, *, api_key: str, base_url: str, max_tokens: int = DEFAULT_MAX_TOKENS
    ) -> None:
        self._model = model
        self._key = api_key
        self._url = base_url.rstrip("/") + "/v1/messages"
        self._max_tokens = max_tokens

    @property
    def name(self) -> str:
        return f"anthropic:{self._model}"

    def complete(
        self,
        system: str,
        messages: tuple[Message, ...],
        tools: tuple[ToolSpec, ...],
        *,
        timeout: float,
    ) -> ModelTurn:
        body, headers = self.request(system, messages, tools)
        doc = post_json(
            self._url, body, headers, timeout=timeout, provider="anthropic", secrets=(self._key,)
        )
        return parse_response(doc, computer.computer_tool(tools))

    def request(
        self, system: str, messages: tuple[Message, ...], tools: tuple[ToolSpec, ...]
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """The body and headers one call sends."""
        screen = computer.computer_tool(tools)
        body: dict[str, Any] = {
            "model": self._model,
            "max_tokens": self._max_tokens,
            "messages": [_message(m, screen) for m in messages],
        }
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [_tool(t) for t in tools]
        headers = {"x-api-key": self._key, "anthropic-version": API_VERSION}
        if screen is not None:
            headers["anthropic-beta"] = COMPUTER_BETA
        return body, headers


def _tool(tool: ToolSpec) -> dict[str, Any]:
    if tool.computer is not None:
        return {
            "type": COMPUTER_TOOL_TYPE,
            "name": COMPUTER_TOOL_NAME,
            "display_width_px": tool.computer.width,
            "display_height_px": tool.computer.height,
        }
    return {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}


def _message(message: Message, screen: ToolSpec | None) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [_tool_result(r) for r in message.tool_results]
    if message.text:
        blocks.append({"type": "text", "text": message.text})
    for call in message.tool_calls:
        if screen is not None and call.name == screen.name:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": call.id,
                    "name": COMPUTER_TOOL_NAME,
                    "input": to_anthropic_action(call.arguments),
                }
            )
        else:
            blocks.append(
                {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
            )
    if not blocks:
        # The API refuses empty content; an empty turn still has to keep its place.
        blocks.append({"type": "text", "text": "(empty)"})
    return {"role": message.role, "content": blocks}


def _tool_result(result: ToolResult) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": result.call_id}
    if result.content:
        block["content"] = [_content(part) for part in result.content]
    if result.is_error:
        block["is_error"] = True
    return block


def _content(part: Content) -> dict[str, Any]:
    if isinstance(part, ImagePart):
        return {
            "type": "image",
            "source": {
                "type": "base64",
                "media_type": part.media_type,
                "data": base64.b64encode(part.data).decode("ascii"),
            },
        }
    return {"type": "text", "text": part.text}


def parse_response(doc: dict[str, Any], screen: ToolSpec | None = None) -> ModelTurn:
    """A Messages API response -> ModelTurn; computer tool_use input made neutral."""
    content = doc.get("content")
    if not isinstance(content, list):
        raise ModelError("anthropic: the response has no content list")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            name = str(block.get("name", ""))
            raw = block.get("input")
            arguments = raw if isinstance(raw, dict) else {}
            if screen is not None and name == COMPUTER_TOOL_NAME:
                name, arguments = screen.name, from_anthropic_action(arguments)
            calls.append(ToolCall(id=str(block.get("id", "")), name=name, arguments=arguments))
    stop_reason = str(doc.get("stop_reason") or "")
    stop = _STOPS.get(stop_reason, "tool_use" if calls else "end")
    return ModelTurn(
        text="\n".join(t for t in texts if t),
        tool_calls=tuple(calls),
        stop=stop,
        usage=wire.usage(doc.get("usage"), "input_tokens", "output_tokens"),
    )


def from_anthropic_action(raw: dict[str, Any]) -> dict[str, Any]:
    """computer_20250124 input -> neutral computer arguments."""
    rest = dict(raw)
    action = str(rest.pop("action", ""))
    out: dict[str, Any] = {"action": action}
    start = rest.pop("start_coordinate", None)
    point = rest.pop("coordinate", None)
    if action == "left_click_drag":
        _put_point(out, "x", "y", start)
        _put_point(out, "to_x", "to_y", point)
    else:
        _put_point(out, "x", "y", point)
        if start is not None:
            out["start_coordinate"] = start
    if action == "key" and "text" in rest:
        out["key"] = rest.pop("text")
    elif action == "type" and "text" in rest:
        out["text"] = rest.pop("text")
    if action == "scroll":
        direction = rest.pop("scroll_direction", None)
        amount = rest.pop("scroll_amount", None)
        if direction in _SCROLL and isinstance(amount, int):
            ux, uy = _SCROLL[direction]
            out["dx"], out["dy"] = ux * amount, uy * amount
        else:  # let the worker name what is wrong
            out.update(scroll_direction=direction, scroll_amount=amount)
    if action == "wait" and "duration" in rest:
        out["seconds"] = rest.pop("duration")
    out.update(rest)  # anything else (hold_key's duration, a click's modifier text) as sent
    return out


def to_anthropic_action(args: dict[str, Any]) -> dict[str, Any]:
    """Neutral computer arguments -> computer_20250124 input (for replaying history)."""
    rest = dict(args)
    action = str(rest.pop("action", ""))
    out: dict[str, Any] = {"action": action}
    x, y = rest.pop("x", None), rest.pop("y", None)
    to_x, to_y = rest.pop("to_x", None), rest.pop("to_y", None)
    if action == "left_click_drag":
        if x is not None and y is not None:
            out["start_coordinate"] = [x, y]
        if to_x is not None and to_y is not None:
            out["coordinate"] = [to_x, to_y]
    elif x is not None and y is not None:
        out["coordinate"] = [x, y]
    if action == "key" and "key" in rest:
        out["text"] = rest.pop("key")
    if action == "scroll":
        dx, dy = int(rest.pop("dx", 0) or 0), int(rest.pop("dy", 0) or 0)
        if dy:
            out.update(scroll_direction="down" if dy > 0 else "up", scroll_amount=abs(dy))
        elif dx:
            out.update(scroll_direction="right" if dx > 0 else "left", scroll_amount=abs(dx))
    if action == "wait" and "seconds" in rest:
        out["duration"] = rest.pop("seconds")
    out.update(rest)
    return out


def _put_point(out: dict[str, Any], xname: str, yname: str, point: object) -> None:
    if isinstance(point, list | tuple) and len(point) == 2:
        out[xname], out[yname] = point[0], point[1]
    elif point is not None:
        out[xname] = point  # malformed: passed on for the worker to refuse by field
