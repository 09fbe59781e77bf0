"""Owner inputs that were tried against the coordinator and held (issue 30's list), kept held
where no other test already holds them: control characters in every text an owner writes,
at the RPC itself (the CLI's own checks are in tests/integration/runs/test_plans.py and
test_terminal.py);
plan policy overrides; huge, negative and wrongly typed numbers in a desktop scope and in a
desktop act's arguments.

Held elsewhere, and not repeated here: scratch names (test_worker_actions.py, test_runs.py),
unknown kinds and arguments (test_action_kinds.py), scripted-model paths (test_goal.py,
test_model_providers.py), a loopback fetch a plan marks `allow_private` (test_research.py),
key names, regions, displays, scaling and `args.scope` (test_desktop_scope.py,
test_desktop_actions.py), MCP bounds (test_mcp_arguments.py) and ownership (test_mcp.py)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from coordinator.runs.desktop import scope as coordinator_scope
from coordinator.runs.desktop.admission import checked_args as _validate_args
from coordinator.runs.plan import POLICY_NUMBERS, PlannedAction, with_network_policy
from shared import desktop_scope as contract
from shared.errors import InvalidArgumentError
from shared.receipts import encode_result

ESC, BIDI, C1 = "\x1b[2J", "\u202e", "\x9b31m"


# ------------------------------------------------------------------ plan policy overrides


def _fetch(policy: object) -> PlannedAction:
    args = {"url": "https://example.com/", "policy": policy}
    return PlannedAction("browser.fetch", args, True, {})


def _policy_refusal(policy: object) -> str:
    with pytest.raises(InvalidArgumentError) as refused:
        with_network_policy(_fetch(policy), False, "actions[0].args")
    return refused.value.message


def test_a_plan_narrows_the_operators_policy_and_never_opens_it() -> None:
    opened = with_network_policy(_fetch({"allow_private": True, "timeout": 5}), False)
    assert opened.args["policy"] == {"allow_private": False, "timeout": 5}  # the operator's word
    assert with_network_policy(_fetch({}), True).args["policy"] == {"allow_private": True}
    for policy, expected in [
        ({"allow_privat": True}, "actions[0].args.policy.allow_privat: not a policy field"),
        ({"proxy": "http://evil"}, "actions[0].args.policy.proxy: not a policy field"),
        ({"allow_private": "yes"}, "actions[0].args.policy.allow_private: true or false"),
        ({"deny_domains": ["x.com"] * 101}, "actions[0].args.policy.deny_domains: a list of at"),
        ({"allow_domains": "x.com"}, "actions[0].args.policy.allow_domains: a list of at"),
        ({"allow_domains": [f"x{ESC}.com"]}, "actions[0].args.policy.allow_domains[0]: must"),
        ({"allow_domains": [7]}, "actions[0].args.policy.allow_domains[0]: a domain name"),
        ([], "actions[0].args.policy: must be an object"),
    ]:
        assert _policy_refusal(policy).startswith(expected), policy


@pytest.mark.parametrize("name", sorted(POLICY_NUMBERS))
def test_each_policy_number_stays_within_the_workers_own_range(name: str) -> None:
    kind, low, high = POLICY_NUMBERS[name]
    for value in (low - 1, high * 2, 2**63, -(2**63), 1e300, math.nan, math.inf, True, "5"):
        assert _policy_refusal({name: value}).startswith(f"actions[0].args.policy.{name}: "), value
    for value in (low, high):
        with_network_policy(_fetch({name: kind(value)}), False)


# ------------------------------------------------------------------ desktop numbers


@pytest.mark.parametrize(
    ("asked", "field"),
    [
        ({"ttl": -5}, "scope.ttl"),
        ({"ttl": 1e300}, "scope.ttl"),
        ({"ttl": math.inf}, "scope.ttl"),
        ({"max_actions": -1}, "scope.max_actions"),
        ({"max_actions": 2**63}, "scope.max_actions"),
        ({"displays": [-1]}, "scope.displays"),
        ({"displays": [2**40]}, "scope.displays"),
        ({"displays": list(range(contract.MAX_DISPLAYS + 1))}, "scope.displays"),
        ({"region": coordinator_scope.Region(-1, 0, 10, 10)}, "scope.region"),
        ({"region": coordinator_scope.Region(0, 0, -10, 10)}, "scope.region"),
        ({"region": coordinator_scope.Region(0, 0, 10, 2**40)}, "scope.region"),
    ],
)  # fmt: skip
def test_huge_and_negative_numbers_in_a_scope_are_refused_by_name(
    asked: dict[str, Any], field: str
) -> None:
    request = {"actions": ["screenshot"], "displays": [], "region": None, "ttl": 60.0,
               "max_actions": 5} | asked  # fmt: skip
    with pytest.raises(InvalidArgumentError, match=rf"^{field}"):
        coordinator_scope.requested(**request)
    granted = coordinator_scope.requested(["screenshot"], [0], None, 60.0, 5)
    narrowing = {"actions": [], "displays": [], "region": None, "ttl": 0.0,
                 "max_actions": 0} | asked  # fmt: skip
    with pytest.raises(InvalidArgumentError, match=rf"^{field}"):
        coordinator_scope.narrowed(granted, **narrowing)


@pytest.mark.parametrize(
    ("action", "args", "field"),
    [
        ("left_click", {"x": 2**63, "y": 1}, "x: "),
        ("left_click", {"x": -1, "y": 1}, "x: "),
        ("left_click", {"x": 1.5, "y": 1}, "x, y: integers"),
        ("left_click", {"x": True, "y": 1}, "x, y: integers"),
        ("left_click_drag", {"x": 1, "y": 1, "to_x": 2**53, "to_y": 1}, "to_x: "),
        ("screenshot", {"display": -1}, "args.display: "),
        ("screenshot", {"display": 2**40}, "args.display: "),
        ("screenshot", {"display": True}, "args.display: "),
        ("mouse_move", {"x": 1, "y": 1, "space": {"width": -1, "height": 10}}, "space: "),
        ("mouse_move", {"x": 1, "y": 1, "space": {"width": 0, "height": 10}}, "space: "),
        ("mouse_move", {"x": 1, "y": 1, "space": {"width": 2**40, "height": 10}}, "space: "),
        ("type", {"text": 5}, "args.text: "),
        ("key", {"key": f"ctrl+{BIDI}"}, "args.key: "),
        ("screenshot", {"scope": {"actions": ["type"]}}, "args.scope: set by the coordinator"),
    ],
)  # fmt: skip
def test_an_acts_numbers_and_text_are_refused_before_anything_is_written(
    action: str, args: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        _validate_args(action, encode_result(args))
    assert refused.value.message.startswith(field), refused.value.message
    assert ESC not in refused.value.message and BIDI not in refused.value.message
