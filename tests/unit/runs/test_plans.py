"""Plans are read strictly (30.17), as pure rules: a field of the wrong type, an unknown key or
a key given twice (B12) is refused by its path, and a well-formed plan is read as it says.
The CLI, MCP and the RPC: tests/integration/runs/test_plans.py."""

from __future__ import annotations

import math
from typing import Any

import pytest

from coordinator.admin_cli.runs_commands import plan_request
from coordinator.runs.desktop.admission import checked_args
from coordinator.runs.plan import RawAction, parse_plan_actions
from shared import plans
from shared.gen.deskfleet.v1 import runs_pb2
from shared.receipts import GivenTwiceError, decode_result, given_twice
from tests.integration.runs.test_plans import ECHO, GIVEN_TWICE, _refusal, _with


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        # The forms found: a string for a boolean, a misspelled action or limits key.
        (_with(idempotent="false"),
         "actions[0].idempotent: must be true or false, not the string 'false'"),
        (_with(idempotent=0), "actions[0].idempotent: must be true or false, not the number 0"),
        (_with(idempotent=None), "actions[0].idempotent: must be true or false, not null"),
        ({"actions": [{"kind": "diag.echo", "arg": {"value": 1}}]},
         "actions[0].arg: unknown field; did you mean args?"),
        ({"actions": [ECHO], "limits": {"max_action": 3}},
         "limits.max_action: unknown field; did you mean max_actions?"),
        # Unknown keys at every level, with the nearest known one or the list.
        ({"actions": [ECHO], "titel": "t"}, "titel: unknown field; did you mean title?"),
        ({"actions": [ECHO], "zzz": 1}, "zzz: unknown field; known: title, actions, limits"),
        (_with(route={"lables": {"site": "lab"}}),
         "actions[0].route.lables: unknown field; did you mean labels?"),
        (_with(idempotant=True), "actions[0].idempotant: unknown field; did you mean idempotent?"),
        # Every field has one type.
        ({"actions": [ECHO], "title": 7}, "title: must be a string, not the number 7"),
        ({"actions": [{"kind": 3}]}, "actions[0].kind: must be a string, not the number 3"),
        ({"actions": [{"args": {}}]}, 'actions[0]: needs a "kind"'),
        ({"actions": ["diag.echo"]}, "actions[0]: must be an object"),
        (_with(args=None), "actions[0].args: must be an object, not null"),
        (_with(args=[1]), "actions[0].args: must be an object, not a list"),
        (_with(intent=["x"]), "actions[0].intent: must be a string, not a list"),
        (_with(route=None), "actions[0].route: must be an object, not null"),
        (_with(route={"worker": 12}),
         "actions[0].route.worker: must be a string, not the number 12"),
        (_with(route={"labels": {"site": 1}}),
         "actions[0].route.labels.site: must be a string, not the number 1"),
        (_with(route={"labels": ["site"]}),
         "actions[0].route.labels: must be an object, not a list"),
        (_with(route={"capability": True}),
         "actions[0].route.capability: must be a string, not the boolean true"),
        ({"actions": [ECHO], "limits": None}, "limits: must be an object, not null"),
        ({"actions": [ECHO], "limits": {"max_actions": "5"}},
         "limits.max_actions: must be an integer, not the string '5'"),
        ({"actions": [ECHO], "limits": {"max_actions": 5.0}},
         "limits.max_actions: must be an integer, not the number 5.0"),
        ({"actions": [ECHO], "limits": {"max_seconds": True}},
         "limits.max_seconds: must be a number, not the boolean true"),
        ({"actions": [ECHO], "limits": {"max_seconds": math.nan}}, "limits.max_seconds: between 0"),
        ({"actions": [ECHO], "limits": {"max_seconds": math.inf}}, "limits.max_seconds: between 0"),
        ({"actions": [ECHO], "limits": {"max_actions": -1}},
         "limits.max_actions: a whole number between 0 and 100000"),
        ({"actions": [ECHO], "limits": {"estimate_actions": 10**40}},
         "limits.estimate_actions: a whole number between 0 and 100000"),
        # The arguments are checked against the kind, as the coordinator checks them.
        ({"actions": [{"kind": "diag.echo", "args": {"valu": 1}}]},
         "actions[0].args.valu: not an argument of diag.echo"),
        ({"actions": [{"kind": "browser.fetch",
                       "args": {"url": "https://e.com", "visible": True}}]},
         "actions[0].args.visible: set by the coordinator only"),
        ({"actions": [{"kind": "desktop.left_click", "args": {"x": 1, "y": 1}}]},
         "actions[0].kind: desktop.left_click is not a plan action"),
        # Text fields keep their bounds and refuse control characters.
        ({"actions": [ECHO], "title": "a\x1b[2Jb"}, "title: "),
        (_with(intent="x" * 4001), "actions[0].intent: at most 4000 characters"),
    ],
)  # fmt: skip
def test_a_field_of_the_wrong_type_or_an_unknown_key_is_refused_by_its_path(
    doc: Any, expected: str
) -> None:
    assert _refusal(doc).startswith(expected)


