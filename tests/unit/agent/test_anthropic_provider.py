"""The Anthropic adapter on the official SDK against a stand-in of the Messages API (the real
service cannot be reached from here; tests/unit/agent/conversations.py): the computer toolset
`computer_toolset_20260801` by default (one nameless tools[] entry, members the tool does not
offer disabled in its configs, member-named tool_use blocks with `toolset_name`, tool results
that echo it, no beta header), and the single tools `computer_20251124` and
`computer_20250124` as the options they are, with their beta headers.
"""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.agent.conversation import Message, TextPart, ToolCall, ToolResult
from coordinator.agent.providers import AnthropicModel, open_model
from coordinator.agent.providers.anthropic import (
    MEMBERS,
    TOOLSET,
    from_anthropic_action,
    from_member,
    to_anthropic_action,
    to_member,
)
from coordinator.agent.providers.computer import ACTIONS
from tests.harness.models import AnthropicStandIn, computer
from tests.unit.agent.conversations import (
    COMPUTER,
    CONVERSATION,
    KEY,
    PNG_B64,
    RESEARCH,
    SYSTEM,
    TOOLS,
    FakeProvider,
    computer_spec,
)

RESPONSE = {
    "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [
        {"type": "text", "text": "I'll click the email field."},
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "left_click",
            "input": {"coordinate": [640, 412]},
            "toolset_name": "computer",
            "caller": {"type": "direct"},
        },
        {"type": "tool_use", "id": "toolu_01B", "name": "research", "input": {"query": "x"}},
        {
            "type": "tool_use",
            "id": "toolu_01C",
            "name": "zoom",
            "input": {"region": [0, 0, 320, 200]},
            "toolset_name": "computer",
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 2095, "output_tokens": 503},
}


def _model(provider: FakeProvider, **options: Any) -> AnthropicModel:
    return AnthropicModel("claude-sonnet-4-5", api_key=KEY, base_url=provider.url, **options)


