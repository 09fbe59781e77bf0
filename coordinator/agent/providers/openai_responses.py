"""The OpenAI Responses API (`POST {base}/responses`) with its `computer_use_preview` tool.

A ToolSpec with `computer` becomes `{"type": "computer_use_preview", "display_width",
"display_height", "environment": "linux"}` (with `truncation: "auto"`, which that tool needs).
A `computer_call` output item becomes a ToolCall named after our computer tool, with the
`call_id` as its id and its `action` made neutral (see providers/computer.py):

    click {button: left|right|wheel, x, y}  -> left_click | right_click | middle_click, x, y
    double_click {x, y}                     -> double_click, x, y
    drag {path: [{x, y}, ...]}              -> left_click_drag from the first point to the last
    keypress {keys: ["CTRL", "A"]}          -> key "ctrl+a" (xdotool names: ENTER -> Return)
    move {x, y}                             -> mouse_move, x, y
    scroll {x, y, scroll_x, scroll_y}       -> scroll, x, y, dx/dy in clicks (100 px a click)
    type {text}                             -> type, text
    wait {}                                 -> wait, seconds 2
    screenshot {}                           -> screenshot

Its result goes back as `computer_call_output` with the result's last image as the screenshot;
any text (an error, say) follows in a user message, since that item carries an image only.
The API wants the original `computer_call` item (and the reasoning item before it) echoed back,
so the adapter keeps those it received; a computer call it never saw (a run resumed in another
process) is replayed as plain text instead.

Pending safety checks on a computer call are not acknowledged on anyone's behalf unless the
model was opened with `acknowledge_safety_checks=True`: otherwise the turn ends as a refusal
that quotes them, and the loop stops with that stop reason.
"""

from __future__ import annotations

import base64
import threading
from typing import Any

from coordinator.agent.conversation import (
    ImagePart,
    Message,
    ModelError,
    ModelTurn,
    TextPart,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from coordinator.agent.providers import computer, wire
from coordinator.agent.providers.http import post_json

ENVIRONMENT = "linux"
PIXELS_PER_CLICK = 100  # one wheel click scrolls about this far in browsers and most toolkits
WAIT_SECONDS = 2.0  # the API's wait carries no duration
# A blank 1x1 PNG: computer_call_output must carry an image even when the action produced none.
_BLANK_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)
_BUTTONS = {"left": "left_click", "right": "right_click", "wheel": "middle_click"}
# CUA key names -> xdotool keysym names the workers take.
_KEYS = {
    "ctrl": "ctrl",
    "control": "ctrl",
    "alt": "alt",
    "option": "alt",
    "shift": "shift",
    "cmd": "super",
    "super": "super",
    "win": "super",
    "meta": "super",
    "enter": "Return",
    "return": "Return",
    "esc": "Escape",
    "escape": "Escape",
    "tab": "Tab",
    "space": "space",
    "backspace": "BackSpace",
    "delete": "Delete",
    "insert": "Insert",
    "home": "Home",
    "end": "End",
    "pageup": "Prior",
    "pagedown": "Next",
    "arrowup": "Up",
    "arrowdown": "Down",
    "arrowleft": "Left",
    "arrowright": "Right",
    "capslock": "Caps_Lock",
}


