"""The OpenAI Responses API (`client.responses.create`) on the official `openai` SDK, with a
built-in computer tool.

Which computer tool is the coordinator's choice (`serve --openai-computer-tool`):

    computer              (default) generally available: `{"type": "computer"}`; one
                          `computer_call` may carry a batch of `actions`
    computer_use_preview  `{"type": "computer_use_preview", "display_width", "display_height",
                          "environment": "linux"}` (with `truncation: "auto"`, which that tool
                          needs); one `action` per call

Each action of a `computer_call` becomes a ToolCall named after our computer tool, its
arguments made neutral (see providers/computer.py):

    click {button: left|right|wheel, x, y}  -> left_click | right_click | middle_click, x, y
    double_click {x, y}                     -> double_click, x, y
    drag {path: [{x, y}, ...]}              -> left_click_drag from the first point to the last
    keypress {keys: ["CTRL", "A"]}          -> key "ctrl+a" (xdotool names: ENTER -> Return)
    move {x, y}                             -> mouse_move, x, y
    scroll {x, y, scroll_x, scroll_y}       -> scroll, x, y, dx/dy in clicks (100 px a click)
    type {text}                             -> type, text
    wait {}                                 -> wait, seconds 2
    screenshot {}                           -> screenshot

Keys held during a pointer action (`keys`) have no neutral field: they are passed on and
refused, so the model learns it cannot hold them, instead of a ctrl+click landing as a click.

The ToolCall ids: a call of one action keeps the `call_id`; the actions of a batch of several
are `CALL_ID:1`, `CALL_ID:2`, ... in order. The API answers one `computer_call_output` per
call_id carrying the screenshot after the batch, so a batch that does not end in a screenshot
gets one more ToolCall, `CALL_ID:screenshot`, that takes it (the call's single action too:
both tools want the screen as it is after the action). The output carries the last image of
the batch's results; any text (an error, say) follows in a user message, since that item
carries an image only. The API wants the original `computer_call` item (and the reasoning item
before it) echoed back, so the adapter keeps those it received; a computer call it never saw
(a run resumed in another process) is replayed as plain text instead.

Pending safety checks on a computer call are not acknowledged on anyone's behalf unless the
model was opened with `acknowledge_safety_checks=True`: otherwise the turn ends as a refusal
that quotes them, and the loop stops with that stop reason.

The response is read in its JSON form (`to_dict()`): the echoed items must go back as the
API sent them.
"""

from __future__ import annotations

import base64
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

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
from coordinator.agent.providers import calls, computer, wire

if TYPE_CHECKING:
    from openai.types.responses import Response

ComputerTool = Literal["computer", "computer_use_preview"]
COMPUTER_TOOLS: tuple[ComputerTool, ...] = get_args(ComputerTool)
DEFAULT_COMPUTER_TOOL: ComputerTool = "computer"
ENVIRONMENT = "linux"
PIXELS_PER_CLICK = 100  # one wheel click scrolls about this far in browsers and most toolkits
WAIT_SECONDS = 2.0  # the API's wait carries no duration
SCREENSHOT_SUFFIX = ":screenshot"
# A blank 1x1 PNG: computer_call_output must carry an image even when the batch produced none.
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


@dataclass(frozen=True)
class Batch:
    """One `computer_call` as received: the items to echo for it (the reasoning before it,
    then the call itself) and the ids of the ToolCalls its actions became."""

    call_id: str
    items: tuple[dict[str, Any], ...]
    tool_call_ids: tuple[str, ...]


