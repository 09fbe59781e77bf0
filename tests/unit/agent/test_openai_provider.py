"""The OpenAI Responses adapter on the official SDK against a stand-in of the Responses API
(the real service cannot be reached from here; tests/unit/agent/conversations.py): the
generally available `computer` tool by default, whose computer_call batches its actions (each
a neutral ToolCall, then one computer_call_output per call_id with the screen after the
batch), and `computer_use_preview` as the option it is.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from coordinator.agent.conversation import ImagePart, Message, TextPart, ToolCall, ToolResult
from coordinator.agent.providers import OpenAIResponsesModel, open_model
from coordinator.agent.providers.openai_responses import from_openai_action
from tests.harness.models import OpenAIResponsesStandIn
from tests.unit.agent.conversations import (
    COMPUTER,
    CONVERSATION,
    KEY,
    PNG,
    PNG_B64,
    RESEARCH,
    SYSTEM,
    TOOLS,
    FakeProvider,
)

REASONING_ITEM = {"type": "reasoning", "id": "rs_67cc", "summary": []}
BATCH_CALL = {
    "type": "computer_call",
    "id": "cu_67cc",
    "call_id": "call_zw3",
    "actions": [
        {"type": "click", "button": "left", "x": 156, "y": 50},
        {"type": "type", "text": "opening hours"},
        {"type": "keypress", "keys": ["ENTER"]},
    ],
    "pending_safety_checks": [],
    "status": "completed",
}
RESPONSE = {
    "id": "resp_67cc",
    "object": "response",
    "created_at": 1741000000,
    "status": "completed",
    "model": "gpt-5.4",
    "output": [
        REASONING_ITEM,
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Searching.", "annotations": []}],
        },
        BATCH_CALL,
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
}
SHOT = ImagePart("image/png", b"after-the-batch")


def _model(provider: FakeProvider, **options: Any) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("gpt-5.4", api_key=KEY, base_url=provider.url + "/v1", **options)


def test_the_ga_computer_tool_batches_actions(provider: FakeProvider) -> None:
    provider.reply(RESPONSE)
    provider.reply({"output": [], "status": "completed", "usage": {}})
    model = _model(provider)
    start = (Message("user", "Find the opening hours.", kind="request"),)
    turn = model.complete(SYSTEM, start, TOOLS, timeout=5)

    sent = provider.last
    assert sent.path == "/v1/responses"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.body["instructions"] == SYSTEM
    assert "truncation" not in sent.body  # only the preview tool needs it
    assert sent.body["tools"] == [
        {
            "type": "function",
            "name": "research",
            "description": "Research a question on the web.",
            "parameters": RESEARCH.parameters,
            "strict": False,
        },
        {"type": "computer"},
    ]
    assert sent.body["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "Find the opening hours."}]}
    ]
    assert turn.text == "Searching."
    # One ToolCall per action, in order, then the screenshot the output will carry.
    assert turn.tool_calls == (
        ToolCall("call_zw3:1", "computer", {"action": "left_click", "x": 156, "y": 50}),
        ToolCall("call_zw3:2", "computer", {"action": "type", "text": "opening hours"}),
        ToolCall("call_zw3:3", "computer", {"action": "key", "key": "Return"}),
        ToolCall("call_zw3:screenshot", "computer", {"action": "screenshot"}),
        ToolCall("call_fn1", "research", {"query": "opening hours"}),
    )
    assert turn.stop == "tool_use"
    assert (turn.usage.input_tokens, turn.usage.output_tokens) == (819, 37)

    # The next call echoes the reasoning and the computer_call once, and answers the batch
    # with one output: the screen after it. What each action said (a cursor position, an
    # error) follows as user content, since the output carries an image only.
    done = TextPart('{"status": "succeeded"}')
    follow = (
        *start,
        Message("assistant", turn.text, tool_calls=turn.tool_calls),
        Message(
            "user",
            tool_results=(
                ToolResult("call_zw3:1", (done,)),
                ToolResult("call_zw3:2", (TextPart("out_of_scope: type"),), is_error=True),
                ToolResult("call_zw3:3", (done,)),
                ToolResult("call_zw3:screenshot", (done, SHOT)),
                ToolResult("call_fn1", (TextPart("9 to 5"), ImagePart("image/jpeg", b"jpg"))),
            ),
        ),
    )
    assert model.complete(SYSTEM, follow, TOOLS, timeout=5).stop == "end"
    items = provider.last.body["input"]
    assert items[1] == {
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Searching."}],
    }
    assert items[2:4] == [REASONING_ITEM, BATCH_CALL]
    assert items[4]["type"] == "function_call" and items[4]["call_id"] == "call_fn1"
    outputs = [i for i in items if i.get("type") == "computer_call_output"]
    assert outputs == [
        {
            "type": "computer_call_output",
            "call_id": "call_zw3",
            "output": {
                "type": "computer_screenshot",
                "image_url": "data:image/png;base64," + base64.b64encode(SHOT.data).decode(),
            },
        }
    ]
    assert items[6]["type"] == "function_call_output" and items[6]["output"].startswith("9 to 5")
    user = items[7]
    assert user["role"] == "user"
    assert user["content"][:2] == [
        {"type": "input_text", "text": 'computer call call_zw3:1 result: {"status": "succeeded"}'},
        {"type": "input_text", "text": "computer call call_zw3:2 error: out_of_scope: type"},
    ]
    assert user["content"][-1] == {
        "type": "input_image",
        "image_url": "data:image/jpeg;base64," + base64.b64encode(b"jpg").decode(),
    }
    assert len(items) == 8


def test_a_batch_that_ends_in_a_screenshot_needs_no_other(provider: FakeProvider) -> None:
    call = {**BATCH_CALL, "actions": [{"type": "move", "x": 1, "y": 2}, {"type": "screenshot"}]}
    provider.reply({"output": [call], "usage": {}})
    turn = _model(provider).complete(SYSTEM, CONVERSATION[:1], TOOLS, timeout=5)
    assert [c.id for c in turn.tool_calls] == ["call_zw3:1", "call_zw3:2"]
    assert turn.tool_calls[-1].arguments == {"action": "screenshot"}


def test_the_preview_tool_stays_an_option(provider: FakeProvider) -> None:
    click = {
        "type": "computer_call",
        "id": "cu_1",
        "call_id": "call_1",
        "action": {"type": "click", "button": "right", "x": 5, "y": 6},
        "pending_safety_checks": [],
        "status": "completed",
    }
    provider.reply({"output": [click], "usage": {}})
    provider.reply({"output": [], "usage": {}})
    model = open_model(
        "openai:computer-use-preview",
        {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": provider.url},
        openai_computer_tool="computer_use_preview",
    )
    turn = model.complete(SYSTEM, CONVERSATION[:1], TOOLS, timeout=5)
    body = provider.last.body
    assert body["truncation"] == "auto"
    assert body["tools"][1] == {
        "type": "computer_use_preview",
        "display_width": 1280,
        "display_height": 800,
        "environment": "linux",
    }
    # One action keeps the call's id; the screen after it comes with it.
    assert turn.tool_calls == (
        ToolCall("call_1", "computer", {"action": "right_click", "x": 5, "y": 6}),
        ToolCall("call_1:screenshot", "computer", {"action": "screenshot"}),
    )
    follow = (
        *CONVERSATION[:1],
        Message("assistant", tool_calls=turn.tool_calls),
        Message(
            "user",
            tool_results=(
                ToolResult("call_1", (TextPart("ok"),)),
                ToolResult("call_1:screenshot", (ImagePart("image/png", PNG),)),
            ),
        ),
    )
    model.complete(SYSTEM, follow, TOOLS, timeout=5)
    items = provider.last.body["input"]
    assert items[1] == click
    assert items[2] == {
        "type": "computer_call_output",
        "call_id": "call_1",
        "output": {"type": "computer_screenshot", "image_url": f"data:image/png;base64,{PNG_B64}"},
    }


def test_an_unseen_computer_call_is_replayed_as_text(provider: FakeProvider) -> None:
    provider.reply({"output": [], "usage": {}})
    _model(provider).complete(SYSTEM, CONVERSATION, TOOLS, timeout=5)
    items = provider.last.body["input"]
    assert not any(item.get("type", "").startswith("computer_call") for item in items)
    text = json.dumps(items)
    assert "[computer call toolu_02: " in text
    assert f"data:image/png;base64,{PNG_B64}" in text


def test_safety_checks_are_not_acknowledged_for_anyone(provider: FakeProvider) -> None:
    checked = {
        **BATCH_CALL,
        "pending_safety_checks": [
            {"id": "cu_sc_1", "code": "malicious_instructions", "message": "Suspicious text."}
        ],
    }
    provider.reply({"output": [checked], "usage": {}})
    turn = _model(provider).complete(SYSTEM, CONVERSATION[:1], TOOLS, timeout=5)
    assert turn.stop == "refusal"
    assert turn.tool_calls == ()
    assert "malicious_instructions: Suspicious text." in turn.text


def test_acknowledged_safety_checks_go_back_with_the_output(provider: FakeProvider) -> None:
    check = {"id": "cu_sc_1", "code": "irrelevant_domain", "message": "Off the task's site."}
    one = {**BATCH_CALL, "actions": [{"type": "screenshot"}], "pending_safety_checks": [check]}
    provider.reply({"output": [one], "usage": {}})
    provider.reply({"output": [], "usage": {}})
    model = _model(provider, acknowledge_safety_checks=True)
    turn = model.complete(SYSTEM, CONVERSATION[:1], TOOLS, timeout=5)
    assert turn.stop == "tool_use" and "irrelevant_domain" in turn.text
    follow = (
        *CONVERSATION[:1],
        Message("assistant", tool_calls=turn.tool_calls),
        Message("user", tool_results=(ToolResult("call_zw3", (ImagePart("image/png", PNG),)),)),
    )
    model.complete(SYSTEM, follow, TOOLS, timeout=5)
    [output] = [i for i in provider.last.body["input"] if i.get("type") == "computer_call_output"]
    assert output["acknowledged_safety_checks"] == [check]


@pytest.mark.parametrize(
    ("action", "neutral"),
    [
        ({"type": "click", "button": "left", "x": 1, "y": 2},
         {"action": "left_click", "x": 1, "y": 2}),
        ({"type": "click", "button": "right", "x": 1, "y": 2, "keys": None},
         {"action": "right_click", "x": 1, "y": 2}),
        ({"type": "click", "button": "wheel", "x": 1, "y": 2, "keys": []},
         {"action": "middle_click", "x": 1, "y": 2}),
        # Held keys have no neutral field: passed on, to be refused rather than dropped.
        ({"type": "click", "button": "left", "x": 1, "y": 2, "keys": ["CTRL"]},
         {"action": "left_click", "x": 1, "y": 2, "keys": ["CTRL"]}),
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
def test_actions_become_neutral(action: dict[str, Any], neutral: dict[str, Any]) -> None:
    assert from_openai_action(action) == neutral


def test_the_stand_in_batches_a_turn_in_one_call() -> None:
    """The harness's Responses stand-in (tests/harness/models.py) through this adapter."""
    turns = [{"text": "Typing.", "actions": [{"type": "type", "text": "x"}, {"type": "wait"}]}]
    stand_in = OpenAIResponsesStandIn(turns).start()
    try:
        model = open_model("openai:gpt-test", stand_in.env)
        turn = model.complete(SYSTEM, CONVERSATION[:1], (COMPUTER,), timeout=5)
        assert [c.arguments["action"] for c in turn.tool_calls] == ["type", "wait", "screenshot"]
        assert turn.text == "Typing."
        assert stand_in.recorded[0].path == "/v1/responses"
    finally:
        stand_in.stop()