class OpenAIResponsesModel:
    """One OpenAI model over the Responses API."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str,
        max_output_tokens: int | None = None,
        acknowledge_safety_checks: bool = False,
    ) -> None:
        self._model = model
        self._key = api_key
        self._url = base_url.rstrip("/") + "/responses"
        self._max_output_tokens = max_output_tokens
        self._acknowledge = acknowledge_safety_checks
        self._lock = threading.Lock()
        # call_id -> the output items to echo for it: reasoning before it, then the call itself.
        self._echo: dict[str, list[dict[str, Any]]] = {}

    @property
    def name(self) -> str:
        return f"openai:{self._model}"

    def complete(
        self,
        system: str,
        messages: tuple[Message, ...],
        tools: tuple[ToolSpec, ...],
        *,
        timeout: float,
    ) -> ModelTurn:
        body = self.request(system, messages, tools)
        headers = {"authorization": f"Bearer {self._key}"}
        doc = post_json(
            self._url, body, headers, timeout=timeout, provider="openai", secrets=(self._key,)
        )
        turn, echo = parse_response(doc, computer.computer_tool(tools), self._acknowledge)
        with self._lock:
            self._echo.update(echo)
        return turn

    def request(
        self, system: str, messages: tuple[Message, ...], tools: tuple[ToolSpec, ...]
    ) -> dict[str, Any]:
        """The body one call sends."""
        screen = computer.computer_tool(tools)
        with self._lock:
            echo = dict(self._echo)
        body: dict[str, Any] = {
            "model": self._model,
            "input": _items(messages, screen, echo, self._acknowledge),
        }
        if system:
            body["instructions"] = system
        if tools:
            body["tools"] = [_tool(t) for t in tools]
        if screen is not None:
            body["truncation"] = "auto"
        if self._max_output_tokens:
            body["max_output_tokens"] = self._max_output_tokens
        return body


def _tool(tool: ToolSpec) -> dict[str, Any]:
    if tool.computer is not None:
        return {
            "type": "computer_use_preview",
            "display_width": tool.computer.width,
            "display_height": tool.computer.height,
            "environment": ENVIRONMENT,
        }
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "strict": False,  # strict mode would demand every property be required
    }


def _items(
    messages: tuple[Message, ...],
    screen: ToolSpec | None,
    echo: dict[str, list[dict[str, Any]]],
    acknowledge: bool,
) -> list[dict[str, Any]]:
    """Our conversation -> Responses input items, in order."""
    # Which earlier calls are computer calls the API knows (echoed) or must read as text.
    kinds: dict[str, str] = {}
    for message in messages:
        for call in message.tool_calls:
            if screen is not None and call.name == screen.name:
                kinds[call.id] = "computer" if call.id in echo else "computer-text"
            else:
                kinds[call.id] = "function"
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "assistant":
            if message.text:
                items.append(
                    {
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": message.text}],
                    }
                )
            for call in message.tool_calls:
                items.extend(_call_items(call, kinds[call.id], echo))
            continue
        after: list[dict[str, Any]] = []  # user content that must follow the outputs
        for result in message.tool_results:
            items.extend(
                _result_items(result, kinds.get(result.call_id, "function"), echo, acknowledge)
            )
            after.extend(_result_leftovers(result, kinds.get(result.call_id, "function")))
        if message.text:
            after.append({"type": "input_text", "text": message.text})
        if after:
            items.append({"role": "user", "content": after})
    return items


def _call_items(
    call: ToolCall, kind: str, echo: dict[str, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    if kind == "computer":
        return echo[call.id]
    if kind == "computer-text":
        text = f"[computer call {call.id}: {wire.dump_arguments(call.arguments)}]"
        return [{"role": "assistant", "content": [{"type": "output_text", "text": text}]}]
    return [
        {
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": wire.dump_arguments(call.arguments),
        }
    ]


def _result_items(
    result: ToolResult, kind: str, echo: dict[str, list[dict[str, Any]]], acknowledge: bool
) -> list[dict[str, Any]]:
    if kind == "computer":
        images = [p for p in result.content if isinstance(p, ImagePart)]
        shot = images[-1] if images else ImagePart("image/png", _BLANK_PNG)
        item: dict[str, Any] = {
            "type": "computer_call_output",
            "call_id": result.call_id,
            "output": {"type": "input_image", "image_url": wire.data_url(shot)},
        }
        checks = echo[result.call_id][-1].get("pending_safety_checks")
        if acknowledge and checks:
            item["acknowledged_safety_checks"] = checks
        return [item]
    if kind == "computer-text":
        return []
    text = "\n".join(p.text for p in result.content if isinstance(p, TextPart))
    if result.is_error:
        text = f"error: {text}" if text else "error"
    count = sum(isinstance(p, ImagePart) for p in result.content)
    if count:
        text += f"\n[{count} image(s) follow in the next user message]"
    return [{"type": "function_call_output", "call_id": result.call_id, "output": text}]


def _result_leftovers(result: ToolResult, kind: str) -> list[dict[str, Any]]:
    """What a result's output item cannot carry, as user content right after it."""
    texts = [p.text for p in result.content if isinstance(p, TextPart)]
    images = [p for p in result.content if isinstance(p, ImagePart)]
    content: list[dict[str, Any]] = []
    if kind == "computer":
        shot, images = images[-1:], images[:-1]  # the last one went as the screenshot
        if texts or result.is_error or not shot:
            label = "error" if result.is_error else "result"
            body = "\n".join(texts) or "(no screenshot)"
            content.append(
                {"type": "input_text", "text": f"computer call {result.call_id} {label}: {body}"}
            )
    elif kind == "computer-text":
        label = "error" if result.is_error else "result"
        body = "\n".join(texts)
        content.append(
            {"type": "input_text", "text": f"[computer call {result.call_id} {label}] {body}"}
        )
    elif images:
        content.append({"type": "input_text", "text": f"images from tool call {result.call_id}:"})
    content.extend({"type": "input_image", "image_url": wire.data_url(p)} for p in images)
    return content