class OpenAIResponsesModel:
    """One OpenAI model over the Responses API."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str,
        computer_tool: ComputerTool = DEFAULT_COMPUTER_TOOL,
        max_output_tokens: int | None = None,
        acknowledge_safety_checks: bool = False,
        max_retries: int = calls.MAX_RETRIES,
    ) -> None:
        if computer_tool not in COMPUTER_TOOLS:
            raise ValueError(f"computer_tool: one of {', '.join(COMPUTER_TOOLS)}")
        self._model = model
        self._key = api_key
        self._base_url = base_url.rstrip("/")
        self._computer_tool = computer_tool
        self._max_output_tokens = max_output_tokens
        self._acknowledge = acknowledge_safety_checks
        self._max_retries = max_retries
        self._lock = threading.Lock()
        # ToolCall id -> the computer_call it came from.
        self._batches: dict[str, Batch] = {}

    @property
    def name(self) -> str:
        return f"openai:{self._model}"

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
        # Imported on first use: most coordinators never call it (see providers/anthropic.py).
        import openai

        body = self.request(system, messages, tools)
        endpoint = calls.Endpoint(
            "openai",
            self._base_url,
            calls.SDKErrors(
                openai.APIStatusError,
                openai.APITimeoutError,
                openai.APIConnectionError,
                openai.OpenAIError,
            ),
            (self._key,),
        )

        async def call() -> Response:
            async with openai.AsyncOpenAI(
                api_key=self._key,
                base_url=self._base_url,
                max_retries=self._max_retries,
                timeout=timeout,
            ) as client:
                # JSON built here, not the SDK's TypedDicts (see providers/anthropic.py).
                return cast("Response", await client.responses.create(**body))

        response = calls.run(endpoint, call, timeout=timeout)
        turn, batches = parse_response(
            response.to_dict(), computer.computer_tool(tools), self._acknowledge
        )
        with self._lock:
            for batch in batches:
                self._batches.update((i, batch) for i in batch.tool_call_ids)
        return turn

    def request(
        self, system: str, messages: tuple[Message, ...], tools: tuple[ToolSpec, ...]
    ) -> dict[str, Any]:
        """The keyword arguments of `responses.create` for one call."""
        screen = computer.computer_tool(tools)
        with self._lock:
            batches = dict(self._batches)
        body: dict[str, Any] = {
            "model": self._model,
            "input": _items(messages, screen, batches, self._acknowledge),
        }
        if system:
            body["instructions"] = system
        if tools:
            body["tools"] = [self._tool(t) for t in tools]
        if screen is not None and self._computer_tool == "computer_use_preview":
            body["truncation"] = "auto"
        if self._max_output_tokens:
            body["max_output_tokens"] = self._max_output_tokens
        return body

    def _tool(self, tool: ToolSpec) -> dict[str, Any]:
        if tool.computer is None:
            return {
                "type": "function",
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
                "strict": False,  # strict mode would demand every property be required
            }
        if self._computer_tool == "computer":
            return {"type": "computer"}
        return {
            "type": "computer_use_preview",
            "display_width": tool.computer.width,
            "display_height": tool.computer.height,
            "environment": ENVIRONMENT,
        }


def _items(
    messages: tuple[Message, ...],
    screen: ToolSpec | None,
    batches: dict[str, Batch],
    acknowledge: bool,
) -> list[dict[str, Any]]:
    """Our conversation -> Responses input items, in order."""
    # Which earlier calls are computer calls the API knows (echoed) or must read as text.
    kinds: dict[str, str] = {}
    for message in messages:
        for call in message.tool_calls:
            if screen is not None and call.name == screen.name:
                kinds[call.id] = "computer" if call.id in batches else "computer-text"
            else:
                kinds[call.id] = "function"
    items: list[dict[str, Any]] = []
    echoed: set[str] = set()  # computer_call call_ids whose items went out
    answered: set[str] = set()  # ... and whose output did
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
                kind = kinds[call.id]
                if kind == "computer":
                    batch = batches[call.id]
                    if batch.call_id not in echoed:
                        echoed.add(batch.call_id)
                        items.extend(batch.items)
                else:
                    items.extend(_call_items(call, kind))
            continue
        after: list[dict[str, Any]] = []  # user content that must follow the outputs
        results = {r.call_id: r for r in message.tool_results}
        for result in message.tool_results:
            kind = kinds.get(result.call_id, "function")
            if kind == "computer":
                batch = batches[result.call_id]
                if batch.call_id not in answered:
                    answered.add(batch.call_id)
                    own = [results[i] for i in batch.tool_call_ids if i in results]
                    items.append(_computer_output(batch, own, acknowledge))
                after.extend(_computer_leftovers(result))
            elif kind == "computer-text":
                after.extend(_text_leftovers(result))
            else:
                items.append(_function_output(result))
                after.extend(_image_leftovers(result))
        if message.text:
            after.append({"type": "input_text", "text": message.text})
        if after:
            items.append({"role": "user", "content": after})
    return items


def _call_items(call: ToolCall, kind: str) -> list[dict[str, Any]]:
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


def _computer_output(batch: Batch, results: list[ToolResult], acknowledge: bool) -> dict[str, Any]:
    """The one output answering a computer_call: the screen after its batch."""
    images = [p for r in results for p in r.content if isinstance(p, ImagePart)]
    shot = images[-1] if images else ImagePart("image/png", _BLANK_PNG)
    item: dict[str, Any] = {
        "type": "computer_call_output",
        "call_id": batch.call_id,
        "output": {"type": "computer_screenshot", "image_url": wire.data_url(shot)},
    }
    checks = batch.items[-1].get("pending_safety_checks")
    if acknowledge and checks:
        item["acknowledged_safety_checks"] = checks
    return item


def _function_output(result: ToolResult) -> dict[str, Any]:
    text = "\n".join(p.text for p in result.content if isinstance(p, TextPart))
    if result.is_error:
        text = f"error: {text}" if text else "error"
    count = sum(isinstance(p, ImagePart) for p in result.content)
    if count:
        text += f"\n[{count} image(s) follow in the next user message]"
    return {"type": "function_call_output", "call_id": result.call_id, "output": text}


def _computer_leftovers(result: ToolResult) -> list[dict[str, Any]]:
    """What the computer_call_output cannot carry of one action's result: its text, when it
    failed or said something, as user content right after the output."""
    texts = [p.text for p in result.content if isinstance(p, TextPart)]
    if not result.is_error and not any(texts):
        return []
    label = "error" if result.is_error else "result"
    body = "\n".join(texts) or "(nothing)"
    return [{"type": "input_text", "text": f"computer call {result.call_id} {label}: {body}"}]


def _text_leftovers(result: ToolResult) -> list[dict[str, Any]]:
    """A computer call the API never saw: its result as text, its images as images."""
    label = "error" if result.is_error else "result"
    body = "\n".join(p.text for p in result.content if isinstance(p, TextPart))
    content: list[dict[str, Any]] = [
        {"type": "input_text", "text": f"[computer call {result.call_id} {label}] {body}"}
    ]
    content.extend(
        {"type": "input_image", "image_url": wire.data_url(p)}
        for p in result.content
        if isinstance(p, ImagePart)
    )
    return content


def _image_leftovers(result: ToolResult) -> list[dict[str, Any]]:
    """A function result's images, which its output item cannot carry."""
    images = [p for p in result.content if isinstance(p, ImagePart)]
    if not images:
        return []
    content: list[dict[str, Any]] = [
        {"type": "input_text", "text": f"images from tool call {result.call_id}:"}
    ]
    content.extend({"type": "input_image", "image_url": wire.data_url(p)} for p in images)
    return content


