"""The Anthropic Messages API on the official `anthropic` SDK, with a built-in computer tool.

Which computer tool is the coordinator's choice (`serve --anthropic-computer-tool`):

    computer_toolset_20260801  (default) generally available: one nameless `tools[]` entry,
                               `{"type": "computer_toolset_20260801", "configs": {...}}`, for a
                               family of member tools, sent with `client.messages.create`. Each
                               call is a `tool_use` named after its member (`left_click`) with
                               `toolset_name: "computer"`, and its `tool_result` echoes that
                               `toolset_name`. Members the ToolSpec does not offer are sent as
                               `{"enabled": false}`, so the model is never served them.
    computer_20251124          the older single tool `computer` (`input.action` names the
    computer_20250124          action), with its display size, sent with
                               `client.beta.messages.create` and the `computer-use-2025-11-24`
                               / `computer-use-2025-01-24` beta header.

The member names are the neutral action names already (SPEC §5); only the input shapes differ
(see providers/computer.py):

    coordinate [x, y]                         -> x, y   (left_click_drag: -> to_x, to_y)
    start_coordinate [x, y] (left_click_drag) -> x, y
    text (type)                               -> text
    text (key, hold_key)                      -> key    (key's repeat N: the combo N times)
    scroll_direction + scroll_amount          -> dx / dy (down and right are positive)
    duration (wait, hold_key)                 -> seconds
    region [x0, y0, x1, y1] (zoom)            -> region

and back again when earlier computer calls are replayed in the next request, so the model sees
its own format. Anything else (a click's `text`, the keys held during it) is passed on as sent,
for the worker to refuse by name. The tool_use id is kept as the ToolCall id.

The response is read in its JSON form (`to_dict()`), the one shape the GA and beta messages
share.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

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
from coordinator.agent.providers import calls, computer, wire
from shared import desktop_scope

if TYPE_CHECKING:
    from anthropic.types import Message as SDKMessage
    from anthropic.types.beta import BetaMessage

ComputerTool = Literal["computer_toolset_20260801", "computer_20251124", "computer_20250124"]
COMPUTER_TOOLS: tuple[ComputerTool, ...] = get_args(ComputerTool)
TOOLSET: ComputerTool = "computer_toolset_20260801"
DEFAULT_COMPUTER_TOOL: ComputerTool = TOOLSET
# The single tools are beta features; the toolset is not.
BETAS: dict[str, str] = {
    "computer_20251124": "computer-use-2025-11-24",
    "computer_20250124": "computer-use-2025-01-24",
}
TOOLSET_NAME = "computer"  # a member call's toolset_name, fixed by the API
COMPUTER_TOOL_NAME = "computer"  # the single tool's name, fixed by the API
# The toolset's members, in the API's order (anthropic.types.ComputerMemberName).
MEMBERS: tuple[str, ...] = (
    "key", "hold_key", "type", "cursor_position", "mouse_move", "left_mouse_down",
    "left_mouse_up", "left_click", "left_click_drag", "right_click", "middle_click",
    "double_click", "triple_click", "scroll", "wait", "screenshot", "zoom",
)  # fmt: skip
DEFAULT_MAX_TOKENS = 4096
# The API refuses an is_error tool_result with no content.
FAILED = "the tool call failed"

_STOPS = {
    "tool_use": "tool_use",
    "end_turn": "end",
    "stop_sequence": "end",
    "pause_turn": "end",
    "max_tokens": "max_tokens",
    "refusal": "refusal",
}
_SCROLL = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}


@dataclass(frozen=True)
class AnthropicRequest:
    """What one call sends: the keyword arguments of `messages.create`, and the betas it
    needs (none for the GA toolset; any, and it goes through `client.beta.messages`)."""

    body: dict[str, Any]
    betas: tuple[str, ...] = ()


class AnthropicModel:
    """One Claude model over the Messages API."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str,
        computer_tool: ComputerTool = DEFAULT_COMPUTER_TOOL,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        max_retries: int = calls.MAX_RETRIES,
    ) -> None:
        if computer_tool not in COMPUTER_TOOLS:
            raise ValueError(f"computer_tool: one of {', '.join(COMPUTER_TOOLS)}")
        self._model = model
        self._key = api_key
        self._base_url = base_url.rstrip("/")
        self._computer_tool = computer_tool
        self._max_tokens = max_tokens
        self._max_retries = max_retries

    @property
    def name(self) -> str:
        return f"anthropic:{self._model}"

    @property
    def computer_tool(self) -> ComputerTool:
        return self._computer_tool

    def complete(
        self,
        system: str,
        messages: tuple[Message, ...],
        tools: tuple[ToolSpec, ...],
        *,
        timeout: float,
    ) -> ModelTurn:
        # Imported on first use: the SDK takes over a second to import, and most coordinators
        # (and every process that only opens a model to check its configuration) never call it.
        import anthropic

        request = self.request(system, messages, tools)
        endpoint = calls.Endpoint(
            "anthropic",
            self._base_url,
            calls.SDKErrors(
                anthropic.APIStatusError,
                anthropic.APITimeoutError,
                anthropic.APIConnectionError,
                anthropic.AnthropicError,
            ),
            (self._key,),
        )

        async def call() -> SDKMessage | BetaMessage:
            async with anthropic.AsyncAnthropic(
                api_key=self._key,
                base_url=self._base_url,
                max_retries=self._max_retries,
                timeout=timeout,
            ) as client:
                # The body is JSON built and tested here, not the SDK's TypedDicts, so mypy
                # cannot pick the create() overload; without `stream` it is the plain message.
                if request.betas:
                    beta = await client.beta.messages.create(
                        **request.body, betas=list(request.betas)
                    )
                    return cast("BetaMessage", beta)
                return cast("SDKMessage", await client.messages.create(**request.body))

        message = calls.run(endpoint, call, timeout=timeout)
        return parse_response(message.to_dict(), computer.computer_tool(tools))

    def request(
        self, system: str, messages: tuple[Message, ...], tools: tuple[ToolSpec, ...]
    ) -> AnthropicRequest:
        """What one call sends."""
        screen = computer.computer_tool(tools)
        toolset = self._computer_tool == TOOLSET
        body: dict[str, Any] = {
            "model": self._model,
            "max_tokens": self._max_tokens,
            "messages": _messages(messages, screen, toolset),
        }
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [self._tool(t) for t in tools]
        betas = (BETAS[self._computer_tool],) if screen is not None and not toolset else ()
        return AnthropicRequest(body, betas)

    def _tool(self, tool: ToolSpec) -> dict[str, Any]:
        if tool.computer is None:
            return {
                "name": tool.name,
                "description": tool.description,
                "input_schema": tool.parameters,
            }
        allowed = computer.allowed_actions(tool)
        if self._computer_tool == TOOLSET:
            entry: dict[str, Any] = {"type": TOOLSET}
            configs = {m: {"enabled": False} for m in MEMBERS if m not in allowed}
            if configs:
                entry["configs"] = configs
            return entry
        single: dict[str, Any] = {
            "type": self._computer_tool,
            "name": COMPUTER_TOOL_NAME,
            "display_width_px": tool.computer.width,
            "display_height_px": tool.computer.height,
        }
        if self._computer_tool == "computer_20251124" and "zoom" in allowed:
            single["enable_zoom"] = True
        return single