def test_the_toolset_is_the_default_and_speaks_member_calls(provider: FakeProvider) -> None:
    provider.reply(RESPONSE)
    turn = _model(provider).complete(SYSTEM, CONVERSATION, TOOLS, timeout=5)

    sent = provider.last
    assert sent.path == "/v1/messages"
    assert sent.headers["authorization"] == f"Bearer {KEY}"  # how this SDK sends the key
    assert sent.headers["anthropic-version"]  # the SDK's own API version
    assert "anthropic-beta" not in sent.headers
    body = sent.body
    assert body["model"] == "claude-sonnet-4-5"
    assert body["system"] == SYSTEM
    assert body["tools"] == [
        {
            "name": "research",
            "description": "Research a question on the web.",
            "input_schema": RESEARCH.parameters,
        },
        {"type": "computer_toolset_20260801"},  # every member offered: nothing to configure
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
    # The computer call goes back as the member it was, under the same id.
    assert messages[3]["content"] == [
        {
            "type": "tool_use",
            "id": "toolu_02",
            "name": "left_click",
            "input": {"coordinate": [10, 20]},
            "toolset_name": "computer",
        }
    ]
    # Tool results come first in their user turn, then the text; a member's echoes the family.
    result, guidance = messages[4]["content"]
    assert result == {
        "type": "tool_result",
        "tool_use_id": "toolu_02",
        "toolset_name": "computer",
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
        ToolCall("toolu_01B", "research", {"query": "x"}),
        ToolCall("toolu_01C", "computer", {"action": "zoom", "region": [0, 0, 320, 200]}),
    )
    assert turn.stop == "tool_use"
    assert (turn.usage.input_tokens, turn.usage.output_tokens) == (2095, 503)


def test_members_the_tool_does_not_offer_are_disabled(provider: FakeProvider) -> None:
    provider.reply({"content": [], "stop_reason": "end_turn"})
    provider.reply({"content": [], "stop_reason": "end_turn"})
    offered = ("screenshot", "left_click", "type", "key", "wait")
    model = _model(provider)
    model.complete("", CONVERSATION[:1], (computer_spec(offered),), timeout=5)
    [entry] = provider.last.body["tools"]
    assert entry["type"] == TOOLSET
    assert entry["configs"] == {m: {"enabled": False} for m in MEMBERS if m not in offered}
    # A computer tool without an action enum offers the workers' vocabulary, no more.
    bare = computer_spec()
    bare = type(bare)(bare.name, bare.description, {}, bare.computer)
    model.complete("", CONVERSATION[:1], (bare,), timeout=5)
    [entry] = provider.last.body["tools"]
    assert entry.get("configs", {}) == {m: {"enabled": False} for m in MEMBERS if m not in ACTIONS}


def test_a_failed_member_call_is_answered_with_content(provider: FakeProvider) -> None:
    provider.reply({"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"})
    messages = (
        Message("user", "go"),
        Message("assistant", tool_calls=(ToolCall("t1", "computer", {"action": "screenshot"}),)),
        Message("user", tool_results=(ToolResult("t1", (), is_error=True),)),
    )
    _model(provider).complete("", messages, TOOLS, timeout=5)
    [result] = provider.last.body["messages"][2]["content"]
    # The API refuses an is_error result without content.
    assert result["is_error"] is True and result["content"]
    assert result["toolset_name"] == "computer"


@pytest.mark.parametrize(
    ("tool", "beta", "zoom"),
    [("computer_20251124", "computer-use-2025-11-24", True),
     ("computer_20250124", "computer-use-2025-01-24", False)],
)  # fmt: skip
def test_the_single_tools_stay_an_option(
    provider: FakeProvider, tool: str, beta: str, zoom: bool
) -> None:
    provider.reply(
        {
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_9",
                    "name": "computer",
                    "input": {"action": "hold_key", "text": "shift", "duration": 2},
                }
            ],
            "stop_reason": "tool_use",
        }
    )
    model = open_model(
        "anthropic:claude-test",
        {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": provider.url},
        anthropic_computer_tool=tool,
    )
    turn = model.complete(SYSTEM, CONVERSATION, TOOLS, timeout=5)
    sent = provider.last
    assert sent.path.startswith("/v1/messages")
    assert beta in sent.headers["anthropic-beta"].split(",")
    expected: dict[str, Any] = {
        "type": tool,
        "name": "computer",
        "display_width_px": 1280,
        "display_height_px": 800,
    }
    if zoom:
        expected["enable_zoom"] = True
    assert sent.body["tools"][1] == expected
    # History in the single tool's own shape, with no toolset_name anywhere.
    assert sent.body["messages"][3]["content"] == [
        {
            "type": "tool_use",
            "id": "toolu_02",
            "name": "computer",
            "input": {"action": "left_click", "coordinate": [10, 20]},
        }
    ]
    assert "toolset_name" not in sent.body["messages"][4]["content"][0]
    assert turn.tool_calls == (
        ToolCall("toolu_9", "computer", {"action": "hold_key", "key": "shift", "seconds": 2}),
    )


def test_an_unknown_computer_tool_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="computer_toolset_20260801"):
        AnthropicModel("c", api_key=KEY, base_url="http://x", computer_tool="computer_2024")  # type: ignore[arg-type]


def test_without_computer_no_beta_and_stops_map(provider: FakeProvider) -> None:
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
    model = AnthropicModel(
        "claude-test", api_key=KEY, base_url=provider.url, computer_tool="computer_20250124"
    )
    turn = model.complete("", messages, (RESEARCH,), timeout=5)
    assert "anthropic-beta" not in provider.last.headers
    assert "system" not in provider.last.body
    assert provider.last.body["messages"][2]["content"][0]["is_error"] is True
    assert "toolset_name" not in provider.last.body["messages"][2]["content"][0]
    assert (turn.text, turn.stop, turn.tool_calls) == ("Done.", "end", ())
    assert model.complete("", messages, (), timeout=5).stop == "max_tokens"
    assert model.complete("", messages, (), timeout=5).stop == "refusal"