def parse_response(
    doc: dict[str, Any], screen: ToolSpec | None = None, acknowledge: bool = False
) -> tuple[ModelTurn, list[Batch]]:
    """A Responses API response -> ModelTurn, and the computer calls it holds."""
    output = doc.get("output")
    if not isinstance(output, list):
        error = doc.get("error")
        detail = error.get("message") if isinstance(error, dict) else None
        suffix = f": {detail}" if detail else ""
        raise ModelError(f"openai: the response has no output list{suffix}")
    texts: list[str] = []
    refusals: list[str] = []
    tool_calls: list[ToolCall] = []
    batches: list[Batch] = []
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
            tool_calls.append(
                ToolCall(
                    id=str(item.get("call_id", "")),
                    name=str(item.get("name", "")),
                    arguments=wire.parse_arguments(item.get("arguments")),
                )
            )
        elif kind == "computer_call" and screen is not None:
            batch_calls = computer_calls(item, screen)
            tool_calls.extend(batch_calls)
            batches.append(
                Batch(
                    str(item.get("call_id", "")),
                    (*reasoning, item),
                    tuple(c.id for c in batch_calls),
                )
            )
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
        return ModelTurn(text=text, tool_calls=(), stop="refusal", usage=usage), []
    if reason == "content_filter":
        stop = "refusal"
    elif reason == "max_output_tokens":
        stop = "max_tokens"
    else:
        stop = "tool_use" if tool_calls else "end"
    return ModelTurn(text=text, tool_calls=tuple(tool_calls), stop=stop, usage=usage), batches


def computer_calls(item: dict[str, Any], screen: ToolSpec) -> list[ToolCall]:
    """One computer_call item -> its actions as neutral ToolCalls, ending in a screenshot."""
    call_id = str(item.get("call_id", ""))
    batch = item.get("actions")
    if not isinstance(batch, list) or not batch:
        single = item.get("action")
        batch = [single] if isinstance(single, dict) else []
    actions = [from_openai_action(a if isinstance(a, dict) else {}) for a in batch]
    if len(actions) == 1:
        calls_ = [ToolCall(call_id, screen.name, actions[0])]
    else:
        calls_ = [
            ToolCall(f"{call_id}:{n}", screen.name, arguments)
            for n, arguments in enumerate(actions, start=1)
        ]
    if not actions or actions[-1].get("action") != "screenshot":
        shot = computer.neutral("screenshot")
        calls_.append(ToolCall(call_id + SCREENSHOT_SUFFIX, screen.name, shot))
    return calls_


def from_openai_action(action: dict[str, Any]) -> dict[str, Any]:
    """One action of a computer_call -> neutral computer arguments."""
    rest = dict(action)
    kind = str(rest.pop("type", ""))
    x, y = rest.pop("x", None), rest.pop("y", None)
    if not rest.get("keys") and kind != "keypress":
        rest.pop("keys", None)  # none held: the field says nothing
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
