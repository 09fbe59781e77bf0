"""An OpenAI-compatible chat-completions API (`client.chat.completions.create` on the official
`openai` SDK) with function tools.

Meant for local model servers (llama.cpp, vLLM, Ollama, LM Studio all speak it), so it assumes
nothing beyond plain function calling: the computer tool is an ordinary function whose
arguments are the neutral ones (providers/computer.py), and the model is told the display size
in its description. The key is optional: local servers usually take none, and a request without
one carries no Authorization header at all.

The response is read in its JSON form (`to_dict()`): local servers leave out fields the SDK's
types call required (a tool call's id, say), and the adapter fills those in itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from coordinator.agent.conversation import (
    ImagePart,
    Message,
    ModelError,
    ModelTurn,
    TextPart,
    ToolCall,
    ToolSpec,
)
from coordinator.agent.providers import calls, computer, wire

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion

# The SDK will not make a client without a key; this one is never sent (see `complete`).
NO_KEY = "no-key"

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
        self,
        model: str,
        *,
        base_url: str,
        api_key: str = "",
        max_tokens: int | None = None,
        max_retries: int = calls.MAX_RETRIES,
    ) -> None:
        self._model = model
        self._key = api_key
        self._base_url = base_url.rstrip("/")
        self._max_tokens = max_tokens
        self._max_retries = max_retries

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
        # Imported on first use: most coordinators never call it (see providers/anthropic.py).
        import openai

        body = self.request(system, messages, tools)
        endpoint = calls.Endpoint(
            "openai-chat",
            self._base_url,
            calls.SDKErrors(
                openai.APIStatusError,
                openai.APITimeoutError,
                openai.APIConnectionError,
                openai.OpenAIError,
            ),
            (self._key,),
        )
        # Without a key the header is left out (an explicit Omit), not sent with a placeholder.
        headers: dict[str, Any] = {} if self._key else {"Authorization": openai.omit}

        async def call() -> ChatCompletion:
            async with openai.AsyncOpenAI(
                api_key=self._key or NO_KEY,
                base_url=self._base_url,
                max_retries=self._max_retries,
                timeout=timeout,
            ) as client:
                # JSON built here, not the SDK's TypedDicts (see providers/anthropic.py).
                completion = await client.chat.completions.create(**body, extra_headers=headers)
                return cast("ChatCompletion", completion)

        completion = calls.run(endpoint, call, timeout=timeout)
        return parse_response(completion.to_dict())

    def request(
        self, system: str, messages: tuple[Message, ...], tools: tuple[ToolSpec, ...]
    ) -> dict[str, Any]:
        """The keyword arguments of `chat.completions.create` for one call."""
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