@pytest.mark.parametrize(
    ("member", "raw", "neutral"),
    [
        ("screenshot", {}, {"action": "screenshot"}),
        ("cursor_position", {}, {"action": "cursor_position"}),
        ("mouse_move", {"coordinate": [5, 6]}, {"action": "mouse_move", "x": 5, "y": 6}),
        ("left_click", {"coordinate": [1, 2]}, {"action": "left_click", "x": 1, "y": 2}),
        ("left_click", {}, {"action": "left_click"}),
        ("triple_click", {"coordinate": [3, 4]}, {"action": "triple_click", "x": 3, "y": 4}),
        ("left_mouse_down", {}, {"action": "left_mouse_down"}),
        ("left_mouse_up", {}, {"action": "left_mouse_up"}),
        ("type", {"text": "a@b.test"}, {"action": "type", "text": "a@b.test"}),
        ("key", {"text": "ctrl+a"}, {"action": "key", "key": "ctrl+a"}),
        ("hold_key", {"text": "shift", "duration": 3},
         {"action": "hold_key", "key": "shift", "seconds": 3}),
        ("zoom", {"region": [10, 20, 330, 220]},
         {"action": "zoom", "region": [10, 20, 330, 220]}),
        ("left_click_drag", {"start_coordinate": [1, 2], "coordinate": [30, 40]},
         {"action": "left_click_drag", "x": 1, "y": 2, "to_x": 30, "to_y": 40}),
        ("scroll", {"coordinate": [100, 200], "scroll_direction": "up", "scroll_amount": 3},
         {"action": "scroll", "x": 100, "y": 200, "dx": 0, "dy": -3}),
        ("scroll", {"coordinate": [1, 1], "scroll_direction": "right", "scroll_amount": 2},
         {"action": "scroll", "x": 1, "y": 1, "dx": 2, "dy": 0}),
        ("wait", {"duration": 1}, {"action": "wait", "seconds": 1}),
        # Keys held during a click have no neutral field: passed on, for the worker to refuse.
        ("left_click", {"coordinate": [1, 2], "text": "ctrl"},
         {"action": "left_click", "x": 1, "y": 2, "text": "ctrl"}),
    ],
)  # fmt: skip
def test_members_round_trip(member: str, raw: dict[str, Any], neutral: dict[str, Any]) -> None:
    assert from_member(member, raw) == neutral
    assert from_member(*to_member(neutral)) == neutral
    # The single tools carry the same inputs under `action`.
    assert from_anthropic_action({"action": member, **raw}) == neutral
    assert from_anthropic_action(to_anthropic_action(neutral)) == neutral


def test_key_repeat_becomes_the_combo_that_many_times() -> None:
    assert from_member("key", {"text": "Down", "repeat": 3}) == {
        "action": "key",
        "key": "Down Down Down",
    }
    # Past what one key argument may hold: passed on, for the worker to refuse by name.
    assert from_member("key", {"text": "Down", "repeat": 10_000}) == {
        "action": "key",
        "key": "Down",
        "repeat": 10_000,
    }


def test_the_stand_in_speaks_the_toolset_the_request_declares() -> None:
    """The harness's stand-in (tests/harness/models.py) answers a script written as
    `computer(action, ...)` with member-named blocks when the request carries the toolset, and
    with the single tool's blocks when it carries that; this adapter reads both alike."""
    turns = [{"text": "Looking.", "computer": [computer("left_click", coordinate=[7, 8])]}] * 2
    stand_in = AnthropicStandIn(turns).start()
    try:
        env = stand_in.env
        for tool in ("computer_toolset_20260801", "computer_20250124"):
            model = open_model("anthropic:claude-test", env, anthropic_computer_tool=tool)
            turn = model.complete(SYSTEM, CONVERSATION[:1], (COMPUTER,), timeout=5)
            assert turn.tool_calls[0].arguments == {"action": "left_click", "x": 7, "y": 8}
        betas = [r.headers.get("anthropic-beta") for r in stand_in.recorded]
        assert betas == [None, "computer-use-2025-01-24"]
    finally:
        stand_in.stop()
