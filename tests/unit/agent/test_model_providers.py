"""Opening models, the chat-completions adapter, and what every remote adapter does alike on
its official SDK: errors as one line with the provider's message and never the key, the SDK's
retries (a 429 then a 200 is one successful call), the whole-call time limit, and the scripted
provider. The remote services are stood in for by a local server
(tests/unit/agent/conversations.py, tests/harness/models.py): only the service is fake.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from coordinator.agent.conversation import (
    ImagePart,
    Message,
    ModelConfigError,
    ModelError,
    ModelSpecError,
    ModelTimeout,
    ToolCall,
    ToolResult,
)
from coordinator.agent.providers import (
    DEFAULT_ANTHROPIC_COMPUTER_TOOL,
    DEFAULT_OPENAI_COMPUTER_TOOL,
    AnthropicModel,
    OpenAIChatModel,
    OpenAIResponsesModel,
    ScriptedModel,
    open_model,
)
from coordinator.agent.providers.scripted import NO_SUCH_SCRIPT, parse_script
from coordinator.agent.providers.wire import UNPARSED
from coordinator.agent.tokens import IMAGE_TOKENS, estimate_tokens
from coordinator.app.server import _model_opener
from coordinator.model.settings import CoordinatorConfig
from tests.harness.models import AnthropicStandIn, OpenAIResponsesStandIn
from tests.unit.agent.conversations import (
    CONVERSATION,
    KEY,
    PNG,
    PNG_B64,
    SYSTEM,
    TOOLS,
    FakeProvider,
)

# --- open_model ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "variable"),
    [("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY"), ("openai:gpt-5", "OPENAI_API_KEY")],
)
def test_missing_key_names_the_variable(spec: str, variable: str) -> None:
    with pytest.raises(ModelConfigError, match=variable) as caught:
        open_model(spec, env={})
    assert "\n" not in str(caught.value)
    # The key is read where goals run: the message says so, and how to fix it there.
    assert str(caught.value) == (
        f"the coordinator has no {variable}: set it in the coordinator's environment (the shell"
        " or service that runs `deskfleet-coordinator serve`) and restart it"
    )


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
    with pytest.raises(ModelConfigError, match="the coordinator has no OPENAI_API_KEY: set it"):
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


def test_a_computer_tool_the_provider_has_not_is_a_configuration_error() -> None:
    env = {"ANTHROPIC_API_KEY": KEY, "OPENAI_API_KEY": KEY}
    with pytest.raises(ModelConfigError, match="computer_toolset_20260801"):
        open_model("anthropic:c", env, anthropic_computer_tool="computer_use_preview")
    with pytest.raises(ModelConfigError, match="computer_use_preview"):
        open_model("openai:g", env, openai_computer_tool="computer_20250124")
    assert isinstance(open_model("openai:g", env), OpenAIResponsesModel)
    assert open_model("openai:g", env).computer_tool == "computer"  # type: ignore[attr-defined]
    assert open_model("anthropic:c", env).computer_tool == "computer_toolset_20260801"  # type: ignore[attr-defined]


def test_serve_settings_pick_the_computer_tool_of_every_model_it_opens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    config = CoordinatorConfig(
        "sqlite:///unused.db",
        anthropic_computer_tool="computer_20251124",
        openai_computer_tool="computer_use_preview",
    )
    opened = _model_opener(config)
    assert opened("anthropic:c").computer_tool == "computer_20251124"  # type: ignore[attr-defined]
    assert opened("openai:g").computer_tool == "computer_use_preview"  # type: ignore[attr-defined]
    defaults = CoordinatorConfig("sqlite:///unused.db")
    assert (defaults.anthropic_computer_tool, defaults.openai_computer_tool) == (
        DEFAULT_ANTHROPIC_COMPUTER_TOOL,
        DEFAULT_OPENAI_COMPUTER_TOOL,
    )


# --- chat completions -----------------------------------------------------------------------

CHAT_RESPONSE = {
    "id": "chatcmpl-abc123",
    "object": "chat.completion",
    "created": 1741000000,
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
                        # Some local servers leave the id out.
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
    assert "authorization" not in sent.headers  # no key: no header, not a placeholder
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
    assert turn.tool_calls[1].id == "call_2"
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


# --- errors, retries and time limits ----------------------------------------------------------


def _no_retries(provider: FakeProvider) -> tuple[AnthropicModel, OpenAIResponsesModel]:
    return (
        AnthropicModel("claude", api_key=KEY, base_url=provider.url, max_retries=0),
        OpenAIResponsesModel("gpt", api_key=KEY, base_url=provider.url, max_retries=0),
    )


def test_http_errors_carry_the_providers_message_and_never_the_key(
    provider: FakeProvider,
) -> None:
    anthropic, openai = _no_retries(provider)
    ask = (Message("user", "hi"),)

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
    provider.reply(b"not json at all", status=200)
    with pytest.raises(ModelError, match="not JSON"):
        anthropic.complete("", ask, (), timeout=5)


@pytest.mark.parametrize("stand_in_type", [AnthropicStandIn, OpenAIResponsesStandIn])
def test_a_429_is_retried_by_the_sdk_and_a_401_is_one_clear_line(stand_in_type: Any) -> None:
    stand_in = stand_in_type([{"text": "after the wait"}]).start()
    try:
        key = next(v for k, v in stand_in.env.items() if k.endswith("_API_KEY"))
        provider = "anthropic" if stand_in_type is AnthropicStandIn else "openai"
        model = open_model(f"{provider}:model-test", stand_in.env)
        limited = {"error": {"type": "rate_limit_error", "message": "Slow down"}}
        stand_in.failures.append((429, limited, {"retry-after": "0", "retry-after-ms": "20"}))
        turn = model.complete("", (Message("user", "hi"),), (), timeout=10)
        assert turn.text == "after the wait"
        assert [r.path for r in stand_in.recorded][:2] == [stand_in.recorded[0].path] * 2
        assert len(stand_in.recorded) == 2  # the 429, then the retry that got the 200

        refused = {"error": {"type": "authentication_error", "message": f"invalid x-api-key {key}"}}
        stand_in.failures.append((401, refused, {}))
        with pytest.raises(ModelError) as caught:
            model.complete("", (Message("user", "hi"),), (), timeout=10)
        message = str(caught.value)
        assert len(stand_in.recorded) == 3  # a 401 is not retried
        assert message.startswith(f"{provider}: HTTP 401 authentication failed (check the API key)")
        assert "authentication_error" in message and "\n" not in message
        assert key not in message and "[key]" in message
        assert caught.value.__cause__ is None and caught.value.__context__ is None
    finally:
        stand_in.stop()


def test_unreachable_server_is_a_model_error() -> None:
    model = AnthropicModel("claude", api_key=KEY, base_url="http://127.0.0.1:9", max_retries=0)
    with pytest.raises(ModelError, match=r"cannot reach 127.0.0.1:9") as caught:
        model.complete("", (Message("user", "hi"),), (), timeout=5)
    assert not isinstance(caught.value, ModelTimeout)


def test_a_stalled_server_times_out_on_time(provider: FakeProvider) -> None:
    provider.reply({"content": []}, delay=30)
    model = AnthropicModel("claude", api_key=KEY, base_url=provider.url)
    started = time.monotonic()
    with pytest.raises(ModelTimeout, match=r"within 0.5 s"):
        model.complete("", (Message("user", "hi"),), (), timeout=0.5)
    assert time.monotonic() - started < 1.5


def test_retries_stay_within_the_whole_call_limit(provider: FakeProvider) -> None:
    """A server that keeps answering 503 with a long retry-after: the SDK would wait, the
    call's limit ends it."""
    for _ in range(3):
        provider.reply({"error": {"message": "busy"}}, status=503, headers={"retry-after": "30"})
    model = OpenAIResponsesModel("gpt", api_key=KEY, base_url=provider.url)
    started = time.monotonic()
    with pytest.raises(ModelTimeout, match=r"within 1 s"):
        model.complete("", (Message("user", "hi"),), (), timeout=1)
    assert time.monotonic() - started < 2
    assert len(provider.requests) == 1


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