def parse_response(
    doc: dict[str, Any], screen: ToolSpec | None = None, acknowledge: bool = False
) -> tuple[ModelTurn, dict[str, list[dict[str, Any]]]]:
    """A Responses API response -> ModelTurn, and the items to echo for its computer calls."""
    output = doc.get("output")
    if not isinstance(output, list):
        error = doc.get("error")
        detail = error.get("message") if isinstance(error, dict) else None
        suffix = f": {detail}" if detail else ""
        raise ModelError(f"openai: the response has no output list{suffix}")
    texts: list[str] = []
    refusals: list[str] = []
    calls: list[ToolCall] = []
    echo: dict[str, list[dict[str, Any]]] = {}
    reasoning: list[dict[str, Any]] = []
    for item in output:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "reasoning":
            reasoning.append(item)
        elif kind == "message":
            for part in item.get("content") or ():
                if isinstance(part, dict) and part.get("type") == "output_text":
                    texts.append(str(part.get("text", "")))
                elif isinstance(part, dict) and part.get("type") == "refusal":
                    refusals.append(str(part.get("refusal", "")))
        elif kind == "function_call":
            calls.append(
                ToolCall(
                    id=str(item.get("call_id", "")),
                    name=str(item.get("name", "")),
                    arguments=wire.parse_arguments(item.get("arguments")),
                )
            )
        elif kind == "computer_call" and screen is not None:
            call_id = str(item.get("call_id", ""))
            action = item.get("action")
            calls.append(
                ToolCall(
                    id=call_id,
                    name=screen.name,
                    arguments=from_openai_action(action if isinstance(action, dict) else {}),
                )
            )
            echo[call_id] = [*reasoning, item]
            reasoning = []
            for check in item.get("pending_safety_checks") or ():
                if isinstance(check, dict):
                    code, said = check.get("code", ""), check.get("message", "")
                    note = f"OpenAI safety check {code}: {said}"
                    (texts if acknowledge else refusals).append(note)
    usage = wire.usage(doc.get("usage"), "input_tokens", "output_tokens")
    details = doc.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    text = "\n".join(t for t in texts if t)
    if refusals:
        # Not acted on: a refusal (or an unacknowledged safety check) ends the turn.
        text = "\n".join(t for t in (text, *refusals) if t)
        return ModelTurn(text=text, tool_calls=(), stop="refusal", usage=usage), {}
    if reason == "content_filter":
        stop = "refusal"
    elif reason == "max_output_tokens":
        stop = "max_tokens"
    else:
        stop = "tool_use" if calls else "end"
    return ModelTurn(text=text, tool_calls=tuple(calls), stop=stop, usage=usage), echo


def from_openai_action(action: dict[str, Any]) -> dict[str, Any]:
    """A computer_call's `action` -> neutral computer arguments."""
    rest = dict(action)
    kind = str(rest.pop("type", ""))
    x, y = rest.pop("x", None), rest.pop("y", None)
    if kind == "click":
        button = str(rest.pop("button", "left"))
        if button in _BUTTONS:
            return computer.neutral(_BUTTONS[button], x=x, y=y, **rest)
        # back / forward: no neutral action; the worker refuses it by name.
        return computer.neutral("click", button=button, x=x, y=y, **rest)
    if kind == "double_click":
        return computer.neutral("double_click", x=x, y=y, **rest)
    if kind == "move":
        return computer.neutral("mouse_move", x=x, y=y, **rest)
    if kind == "drag":
        path = [p for p in rest.pop("path", None) or () if isinstance(p, dict)]
        if len(path) < 2:
            return computer.neutral("left_click_drag", path=path, **rest)
        # Intermediate points are dropped: the worker drags in a straight line.
        start, end = path[0], path[-1]
        return computer.neutral(
            "left_click_drag", x=start.get("x"), y=start.get("y"), to_x=end.get("x"),
            to_y=end.get("y"), **rest,
        )  # fmt: skip
    if kind == "keypress":
        keys = rest.pop("keys", None) or []
        return computer.neutral("key", key="+".join(_key(str(k)) for k in keys), **rest)
    if kind == "scroll":
        dx, dy = _clicks(rest.pop("scroll_x", 0)), _clicks(rest.pop("scroll_y", 0))
        return computer.neutral("scroll", x=x, y=y, dx=dx, dy=dy, **rest)
    if kind == "type":
        return computer.neutral("type", **rest)
    if kind == "wait":
        return computer.neutral("wait", seconds=WAIT_SECONDS, **rest)
    if kind == "screenshot":
        return computer.neutral("screenshot", **rest)
    return computer.neutral(kind, x=x, y=y, **rest)


def _key(name: str) -> str:
    if len(name) == 1:
        return name.lower()  # "A" would be shift+a in xdotool; CUA means the key itself
    return _KEYS.get(name.lower(), name)


def _clicks(pixels: object) -> int:
    if not isinstance(pixels, int | float) or not pixels:
        return 0
    clicks = round(pixels / PIXELS_PER_CLICK)
    return clicks or (1 if pixels > 0 else -1)
