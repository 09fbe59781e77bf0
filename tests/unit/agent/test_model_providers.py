"""Model provider adapters against local servers that speak each provider's wire format.

The real model services cannot be reached from here, so each adapter talks to a stdlib HTTP
server in a thread that records the request it got and answers with a recorded-style response
body written out below. The tests check what goes over the wire (tool definitions, the
built-in computer tools, image blocks, tool results and their ids, the system prompt, auth
headers) and what comes back (text, tool calls, neutral computer arguments, stop, usage),
plus configuration errors, HTTP errors, a stalled server and the scripted provider.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from coordinator.agent.conversation import (
    ComputerSpec,
    ImagePart,
    Message,
    ModelConfigError,
    ModelError,
    ModelSpecError,
    ModelTimeout,
    TextPart,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from coordinator.agent.providers import (
    AnthropicModel,
    OpenAIChatModel,
    OpenAIResponsesModel,
    ScriptedModel,
    open_model,
)
from coordinator.agent.providers.anthropic import from_anthropic_action, to_anthropic_action
from coordinator.agent.providers.openai_responses import from_openai_action
from coordinator.agent.providers.scripted import NO_SUCH_SCRIPT, parse_script
from coordinator.agent.providers.wire import UNPARSED
from coordinator.agent.tokens import IMAGE_TOKENS, estimate_tokens

KEY = "sk-test-0123456789abcdef"
PNG = b"\x89PNG\r\n\x1a\n" + b"screenshot-bytes" * 4
PNG_B64 = base64.b64encode(PNG).decode()
SYSTEM = "You operate a fleet of machines."

RESEARCH = ToolSpec(
    "research",
    "Research a question on the web.",
    {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)
COMPUTER = ToolSpec("computer", "Act on the approved desktop.", {}, ComputerSpec(1280, 800))
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
class FakeProvider:
    """A local stand-in for a model service: records requests, answers from a queue."""

    url: str
    requests: list[Recorded] = field(default_factory=list)
    replies: list[tuple[int, bytes, float]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def reply(self, body: Any, status: int = 200, delay: float = 0.0) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.replies.append((status, raw, delay))

    @property
    def last(self) -> Recorded:
        return self.requests[-1]


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    fake = FakeProvider(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            body = json.loads(self.rfile.read(length))
            headers = {k.lower(): v for k, v in self.headers.items()}
            fake.requests.append(Recorded(self.path, headers, body))
            status, raw, delay = fake.replies.pop(0) if fake.replies else (500, b"{}", 0.0)
            if delay:
                fake.release.wait(delay)  # a stalled server, released at teardown
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            try:
                self.wfile.write(raw)
            except OSError:
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield fake
    fake.release.set()
    server.shutdown()
    server.server_close()
    thread.join(5)


# --- open_model ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "variable"),
    [("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY"), ("openai:gpt-5", "OPENAI_API_KEY")],
)
def test_missing_key_names_the_variable(spec: str, variable: str) -> None:
    with pytest.raises(ModelConfigError, match=variable) as caught:
        open_model(spec, env={})
    assert "\n" not in str(caught.value)


def test_unknown_provider_and_malformed_spec() -> None:
    with pytest.raises(ModelConfigError, match="unknown provider 'gemini'"):
        open_model("gemini:pro", env={})
    with pytest.raises(ModelConfigError, match="PROVIDER:MODEL"):
        open_model("claude", env={})
    with pytest.raises(ModelConfigError, match="ANTHROPIC_BASE_URL"):
        open_model("anthropic:x", env={"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": "ftp:/x"})


def test_open_model_configures_without_calling(provider: FakeProvider) -> None:
    env = {
        "ANTHROPIC_API_KEY": KEY,
        "ANTHROPIC_BASE_URL": provider.url,
        "OPENAI_API_KEY": KEY,
        "OPENAI_BASE_URL": provider.url + "/v1/",
    }
    assert isinstance(open_model("anthropic:claude-sonnet-4-5", env), AnthropicModel)
    assert isinstance(open_model("openai:computer-use-preview", env), OpenAIResponsesModel)
    assert open_model("openai-chat:qwen", env).name == "openai-chat:qwen"
    assert provider.requests == []


def test_openai_chat_needs_a_key_only_for_openai_itself(provider: FakeProvider) -> None:
    local = open_model("openai-chat:llama", {"OPENAI_BASE_URL": provider.url + "/v1"})
    assert isinstance(local, OpenAIChatModel)
    with pytest.raises(ModelConfigError, match="OPENAI_API_KEY"):
        open_model("openai-chat:gpt-4o", env={})


def test_scripted_spec_loads_a_plain_name_from_the_operators_directory(tmp_path: Path) -> None:
    (tmp_path / "script.json").write_text(json.dumps({"steps": [{"text": "hi"}]}))
    model = open_model("scripted:script.json", env={}, scripts_dir=tmp_path)
    assert model.name == "scripted:script.json"
    with pytest.raises(ModelSpecError, match="offers no scripted models"):
        open_model("scripted:script.json", env={})  # the operator set no directory


def _refusals(tmp_path: Path) -> tuple[Path, list[str]]:
    """A scripts directory and what an owner might try against it."""
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "notjson.json").write_text("{" + " " * 232 + "x")
    (scripts / "bad.json").write_text(json.dumps({"steps": [{"tool_calls": [{}]}]}))
    (scripts / "huge.json").write_text(json.dumps({"steps": [{"text": "x" * (1 << 20)}]}))
    (scripts / "sub").mkdir()
    (scripts / "zero").symlink_to("/dev/zero")
    (scripts / "passwd").symlink_to("/etc/passwd")
    os.mkfifo(scripts / "fifo")
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"steps": [{"text": "hi"}]}))
    names = [
        "/dev/zero",
        str(outside),  # an absolute path to a valid script
        "../outside.json",
        "sub",  # a directory
        "missing.json",
        "notjson.json",
        "bad.json",
        "huge.json",  # past the size cap
        "zero",
        "passwd",  # symlinks are not followed
        "fifo",  # would block a plain open()
        "..",
        "sub/../notjson.json",
        "a\\b",
    ]
    return scripts, names


def test_every_unusable_script_is_refused_with_one_message_that_names_nothing(
    tmp_path: Path,
) -> None:
    scripts, names = _refusals(tmp_path)
    messages = set()
    for name in names:
        started = time.monotonic()
        with pytest.raises(ModelSpecError) as caught:
            open_model(f"scripted:{name}", env={}, scripts_dir=scripts)
        assert time.monotonic() - started < 1.0, name
        messages.add(str(caught.value))
    assert messages == {NO_SUCH_SCRIPT}
    for leak in (str(tmp_path), "No such file", "Is a directory", "JSON", "char", "Errno"):
        assert leak not in NO_SUCH_SCRIPT


def test_a_malformed_or_unknown_spec_is_the_callers_mistake() -> None:
    for spec in ("claude", "gemini:pro", "scripted:", "x:" + "y" * 400, "scripted:a\x1b[2J"):
        with pytest.raises(ModelSpecError):
            open_model(spec, env={}, scripts_dir=Path("/nonexistent"))


# --- Anthropic ------------------------------------------------------------------------------

ANTHROPIC_RESPONSE = {
    "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [
        {"type": "text", "text": "I'll click the email field."},
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "computer",
            "input": {"action": "left_click", "coordinate": [640, 412]},
        },
        {
            "type": "tool_use",
            "id": "toolu_01B",
            "name": "research",
            "input": {"query": "deskfleet"},
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 2095, "output_tokens": 503},
}


def test_anthropic_request_and_response(provider: FakeProvider) -> None:
    provider.reply(ANTHROPIC_RESPONSE)
    model = AnthropicModel("claude-sonnet-4-5", api_key=KEY, base_url=provider.url)
    turn = model.complete(SYSTEM, CONVERSATION, TOOLS, timeout=5)

    sent = provider.last
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["anthropic-beta"] == "computer-use-2025-01-24"
    body = sent.body
    assert body["model"] == "claude-sonnet-4-5"
    assert body["system"] == SYSTEM
    assert body["tools"] == [
        {
            "name": "research",
            "description": "Research a question on the web.",
            "input_schema": RESEARCH.parameters,
        },
        {
            "type": "computer_20250124",
            "name": "computer",
            "display_width_px": 1280,
            "display_height_px": 800,
        },
    ]
    messages = body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[0]["content"] == [{"type": "text", "text": "Find the form and fill it in."}]
    assert messages[1]["content"][1] == {
        "type": "tool_use",
        "id": "toolu_01",
        "name": "research",
        "input": {"query": "form url"},
    }
    assert messages[2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_01",
            "content": [{"type": "text", "text": "http://site.test/form"}],
        }
    ]
    # The computer call goes back in Anthropic's own shape, under the same id.
    assert messages[3]["content"] == [
        {
            "type": "tool_use",
            "id": "toolu_02",
            "name": "computer",
            "input": {"action": "left_click", "coordinate": [10, 20]},
        }
    ]
    # Tool results come first in their user turn, then the text.
    result, guidance = messages[4]["content"]
    assert result == {
        "type": "tool_result",
        "tool_use_id": "toolu_02",
        "content": [
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64},
            }
        ],
    }
    assert guidance == {"type": "text", "text": "Guidance: use the work email."}

    assert turn.text == "I'll click the email field."
    assert turn.tool_calls == (
        ToolCall(
            "toolu_01A09q90qw90lq917835lq9",
            "computer",
            {"action": "left_click", "x": 640, "y": 412},
        ),
        ToolCall("toolu_01B", "research", {"query": "deskfleet"}),
    )
    assert turn.stop == "tool_use"
    assert (turn.usage.input_tokens, turn.usage.output_tokens) == (2095, 503)


def test_anthropic_without_computer_has_no_beta_and_maps_stops(provider: FakeProvider) -> None:
    provider.reply(
        {
            "content": [{"type": "text", "text": "Done."}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 2},
        }
    )
    provider.reply({"content": [], "stop_reason": "max_tokens", "usage": {}})
    provider.reply({"content": [], "stop_reason": "refusal"})
    error = ToolResult("toolu_9", (TextPart("no such page"),), is_error=True)
    messages = (
        Message("user", "go"),
        Message("assistant", tool_calls=(ToolCall("toolu_9", "research", {"query": "x"}),)),
        Message("user", tool_results=(error,)),
    )
    model = AnthropicModel("claude-haiku-4-5", api_key=KEY, base_url=provider.url)
    turn = model.complete("", messages, (RESEARCH,), timeout=5)
    assert "anthropic-beta" not in provider.last.headers
    assert "system" not in provider.last.body
    assert provider.last.body["messages"][2]["content"][0]["is_error"] is True
    assert (turn.text, turn.stop, turn.tool_calls) == ("Done.", "end", ())
    assert model.complete("", messages, (), timeout=5).stop == "max_tokens"
    assert model.complete("", messages, (), timeout=5).stop == "refusal"


@pytest.mark.parametrize(
    ("raw", "neutral"),
    [
        ({"action": "screenshot"}, {"action": "screenshot"}),
        ({"action": "mouse_move", "coordinate": [5, 6]}, {"action": "mouse_move", "x": 5, "y": 6}),
        ({"action": "left_click", "coordinate": [1, 2]}, {"action": "left_click", "x": 1, "y": 2}),
        ({"action": "type", "text": "a@b.test"}, {"action": "type", "text": "a@b.test"}),
        ({"action": "key", "text": "ctrl+a"}, {"action": "key", "key": "ctrl+a"}),
        (
            {"action": "left_click_drag", "start_coordinate": [1, 2], "coordinate": [30, 40]},
            {"action": "left_click_drag", "x": 1, "y": 2, "to_x": 30, "to_y": 40},
        ),
        (
            {"action": "scroll", "coordinate": [100, 200], "scroll_direction": "up",
             "scroll_amount": 3},
            {"action": "scroll", "x": 100, "y": 200, "dx": 0, "dy": -3},
        ),
        (
            {"action": "scroll", "coordinate": [1, 1], "scroll_direction": "right",
             "scroll_amount": 2},
            {"action": "scroll", "x": 1, "y": 1, "dx": 2, "dy": 0},
        ),
        ({"action": "wait", "duration": 1.5}, {"action": "wait", "seconds": 1.5}),
        ({"action": "cursor_position"}, {"action": "cursor_position"}),
        # Not in our vocabulary: kept as sent, for the worker to refuse by name.
        ({"action": "triple_click", "coordinate": [3, 4]},
         {"action": "triple_click", "x": 3, "y": 4}),
    ],
)  # fmt: skip
def test_anthropic_computer_actions_round_trip(
    raw: dict[str, Any], neutral: dict[str, Any]
) -> None:
    assert from_anthropic_action(raw) == neutral
    back = to_anthropic_action(neutral)
    assert from_anthropic_action(back) == neutral


# --- OpenAI Responses -----------------------------------------------------------------------

REASONING_ITEM = {"type": "reasoning", "id": "rs_67cc", "summary": []}
CLICK_CALL = {
    "type": "computer_call",
    "id": "cu_67cc",
    "call_id": "call_zw3",
    "action": {"type": "click", "button": "left", "x": 156, "y": 50},
    "pending_safety_checks": [],
    "status": "completed",
}
RESPONSES_RESPONSE = {
    "id": "resp_67cc",
    "object": "response",
    "status": "completed",
    "model": "computer-use-preview-2025-03-11",
    "output": [
        REASONING_ITEM,
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "Clicking the search box.", "annotations": []}
            ],
        },
        CLICK_CALL,
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_fn1",
            "name": "research",
            "arguments": '{"query":"opening hours"}',
            "status": "completed",
        },
    ],
    "usage": {"input_tokens": 819, "output_tokens": 37, "total_tokens": 856},
}  # fmt: skip


def test_openai_responses_request_and_response(provider: FakeProvider) -> None:
    provider.reply(RESPONSES_RESPONSE)
    provider.reply({"output": [], "status": "completed", "usage": {}})
    model = OpenAIResponsesModel("computer-use-preview", api_key=KEY, base_url=provider.url + "/v1")
    start = (Message("user", "Find the opening hours.", kind="request"),)
    turn = model.complete(SYSTEM, start, TOOLS, timeout=5)

    sent = provider.last
    assert sent.path == "/v1/responses"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.body["instructions"] == SYSTEM
    assert sent.body["truncation"] == "auto"
    assert sent.body["tools"] == [
        {
            "type": "function",
            "name": "research",
            "description": "Research a question on the web.",
            "parameters": RESEARCH.parameters,
            "strict": False,
        },
        {
            "type": "computer_use_preview",
            "display_width": 1280,
            "display_height": 800,
            "environment": "linux",
        },
    ]
    assert sent.body["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "Find the opening hours."}]}
    ]
    assert turn.text == "Clicking the search box."
    assert turn.tool_calls == (
        ToolCall("call_zw3", "computer", {"action": "left_click", "x": 156, "y": 50}),
        ToolCall("call_fn1", "research", {"query": "opening hours"}),
    )
    assert turn.stop == "tool_use"
    assert (turn.usage.input_tokens, turn.usage.output_tokens) == (819, 37)

    # The next call echoes the reasoning and computer_call items and answers both calls.
    follow = (
        *start,
        Message("assistant", turn.text, tool_calls=turn.tool_calls),
        Message(
            "user",
            tool_results=(
                ToolResult("call_zw3", (ImagePart("image/png", PNG),)),
                ToolResult("call_fn1", (TextPart("9 to 5"), ImagePart("image/jpeg", b"jpg"))),
            ),
        ),
    )
    assert model.complete(SYSTEM, follow, TOOLS, timeout=5).stop == "end"
    items = provider.last.body["input"]
    assert items[1] == {
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Clicking the search box."}],
    }
    assert items[2:4] == [REASONING_ITEM, CLICK_CALL]
    assert items[4] == {
        "type": "function_call",
        "call_id": "call_fn1",
        "name": "research",
        "arguments": '{"query":"opening hours"}',
    }
    assert items[5] == {
        "type": "computer_call_output",
        "call_id": "call_zw3",
        "output": {"type": "input_image", "image_url": f"data:image/png;base64,{PNG_B64}"},
    }
    assert items[6]["type"] == "function_call_output"
    assert items[6]["call_id"] == "call_fn1"
    assert items[6]["output"].startswith("9 to 5")
    # The function result's image cannot ride in its output item: it follows as user content.
    assert items[7]["role"] == "user"
    assert items[7]["content"][-1] == {
        "type": "input_image",
        "image_url": "data:image/jpeg;base64," + base64.b64encode(b"jpg").decode(),
    }


def test_openai_unseen_computer_call_is_replayed_as_text(provider: FakeProvider) -> None:
    provider.reply({"output": [], "usage": {}})
    model = OpenAIResponsesModel("computer-use-preview", api_key=KEY, base_url=provider.url)
    model.complete(SYSTEM, CONVERSATION, TOOLS, timeout=5)
    items = provider.last.body["input"]
    assert not any(item.get("type", "").startswith("computer_call") for item in items)
    text = json.dumps(items)
    assert "[computer call toolu_02: " in text
    assert f"data:image/png;base64,{PNG_B64}" in text


def test_openai_safety_checks_are_not_acknowledged_for_anyone(provider: FakeProvider) -> None:
    checked = {
        **CLICK_CALL,
        "pending_safety_checks": [
            {"id": "cu_sc_1", "code": "malicious_instructions", "message": "Suspicious text."}
        ],
    }
    provider.reply({"output": [checked], "usage": {}})
    model = OpenAIResponsesModel("computer-use-preview", api_key=KEY, base_url=provider.url)
    turn = model.complete(SYSTEM, CONVERSATION[:1], TOOLS, timeout=5)
    assert turn.stop == "refusal"
    assert turn.tool_calls == ()
    assert "malicious_instructions: Suspicious text." in turn.text


@pytest.mark.parametrize(
    ("action", "neutral"),
    [
        ({"type": "click", "button": "left", "x": 1, "y": 2},
         {"action": "left_click", "x": 1, "y": 2}),
        ({"type": "click", "button": "right", "x": 1, "y": 2},
         {"action": "right_click", "x": 1, "y": 2}),
        ({"type": "click", "button": "wheel", "x": 1, "y": 2},
         {"action": "middle_click", "x": 1, "y": 2}),
        ({"type": "double_click", "x": 3, "y": 4}, {"action": "double_click", "x": 3, "y": 4}),
        ({"type": "move", "x": 7, "y": 8}, {"action": "mouse_move", "x": 7, "y": 8}),
        ({"type": "keypress", "keys": ["CTRL", "A"]}, {"action": "key", "key": "ctrl+a"}),
        ({"type": "keypress", "keys": ["ENTER"]}, {"action": "key", "key": "Return"}),
        ({"type": "keypress", "keys": ["SHIFT", "TAB"]}, {"action": "key", "key": "shift+Tab"}),
        ({"type": "type", "text": "hello"}, {"action": "type", "text": "hello"}),
        (
            {"type": "scroll", "x": 640, "y": 400, "scroll_x": 0, "scroll_y": 300},
            {"action": "scroll", "x": 640, "y": 400, "dx": 0, "dy": 3},
        ),
        (
            {"type": "scroll", "x": 1, "y": 1, "scroll_x": -40, "scroll_y": 0},
            {"action": "scroll", "x": 1, "y": 1, "dx": -1, "dy": 0},
        ),
        (
            {"type": "drag", "path": [{"x": 10, "y": 20}, {"x": 15, "y": 25}, {"x": 30, "y": 40}]},
            {"action": "left_click_drag", "x": 10, "y": 20, "to_x": 30, "to_y": 40},
        ),
        ({"type": "wait"}, {"action": "wait", "seconds": 2.0}),
        ({"type": "screenshot"}, {"action": "screenshot"}),
    ],
)  # fmt: skip
def test_openai_computer_actions_become_neutral(
    action: dict[str, Any], neutral: dict[str, Any]
) -> None:
    assert from_openai_action(action) == neutral


# --- chat completions -----------------------------------------------------------------------

CHAT_RESPONSE = {
    "id": "chatcmpl-abc123",
    "object": "chat.completion",
    "model": "qwen2.5-vl-7b-instruct",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Typing the address.",
                "tool_calls": [
                    {
                        "id": "call_Ab1",
                        "type": "function",
                        "function": {
                            "name": "computer",
                            "arguments": '{"action": "type", "text": "a@b.test"}',
                        },
                    },
                    {
                        "id": "call_Ab2",
                        "type": "function",
                        "function": {"name": "research", "arguments": "{not json"},
                    },
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 1200, "completion_tokens": 40, "total_tokens": 1240},
}


def test_openai_chat_request_and_response(provider: FakeProvider) -> None:
    provider.reply(CHAT_RESPONSE)
    model = open_model("openai-chat:qwen2.5-vl", {"OPENAI_BASE_URL": provider.url + "/v1"})
    turn = model.complete(SYSTEM, CONVERSATION, TOOLS, timeout=5)

    sent = provider.last
    assert sent.path == "/v1/chat/completions"
    assert "authorization" not in sent.headers
    tools = sent.body["tools"]
    assert tools[0]["function"]["name"] == "research"
    computer_fn = tools[1]["function"]
    assert tools[1]["type"] == "function"
    assert computer_fn["name"] == "computer"
    assert "1280x800" in computer_fn["description"]
    assert "left_click" in computer_fn["parameters"]["properties"]["action"]["enum"]

    messages = sent.body["messages"]
    assert [m["role"] for m in messages] == [
        "system", "user", "assistant", "tool", "assistant", "tool", "user",
    ]  # fmt: skip
    assert messages[0] == {"role": "system", "content": SYSTEM}
    assert messages[2]["tool_calls"] == [
        {
            "id": "toolu_01",
            "type": "function",
            "function": {"name": "research", "arguments": '{"query":"form url"}'},
        }
    ]
    assert messages[3] == {
        "role": "tool",
        "tool_call_id": "toolu_01",
        "content": "http://site.test/form",
    }
    assert messages[4]["content"] is None
    assert json.loads(messages[4]["tool_calls"][0]["function"]["arguments"]) == {
        "action": "left_click",
        "x": 10,
        "y": 20,
    }
    assert messages[5]["tool_call_id"] == "toolu_02"
    # The screenshot cannot ride in the tool message: it follows in a user message.
    assert messages[6]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,{PNG_B64}"},
    }
    assert messages[6]["content"][-1] == {"type": "text", "text": "Guidance: use the work email."}

    assert turn.text == "Typing the address."
    assert turn.tool_calls[0] == ToolCall(
        "call_Ab1", "computer", {"action": "type", "text": "a@b.test"}
    )
    assert turn.tool_calls[1].arguments == {UNPARSED: "{not json"}
    assert turn.stop == "tool_use"
    assert (turn.usage.input_tokens, turn.usage.output_tokens) == (1200, 40)


def test_openai_chat_sends_a_key_when_it_has_one(provider: FakeProvider) -> None:
    provider.reply(
        {
            "choices": [
                {"message": {"role": "assistant", "content": "ok"}, "finish_reason": "length"}
            ]
        }
    )
    model = OpenAIChatModel("m", base_url=provider.url, api_key=KEY)
    turn = model.complete("", (Message("user", "hi"),), (), timeout=5)
    assert provider.last.headers["authorization"] == f"Bearer {KEY}"
    assert provider.last.body["messages"] == [{"role": "user", "content": "hi"}]
    assert (turn.text, turn.stop) == ("ok", "max_tokens")


# --- errors and time limits -----------------------------------------------------------------


def test_http_errors_carry_the_providers_message_and_never_the_key(
    provider: FakeProvider,
) -> None:
    anthropic = AnthropicModel("claude", api_key=KEY, base_url=provider.url)
    openai = OpenAIResponsesModel("gpt", api_key=KEY, base_url=provider.url)
    ask = (Message("user", "hi"),)

    provider.reply(
        {"type": "error", "error": {"type": "authentication_error", "message": f"bad key {KEY}"}},
        status=401,
    )
    with pytest.raises(ModelError) as caught:
        anthropic.complete("", ask, (), timeout=5)
    message = str(caught.value)
    assert "HTTP 401" in message and "authentication_error" in message
    assert KEY not in message and "[key]" in message

    provider.reply({"error": {"message": "Rate limit reached for gpt", "code": None}}, status=429)
    with pytest.raises(ModelError, match=r"429.*Rate limit reached for gpt") as caught:
        openai.complete("", ask, (), timeout=5)
    assert not isinstance(caught.value, ModelTimeout)

    provider.reply(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        status=529,
    )
    with pytest.raises(ModelError, match=r"overloaded.*Overloaded"):
        anthropic.complete("", ask, (), timeout=5)

    provider.reply(b"<html>upstream crashed</html>", status=500)
    with pytest.raises(ModelError, match=r"HTTP 500.*upstream crashed"):
        openai.complete("", ask, (), timeout=5)

    provider.reply(b"not json at all", status=200)
    with pytest.raises(ModelError, match="not JSON"):
        openai.complete("", ask, (), timeout=5)


def test_unreachable_server_is_a_model_error() -> None:
    model = AnthropicModel("claude", api_key=KEY, base_url="http://127.0.0.1:9")
    with pytest.raises(ModelError, match=r"cannot reach 127.0.0.1:9") as caught:
        model.complete("", (Message("user", "hi"),), (), timeout=5)
    assert not isinstance(caught.value, ModelTimeout)


def test_a_stalled_server_times_out_on_time(provider: FakeProvider) -> None:
    provider.reply(ANTHROPIC_RESPONSE, delay=30)
    model = AnthropicModel("claude", api_key=KEY, base_url=provider.url)
    started = time.monotonic()
    with pytest.raises(ModelTimeout, match=r"within 0.5 s"):
        model.complete("", (Message("user", "hi"),), (), timeout=0.5)
    assert time.monotonic() - started < 1.5


# --- scripted ---------------------------------------------------------------------------------


def test_scripted_replays_records_and_runs_out(tmp_path: Path) -> None:
    script = tmp_path / "goal.json"
    script.write_text(
        json.dumps(
            {
                "steps": [
                    {
                        "text": "Researching.",
                        "tool_calls": [
                            {"name": "research", "arguments": {"query": "form"}},
                            {"name": "recall", "arguments": {"ref": "j1"}},
                        ],
                    },
                    {"tool_calls": [{"name": "computer", "arguments": {"action": "screenshot"}}]},
                    {"text": "All done."},
                ]
            }
        )
    )
    model = open_model("scripted:goal.json", env={}, scripts_dir=tmp_path)
    assert isinstance(model, ScriptedModel)
    first = model.complete(SYSTEM, CONVERSATION[:1], TOOLS, timeout=5)
    assert first.text == "Researching."
    assert [(c.id, c.name) for c in first.tool_calls] == [
        ("call_1", "research"),
        ("call_2", "recall"),
    ]
    assert first.stop == "tool_use"
    assert first.usage.input_tokens == estimate_tokens(CONVERSATION[:1], SYSTEM, TOOLS)
    second = model.complete(SYSTEM, CONVERSATION, TOOLS, timeout=5)
    assert second.tool_calls == (ToolCall("call_3", "computer", {"action": "screenshot"}),)
    third = model.complete(SYSTEM, CONVERSATION, (), timeout=5)
    assert (third.text, third.stop, third.tool_calls) == ("All done.", "end", ())
    for _ in range(2):
        over = model.complete(SYSTEM, CONVERSATION, (), timeout=5)
        assert (over.text, over.stop) == ("script finished", "end")

    assert len(model.requests) == 5
    assert model.requests[0].system == SYSTEM
    assert model.requests[0].messages == CONVERSATION[:1]
    assert model.requests[1].tools == TOOLS
    assert model.requests[2].tools == ()


def test_scripted_sleep_past_the_limit_times_out_then_errors() -> None:
    model = ScriptedModel(
        parse_script({"steps": [{"sleep": 5}, {"sleep": 0.05, "text": "slow"}, {"error": "busy"}]})
    )
    ask = (Message("user", "hi"),)
    started = time.monotonic()
    with pytest.raises(ModelTimeout):
        model.complete("", ask, (), timeout=0.3)
    assert 0.25 < time.monotonic() - started < 1.3
    assert model.complete("", ask, (), timeout=1).text == "slow"
    with pytest.raises(ModelError, match="scripted: busy"):
        model.complete("", ask, (), timeout=1)
    assert model.remaining == 0
    assert len(model.requests) == 3


# --- token estimate -------------------------------------------------------------------------


def test_token_estimate_counts_text_json_and_images() -> None:
    text_only = estimate_tokens((Message("user", "x" * 4000),))
    assert 1000 <= text_only <= 1010
    with_image = (
        Message("assistant", tool_calls=(ToolCall("c1", "computer", {"action": "screenshot"}),)),
        Message("user", tool_results=(ToolResult("c1", (ImagePart("image/png", PNG),)),)),
    )
    assert IMAGE_TOKENS <= estimate_tokens(with_image) < IMAGE_TOKENS + 50
    assert estimate_tokens((), "s" * 400, TOOLS) > estimate_tokens((), "s" * 400)
