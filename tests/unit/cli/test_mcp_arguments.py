"""The MCP tools' argument checks, as pure rules (the tools themselves:
tests/e2e/cli/test_mcp.py)."""

from __future__ import annotations

import asyncio
import math

import pytest
from mcp.types import CallToolResult, TextContent

from coordinator.admin_cli.mcp_server import INT32_MAX, build_server, seconds, whole
from coordinator.admin_cli.runs_commands import plan_request
from shared.errors import InvalidArgumentError


@pytest.mark.parametrize("value", [2**31, 2**62, 2**70, -1, True, 1.5, "3"])
def test_whole_numbers_outside_the_field_are_refused(value: object) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        whole("seq", value, 0)  # type: ignore[arg-type]
    assert caught.value.message.startswith(f"seq: a whole number from 0 to {INT32_MAX}, not ")
    assert len(caught.value.message) < 80  # a huge number is cut, the sentence stays short


@pytest.mark.parametrize("value", [0, 1, INT32_MAX])
def test_whole_numbers_inside_the_field_pass(value: int) -> None:
    assert whole("seq", value, 0) == value


@pytest.mark.parametrize("value", [0, -1, 1e300, math.inf, -math.inf, math.nan, True, "1"])
def test_seconds_must_be_finite_positive_and_bounded(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^ttl_seconds: a number of seconds"):
        seconds("ttl_seconds", value)  # type: ignore[arg-type]


def test_seconds_in_range_pass() -> None:
    assert seconds("ttl_seconds", 600) == 600.0


async def test_a_wrong_type_is_one_sentence_naming_the_argument() -> None:
    server = build_server(None)  # type: ignore[arg-type]  # refused before any call is made
    cases = [
        ("journal_read", {"run_id": "r", "seq": "abc"}, "seq: should be a valid integer"),
        ("research", {"query": "q", "wait": "perhaps"}, "wait: should be a valid boolean"),
        ("run_status", {}, "run_id: required"),
        ("submit_plan", {"plan": [1, 2]}, "plan: should be a valid dictionary"),
        ("desktop_act", {"run_id": "r", "action": "dance"}, "action: should be 'screenshot'"),
    ]
    for tool, arguments, expected in cases:
        result = await server.call_tool(tool, arguments)
        assert isinstance(result, CallToolResult) and result.is_error
        [content] = result.content
        assert isinstance(content, TextContent)
        assert content.text.startswith(expected), content.text
        assert "\n" not in content.text and "validation error" not in content.text
        assert "Error executing tool" not in content.text


@pytest.mark.parametrize(
    ("plan", "expected"),
    [
        ([], 'plan: expected {"actions": [...]}'),
        ({"actions": "x"}, 'plan: expected {"actions": [...]}'),
        ({"actions": [{"args": {}}]}, 'actions[0]: needs a "kind"'),
        ({"actions": [{"kind": "diag.echo", "args": []}]}, "actions[0].args: must be an object"),
        ({"actions": [{"kind": "diag.echo", "route": {"labels": [1]}}]}, "actions[0].route.labels"),
        ({"actions": [], "limits": [1]}, "limits: must be an object, not a list"),
        ({"actions": [], "limits": {"max_actions": "many"}}, "limits.max_actions: must be an"),
        # Strictly (30.17): no string for a boolean, no misspelled key left unread.
        (
            {"actions": [{"kind": "diag.echo", "idempotent": "false"}]},
            "actions[0].idempotent: must be true or false, not the string 'false'",
        ),
        ({"actions": [{"kind": "diag.echo", "arg": {}}]}, "actions[0].arg: unknown field"),
    ],
)
def test_a_plan_is_checked_as_runs_submit_checks_a_plan_file(plan: object, expected: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        plan_request(plan)
    assert caught.value.message.startswith(expected), caught.value.message


def test_a_plan_becomes_the_submit_request() -> None:
    request = plan_request(
        {
            "title": "t",
            "actions": [{"kind": "diag.echo", "args": {"value": 1}, "idempotent": True}],
            "limits": {"max_actions": 3},
        }
    )
    assert request.title == "t" and request.limits.max_actions == 3
    [action] = request.actions
    assert (action.kind, action.args_json, action.idempotent) == ("diag.echo", '{"value": 1}', True)


def test_every_tool_says_what_it_touches_and_publishes_its_output_schema() -> None:
    server = build_server(None)  # type: ignore[arg-type]
    tools = {t.name: t for t in asyncio.run(server.list_tools())}
    hints = {
        name: (
            t.annotations.read_only_hint,
            t.annotations.destructive_hint,
            t.annotations.idempotent_hint,
        )
        for name, t in tools.items()
        if t.annotations is not None
    }
    assert set(hints) == set(tools)
    for name in ("fleet_status", "journal_search", "journal_read", "run_status"):
        assert hints[name] == (True, None, True), name
    assert hints["cancel_run"] == (False, True, True)
    assert hints["desktop_act"] == (False, True, False)
    assert hints["submit_plan"] == (False, True, False)
    assert hints["research"] == hints["desktop_request"] == (False, False, False)
    for name, tool in tools.items():
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", name
    wire = tools["cancel_run"].model_dump(by_alias=True, exclude_none=True)
    assert wire["annotations"] == {
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": True,
        "openWorldHint": False,
    }
    assert "runId" in wire["outputSchema"]["properties"]
