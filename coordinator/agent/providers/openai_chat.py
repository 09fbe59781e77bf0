"""An OpenAI-compatible chat-completions API (`POST {base}/chat/completions`) with function tools.

Meant for local model servers (llama.cpp, vLLM, Ollama, LM Studio all speak it), so it assumes
nothing beyond plain function calling: the computer tool is an ordinary function whose
arguments are the neutral ones (providers/computer.py), and the model is told the display size
in its description. The key is optional: local servers usually take none.
"""

from __future__ import annotations

from typing import Any

from coordinator.agent.conversation import (
    ImagePart,
    Message,
    ModelError,
    ModelTurn,
    TextPart,
    ToolCall,
    ToolSpec,
)
from coordinator.agent.providers import computer, wire
from coordinator.agent.providers.http import post_json

_STOPS = {
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "stop": "end",
    "length": "max_tokens",
    "content_filter": "refusal",
}


class OpenAIChatModel:
    """One model behind a chat-completions endpoint."""

    def __init__(
        self, model: str, *, base_url: str, api_key: str = "", max_tokens: int | None = None
    ) -> None:
        self._model = model
        self._key = api_key
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._max_tokens = max_tokens

    @property
    def name(self) -> str:
        return f"openai-chat:{self._model}"

    def complete(
        self,
        system: str,
        messages: tuple[Message, ...],
        tools: tuple[ToolSpec, ...],
        *,
        timeout: float,
    ) -> ModelTurn:
        body = self.request(system, messages, tools)
        headers = {"authorization": f"Bearer {self._key}"} if self._key else {}
        doc = post_json(
            self._url, body, headers, timeout=timeout, provider="openai-chat", secrets=(self._key,)
        )
        return parse_response(doc)

    def request(
        self, system: str, messages: tuple[Message, ...], tools: tuple[ToolSpec, ...]
    ) -> dict[str, Any]:
        """The body one call sends."""
        wire_messages: list[dict[str, Any]] = []
        if system:
            wire_messages.append({"role": "system", "content": system})
        for message in messages:
            wire_messages.extend(_messages(message))
        body: dict[str, Any] = {"model": self._model, "messages": wire_messages}
        if tools:
            body["tools"] = [_tool(t) for t in tools]
        if self._max_tokens:
            body["max_tokens"] = self._max_tokens
        return body


def _tool(tool: ToolSpec) -> dict[str, Any]:
    description = tool.description
    parameters = tool.parameters
    if tool.computer is not None:
        size = f"The screen is {tool.computer.width}x{tool.computer.height} pixels."
        description = f"{description} {size}".strip()
        parameters = parameters or computer.SCHEMA
    return {
        "type": "function",
        "function": {"name": tool.name, "description": description, "parameters": parameters},
    }


def _messages(message: Message) -> list[dict[str, Any]]:
    if message.role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": message.text or None}
        if message.tool_calls:
            out["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": wire.dump_arguments(call.arguments),
                    },
                }
                for call in message.tool_calls
            ]
        return [out]
    result: list[dict[str, Any]] = []
    user: list[dict[str, Any]] = []
    for tool_result in message.tool_results:
        text = "\n".join(p.text for p in tool_result.content if isinstance(p, TextPart))
        if tool_result.is_error:
            text = f"error: {text}" if text else "error"
        images = [p for p in tool_result.content if isinstance(p, ImagePart)]
        if images:
            # A tool message carries text only: its images follow in the next user message.
            text += f"\n[{len(images)} image(s) follow in the next user message]"
            user.append({"type": "text", "text": f"images from tool call {tool_result.call_id}:"})
            user.extend(
                {"type": "image_url", "image_url": {"url": wire.data_url(p)}} for p in images
            )
        result.append({"role": "tool", "tool_call_id": tool_result.call_id, "content": text})
    if message.text:
        user.append({"type": "text", "text": message.text})
    if user:
        if len(user) == 1 and user[0]["type"] == "text":
            # Plain text as a string: some local servers take nothing else.
            result.append({"role": "user", "content": user[0]["text"]})
        else:
            result.append({"role": "user", "content": user})
    elif not message.tool_results:
        result.append({"role": "user", "content": ""})
    return result


def parse_response(doc: dict[str, Any]) -> ModelTurn:
    """A chat-completions response -> ModelTurn."""
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ModelError("openai-chat: the response has no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise ModelError("openai-chat: the response's choice has no message")
    calls: list[ToolCall] = []
    for n, raw in enumerate(message.get("tool_calls") or (), start=1):
        if not isinstance(raw, dict) or not isinstance(raw.get("function"), dict):
            continue
        function = raw["function"]
        calls.append(
            ToolCall(
                # Some local servers leave ids out; the result must still name its call.
                id=str(raw.get("id") or f"call_{n}"),
                name=str(function.get("name", "")),
                arguments=wire.parse_arguments(function.get("arguments")),
            )
        )
    text = message.get("content")
    refusal = message.get("refusal")
    finish = str(choice.get("finish_reason") or "")
    stop = _STOPS.get(finish, "tool_use" if calls else "end")
    if refusal:
        text, stop = "\n".join(str(t) for t in (text, refusal) if t), "refusal"
    elif calls and stop == "end":
        stop = "tool_use"  # some servers say "stop" even when they called tools
    return ModelTurn(
        text=text if isinstance(text, str) else "",
        tool_calls=tuple(calls),
        stop=stop,
        usage=wire.usage(doc.get("usage"), "prompt_tokens", "completion_tokens"),
    )