def _messages(
    messages: tuple[Message, ...], screen: ToolSpec | None, toolset: bool
) -> list[dict[str, Any]]:
    # Which earlier calls were computer calls: their results answer a toolset member.
    computer_calls = {
        call.id
        for message in messages
        for call in message.tool_calls
        if screen is not None and call.name == screen.name
    }
    return [_message(m, computer_calls, toolset) for m in messages]


def _message(message: Message, computer_calls: set[str], toolset: bool) -> dict[str, Any]:
    member_results = computer_calls if toolset else set()
    blocks: list[dict[str, Any]] = [_tool_result(r, member_results) for r in message.tool_results]
    if message.text:
        blocks.append({"type": "text", "text": message.text})
    for call in message.tool_calls:
        if call.id in computer_calls:
            name, member_input = to_member(call.arguments)
            if toolset:
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call.id,
                        "name": name,
                        "input": member_input,
                        "toolset_name": TOOLSET_NAME,
                    }
                )
            else:
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call.id,
                        "name": COMPUTER_TOOL_NAME,
                        "input": {"action": name, **member_input},
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


def _tool_result(result: ToolResult, member_results: set[str]) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": result.call_id}
    if result.call_id in member_results:
        block["toolset_name"] = TOOLSET_NAME  # the API rejects a member result without it
    if result.content:
        block["content"] = [_content(part) for part in result.content]
    if result.is_error:
        block["is_error"] = True
        block.setdefault("content", [{"type": "text", "text": FAILED}])
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
    """A Messages API response -> ModelTurn; computer calls (a toolset member's or the single
    tool's) made neutral."""
    content = doc.get("content")
    if not isinstance(content, list):
        raise ModelError("anthropic: the response has no content list")
    texts: list[str] = []
    calls_: list[ToolCall] = []
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
            if screen is not None and block.get("toolset_name") == TOOLSET_NAME:
                name, arguments = screen.name, from_member(name, arguments)
            elif screen is not None and name == COMPUTER_TOOL_NAME:
                name, arguments = screen.name, from_anthropic_action(arguments)
            calls_.append(ToolCall(id=str(block.get("id", "")), name=name, arguments=arguments))
    stop_reason = str(doc.get("stop_reason") or "")
    stop = _STOPS.get(stop_reason, "tool_use" if calls_ else "end")
    return ModelTurn(
        text="\n".join(t for t in texts if t),
        tool_calls=tuple(calls_),
        stop=stop,
        usage=wire.usage(doc.get("usage"), "input_tokens", "output_tokens"),
    )