def test_a_well_formed_plan_is_read_as_it_says() -> None:
    doc = plans.read_plan(
        {
            "title": "nightly check",
            "limits": {"max_actions": 20, "max_seconds": 600, "action_timeout_seconds": 60.5},
            "actions": [
                {"kind": "diag.echo", "args": {"value": "hi"}, "idempotent": True},
                {
                    "kind": "diag.append",
                    "args": {"name": "x.txt", "line": "once"},
                    "intent": "note it",
                    "route": {"labels": {"site": "lab"}, "capability": "headless"},
                },
            ],
        }
    )
    assert doc.title == "nightly check"
    assert doc.limits == {"max_actions": 20, "max_seconds": 600, "action_timeout_seconds": 60.5}
    echo, append = doc.actions
    assert (echo.kind, echo.args, echo.idempotent, echo.route) == (
        "diag.echo",
        {"value": "hi"},
        True,
        plans.PlanRoute(),
    )
    assert (append.idempotent, append.intent) == (False, "note it")
    assert append.route == plans.PlanRoute("", {"site": "lab"}, "headless")
    request = plan_request({"actions": [{**ECHO, "idempotent": False}], "limits": {}})
    assert [a.idempotent for a in request.actions] == [False]
    assert request.limits == runs_pb2.Limits()


@pytest.mark.parametrize(
    ("text", "where", "expected"),
    [
        # The red team's plan: the first key given twice in the document is named.
        (GIVEN_TWICE, "", "actions[0].idempotent"),
        ('{"actions": [], "limits": {"max_actions": 1, "max_actions": 100000}}', "",
         "limits.max_actions"),
        # An action's arguments as the RPC carries them (runs/plan.parse_plan_actions).
        ('{"name": "a.txt", "line": "x", "name": "b.txt"}', "actions[1].args",
         "actions[1].args.name"),
        # Deep in lists and objects; a worker's result (no `where`) is read by the same rule.
        ('[1, {"b": [{"c": 1, "c": 1}]}]', "", "[1].b[0].c"),
        ('{"echo": {"x": 1, "x": 2}}', "", "echo.x"),
        # An object that gave a key twice, itself dropped for its own key given twice.
        ('{"a": {"x": 1, "x": 2}, "a": 3}', "", "a"),
        # A key with control characters is named spelled out (the message is one line).
        ('{"k\\n\\u001b": 1, "k\\n\\u001b": 2}', "args", "args.k\\n\\x1b"),
    ],
)  # fmt: skip
def test_a_key_given_twice_is_refused_by_its_path(text: str, where: str, expected: str) -> None:
    """Python's JSON reader keeps the last of two values for one key: the plan above was
    taken with idempotent true and max_actions 100000 (B12)."""
    with pytest.raises(GivenTwiceError) as refused:
        decode_result(text, where)
    assert refused.value.message == f"{expected}: given twice"
    assert refused.value.path == expected and "\n" not in refused.value.message
    assert given_twice(text) == (expected.removeprefix(where).removeprefix(".") or None)


def test_keys_given_once_per_object_are_read_as_they_are() -> None:
    text = '[{"a": 1, "b": {"a": 2}}, {"a": 3}, {}]'  # one key in several objects is fine
    assert decode_result(text) == [{"a": 1, "b": {"a": 2}}, {"a": 3}, {}]
    assert given_twice(text) is None and given_twice("not json") is None
    [action] = parse_plan_actions([RawAction("diag.echo", '{"value": {"a": 1}}', False, {})])
    assert action.args == {"value": {"a": 1}}
    with pytest.raises(GivenTwiceError, match=r"^actions\[0\]\.args\.value: given twice$"):
        parse_plan_actions([RawAction("diag.echo", '{"value": 1, "value": 2}', False, {})])
    # A desktop act's arguments likewise: the agent that checked its click may have read the
    # other x.
    with pytest.raises(GivenTwiceError, match=r"^args\.x: given twice$"):
        checked_args("left_click", '{"x": 10, "y": 10, "x": 5000}')


def test_a_postcondition_is_read_and_sent_as_its_check() -> None:
    check = {"kind": "diag.has_line", "args": {"name": "x.txt", "line": "once"}}
    action = {"kind": "diag.append", "args": {"name": "x.txt", "line": "once"}}
    doc = plans.read_plan(
        {"actions": [{**action, "postcondition": {**check, "expect": {"present": True}}}]}
    )
    [append] = doc.actions
    assert append.postcondition == plans.Postcondition(
        "diag.has_line", {"name": "x.txt", "line": "once"}, {"present": True}
    )
    [sent] = plan_request(
        {"actions": [{**action, "postcondition": {**check, "expect": {"present": True}}}]}
    ).actions
    assert (sent.postcondition.kind, sent.postcondition.expect_json) == (
        "diag.has_line",
        '{"present": true}',
    )
    assert not plan_request({"actions": [action]}).actions[0].HasField("postcondition")
    assert _refusal(_with(postcondition={**check})).startswith("actions[0].postcondition.expect:")
    assert _refusal(
        _with(postcondition={**check, "kind": "browser.fetch", "expect": {"a": 1}})
    ) == (
        "actions[0].postcondition.kind: 'browser.fetch' is not a read-only check; a postcondition"
        " runs one of diag.has_line, browser.check"
    )


def _nested(depth: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"present": True}
    for _ in range(depth - 1):
        doc = {"a": doc}
    return doc


def test_a_postcondition_nested_past_its_depth_is_refused_not_a_recursion_error() -> None:
    """MCP's submit_plan reads plans here: 5,000 levels raised RecursionError from the size
    check's json.dumps, where the CLI and the RPC answered INVALID_ARGUMENT."""
    check = {"kind": "diag.has_line", "args": {"name": "x.txt", "line": "once"}}
    deep = {**check, "expect": _nested(5000)}
    assert _refusal(_with(postcondition=deep)) == (
        f"actions[0].postcondition.expect: nested at most {plans.MAX_EXPECT_DEPTH} deep"
    )
    with pytest.raises(plans.InvalidArgumentError):
        plan_request({"actions": [{"kind": "diag.append", "args": {}, "postcondition": deep}]})
    fits = {**check, "expect": _nested(plans.MAX_EXPECT_DEPTH)}
    plans.read_plan({"actions": [{**ECHO, "postcondition": fits}]})