def from_anthropic_action(raw: dict[str, Any]) -> dict[str, Any]:
    """The single tool's input (`{"action": NAME, ...}`) -> neutral computer arguments."""
    rest = dict(raw)
    return from_member(str(rest.pop("action", "")), rest)


def to_anthropic_action(args: dict[str, Any]) -> dict[str, Any]:
    """Neutral computer arguments -> the single tool's input (for replaying history)."""
    name, member_input = to_member(args)
    return {"action": name, **member_input}


def from_member(name: str, raw: dict[str, Any]) -> dict[str, Any]:
    """A toolset member's name and input -> neutral computer arguments."""
    rest = dict(raw)
    out: dict[str, Any] = {"action": name}
    start = rest.pop("start_coordinate", None)
    point = rest.pop("coordinate", None)
    if name == "left_click_drag":
        _put_point(out, "x", "y", start)
        _put_point(out, "to_x", "to_y", point)
    else:
        _put_point(out, "x", "y", point)
        if start is not None:
            out["start_coordinate"] = start
    if name in ("key", "hold_key") and "text" in rest:
        out["key"] = rest.pop("text")
    elif name == "type" and "text" in rest:
        out["text"] = rest.pop("text")
    if name == "key" and "repeat" in rest:
        repeat = rest.pop("repeat")
        if repeat is not None and not _repeat_key(out, repeat):
            out["repeat"] = repeat  # the worker refuses it by name
    if name == "scroll":
        direction = rest.pop("scroll_direction", None)
        amount = rest.pop("scroll_amount", None)
        if direction in _SCROLL and isinstance(amount, int):
            ux, uy = _SCROLL[direction]
            out["dx"], out["dy"] = ux * amount, uy * amount
        else:  # let the worker name what is wrong
            out.update(scroll_direction=direction, scroll_amount=amount)
    if name in ("wait", "hold_key") and "duration" in rest:
        out["seconds"] = rest.pop("duration")
    out.update(rest)  # region, and anything else (a click's held keys) as sent
    return out


def to_member(args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Neutral computer arguments -> a toolset member's name and input (for replaying
    history)."""
    rest = dict(args)
    action = str(rest.pop("action", ""))
    out: dict[str, Any] = {}
    x, y = rest.pop("x", None), rest.pop("y", None)
    to_x, to_y = rest.pop("to_x", None), rest.pop("to_y", None)
    if action == "left_click_drag":
        if x is not None and y is not None:
            out["start_coordinate"] = [x, y]
        if to_x is not None and to_y is not None:
            out["coordinate"] = [to_x, to_y]
    elif x is not None and y is not None:
        out["coordinate"] = [x, y]
    if action in ("key", "hold_key") and "key" in rest:
        out["text"] = rest.pop("key")
    if action == "scroll":
        dx, dy = int(rest.pop("dx", 0) or 0), int(rest.pop("dy", 0) or 0)
        if dy:
            out.update(scroll_direction="down" if dy > 0 else "up", scroll_amount=abs(dy))
        elif dx:
            out.update(scroll_direction="right" if dx > 0 else "left", scroll_amount=abs(dx))
    if action in ("wait", "hold_key") and "seconds" in rest:
        out["duration"] = rest.pop("seconds")
    out.update(rest)
    return action, out


def _repeat_key(out: dict[str, Any], repeat: object) -> bool:
    """`key` pressed `repeat` times as the one neutral key string; False when it cannot be."""
    key = out.get("key")
    if not isinstance(key, str) or not isinstance(repeat, int) or isinstance(repeat, bool):
        return False
    if not 1 <= repeat <= desktop_scope.MAX_COMBOS:
        return False
    out["key"] = " ".join([key] * repeat)
    return True


def _put_point(out: dict[str, Any], xname: str, yname: str, point: object) -> None:
    if isinstance(point, list | tuple) and len(point) == 2:
        out[xname], out[yname] = point[0], point[1]
    elif point is not None:
        out[xname] = point  # malformed: passed on for the worker to refuse by field
