"""The desktop scope contract (shared/desktop_scope.py): the coordinator and the worker agree on
every action, limit and refusal code, the scope reaches the worker as a typed message, and a
scope that breaks the contract (or one smuggled into the args) is refused by the worker.

In process, no display: every worker check here runs before the screen is touched.
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from coordinator.agent.tools import COMPUTER_ACTIONS
from coordinator.model.orders import DispatchOrder
from coordinator.runs.desktop import admission as coordinator_desktop, scope as coordinator_scope
from coordinator.runs.desktop.runs import ActResult
from coordinator.runs.desktop.scope import Scope
from coordinator.servicers import desktop as desktop_servicer
from coordinator.servicers.worker_gateway import _message
from coordinator.streams import relay
from shared import desktop_scope as contract
from shared.desktop_scope import Grant, Region
from shared.errors import InvalidArgumentError
from shared.gen.deskfleet.v1 import desktop_pb2, worker_pb2
from shared.receipts import encode_result
from worker_agent.actions import REFUSED, ActionContext, ActionRefused, ActionRegistry, run_action
from worker_agent.desktop import DesktopActions, DesktopSession, actions as worker_desktop
from worker_agent.desktop.keys import parse_keys
from worker_agent.desktop.scope import DesktopScope, check_scope, check_text_keys
from worker_agent.desktop.text import SecretText

ROOT = Path(__file__).resolve().parents[3]
EVERYTHING = Grant(contract.ACTIONS, (0,), None, 60.0, 5)


def worker_refusal(call: Any) -> ActionRefused:
    with pytest.raises(ActionRefused) as info:
        call()
    return info.value


def received(grant: worker_pb2.ScopeGrant | None) -> DesktopScope:
    """What the worker makes of a grant after it crossed the wire."""
    if grant is not None:
        grant = worker_pb2.ScopeGrant.FromString(grant.SerializeToString())
    return DesktopScope.received(grant, received_at=0.0)


# ------------------------------------------------------------------------ the vocabulary


def test_both_ends_know_the_same_actions() -> None:
    registry = ActionRegistry()
    DesktopActions(DesktopSession()).register(registry)
    assert set(registry.kinds()) == {contract.PREFIX + a for a in contract.ACTIONS}
    assert set(worker_desktop.FIELDS) == set(contract.ACTIONS)
    assert COMPUTER_ACTIONS == contract.ACTIONS  # what a goal's model is offered
    for action in contract.ACTIONS:
        try:
            coordinator_desktop.checked_args(action, "{}")
        except InvalidArgumentError as exc:  # a missing argument, not an unknown action
            assert exc.message.startswith("args."), exc
    with pytest.raises(InvalidArgumentError, match=r"^action: unknown 'shell'"):
        coordinator_desktop.checked_args("shell", "{}")


def test_input_and_idempotent_actions_split_the_vocabulary() -> None:
    assert set(contract.ACTIONS) == contract.INPUT | contract.IDEMPOTENT
    assert not contract.INPUT & contract.IDEMPOTENT
    assert {"type", "key", "left_click"} <= contract.INPUT
    assert "screenshot" in contract.IDEMPOTENT


# ---------------------------------------------------------------------------- the limits


def coordinator_accepts(action: str, args: dict[str, Any]) -> bool:
    try:
        coordinator_desktop.checked_args(action, encode_result(args))
    except InvalidArgumentError:
        return False
    return True


def worker_accepts(check: Any) -> bool:
    try:
        check()
    except ActionRefused as exc:
        assert exc.code == contract.INVALID_ARGUMENT, exc
        return False
    return True


def worker_space(space: object) -> Any:
    return lambda: worker_desktop._Args("mouse_move", {"space": space}).space()


def worker_display(index: int) -> Any:
    return lambda: worker_desktop._Args("screenshot", {"display": index}).display()


@pytest.mark.parametrize(
    ("limit", "action", "args_at", "args_past", "worker_at", "worker_past"),
    [
        ("MAX_COMBOS", "key",
         {"key": " ".join(["a"] * contract.MAX_COMBOS)},
         {"key": " ".join(["a"] * (contract.MAX_COMBOS + 1))},
         lambda: parse_keys(" ".join(["a"] * contract.MAX_COMBOS)),
         lambda: parse_keys(" ".join(["a"] * (contract.MAX_COMBOS + 1)))),
        ("MAX_KEY_CHARS", "key",
         {"key": "a".ljust(contract.MAX_KEY_CHARS)},
         {"key": "a".ljust(contract.MAX_KEY_CHARS + 1)},
         lambda: parse_keys("a".ljust(contract.MAX_KEY_CHARS)),
         lambda: parse_keys("a".ljust(contract.MAX_KEY_CHARS + 1))),
        ("MAX_TEXT", "type",
         {"text": "x" * contract.MAX_TEXT},
         {"text": "x" * (contract.MAX_TEXT + 1)},
         lambda: SecretText.resolve("x" * contract.MAX_TEXT, {}),
         lambda: SecretText.resolve("x" * (contract.MAX_TEXT + 1), {})),
        ("MAX_SPACE", "mouse_move",
         {"space": {"width": contract.MAX_SPACE, "height": 1}},
         {"space": {"width": contract.MAX_SPACE + 1, "height": 1}},
         worker_space({"width": contract.MAX_SPACE, "height": 1}),
         worker_space({"width": contract.MAX_SPACE + 1, "height": 1})),
        ("space shape", "mouse_move",
         {"space": {"width": 10, "height": 10}},
         {"space": {"width": 10, "height": 10, "depth": 1}},
         worker_space({"width": 10, "height": 10}),
         worker_space({"width": 10, "height": 10, "depth": 1})),
        ("MAX_DISPLAYS", "screenshot",
         {"display": contract.MAX_DISPLAYS - 1},
         {"display": contract.MAX_DISPLAYS},
         worker_display(contract.MAX_DISPLAYS - 1),
         worker_display(contract.MAX_DISPLAYS)),
    ],
    ids=lambda v: v if (isinstance(v, str) and v.isupper()) or v == "space shape" else "",
)  # fmt: skip
def test_an_argument_limit_holds_at_the_same_value_on_both_ends(
    limit: str, action: str, args_at: dict[str, Any], args_past: dict[str, Any],
    worker_at: Any, worker_past: Any,
) -> None:  # fmt: skip
    assert coordinator_accepts(action, args_at) and worker_accepts(worker_at), limit
    assert not coordinator_accepts(action, args_past), limit
    assert not worker_accepts(worker_past), limit


def coordinator_grants(**changes: Any) -> bool:
    asked = {"actions": ["screenshot"], "displays": [0], "region": None, "ttl": 60.0,
             "max_actions": 5} | changes  # fmt: skip
    try:
        coordinator_scope.requested(**asked)
    except InvalidArgumentError:
        return False
    return True


def worker_takes(**changes: Any) -> bool:
    grant = replace(Grant(("screenshot",), (0,), None, 60.0, 5), **changes).to_proto()
    try:
        received(grant)
    except ActionRefused as exc:
        assert exc.code == contract.INVALID_SCOPE, exc
        return False
    return True


@pytest.mark.parametrize(
    ("limit", "coordinator_at", "coordinator_past", "worker_at", "worker_past"),
    [
        ("MAX_TTL", {"ttl": contract.MAX_TTL}, {"ttl": contract.MAX_TTL + 1},
         {"expires_in": contract.MAX_TTL}, {"expires_in": contract.MAX_TTL + 1}),
        ("MAX_ACTIONS", {"max_actions": contract.MAX_ACTIONS},
         {"max_actions": contract.MAX_ACTIONS + 1},
         {"remaining": contract.MAX_ACTIONS}, {"remaining": contract.MAX_ACTIONS + 1}),
        ("MAX_DISPLAYS", {"displays": [contract.MAX_DISPLAYS - 1]},
         {"displays": [contract.MAX_DISPLAYS]},
         {"displays": (contract.MAX_DISPLAYS - 1,)}, {"displays": (contract.MAX_DISPLAYS,)}),
        ("MAX_PIXELS",
         {"region": Region(contract.MAX_PIXELS - 1, 0, contract.MAX_PIXELS, 1)},
         {"region": Region(contract.MAX_PIXELS, 0, 1, 1)},
         {"region": Region(contract.MAX_PIXELS - 1, 0, contract.MAX_PIXELS, 1)},
         {"region": Region(contract.MAX_PIXELS, 0, 1, 1)}),
        ("region size", {"region": Region(0, 0, 1, 1)}, {"region": Region(0, 0, 0, 1)},
         {"region": Region(0, 0, 1, 1)}, {"region": Region(0, 0, 0, 1)}),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)  # fmt: skip
def test_a_scope_limit_holds_at_the_same_value_on_both_ends(
    limit: str, coordinator_at: dict[str, Any], coordinator_past: dict[str, Any],
    worker_at: dict[str, Any], worker_past: dict[str, Any],
) -> None:  # fmt: skip
    assert coordinator_grants(**coordinator_at) and worker_takes(**worker_at), limit
    assert not coordinator_grants(**coordinator_past), limit
    assert not worker_takes(**worker_past), limit


# ----------------------------------------------------------------------------- the rule

DISPLAY = (1280, 800)
SPACE = {"width": 1024, "height": 640}


@pytest.mark.parametrize(
    ("granted", "action", "args"),
    [
        (Scope(("left_click",)), "left_click", {"x": 5, "y": 5}),
        (Scope(("screenshot",)), "left_click", {"x": 5, "y": 5}),
        (Scope(("left_click",), (0, 1)), "left_click", {"x": 5, "y": 5, "display": 1}),
        (Scope(("left_click",)), "left_click", {"x": 5, "y": 5, "display": 2}),
        (Scope(("left_click",), region=Region(0, 0, 999, 10)), "left_click", {"x": 998, "y": 5}),
        (Scope(("left_click",), region=Region(0, 0, 999, 10)), "left_click", {"x": 999, "y": 5}),
        # Scaled: both ends map through the same rounding, so they agree at the region's edge.
        (Scope(("left_click",), region=Region(0, 0, 999, 10)), "left_click",
         {"x": 798, "y": 5, "space": SPACE}),
        (Scope(("left_click",), region=Region(0, 0, 999, 10)), "left_click",
         {"x": 799, "y": 5, "space": SPACE}),
        (Scope(("left_click_drag",), region=Region(0, 0, 100, 100)), "left_click_drag",
         {"x": 5, "y": 5, "to_x": 5, "to_y": 100}),
        (Scope(("type",)), "type", {"text": "ls\n"}),
        (Scope(("type", "key")), "type", {"text": "ls\n"}),
        (Scope(("type",)), "type", {"text": "ls \u0085"}),
    ],
)  # fmt: skip
def test_coordinator_and_worker_reach_the_same_verdict(
    granted: Scope, action: str, args: dict[str, Any]
) -> None:
    at_coordinator = coordinator_scope.check(granted, action, args, DISPLAY)
    scope = received(granted.grant(60.0, 5).to_proto())
    display = args.get("display", 0)
    space = contract.space_of(args.get("space"))
    points = [(args[xk], args[yk]) for xk, yk in (("x", "y"), ("to_x", "to_y")) if xk in args]
    if space is not None:
        points = [
            (contract.scale(x, space[0], DISPLAY[0]), contract.scale(y, space[1], DISPLAY[1]))
            for x, y in points
        ]
    try:
        check_scope(scope, action, display, points, now=0.0)
        if action == "type":
            check_text_keys(scope, args["text"])
        at_worker = None
    except ActionRefused as exc:
        at_worker = exc.code
    assert (at_coordinator.code if at_coordinator else None) == at_worker, (
        at_coordinator,
        at_worker,
    )


def test_a_scaled_point_maps_back_to_itself() -> None:
    for x in range(0, 1024, 7):
        real = contract.scale(x, 1024, 1280)
        assert contract.scale(real, 1280, 1024) == x
    assert contract.scale(10**6, 100, 50) == 49 and contract.scale(-5, 100, 50) == 0


# ------------------------------------------------------------------------------ the codes


def _codes_raised(paths: list[Path]) -> set[str]:
    """The refusal codes these modules pass to Refusal(...) or ActionRefused(...); a code
    written as a string literal fails the test: codes come from the contract."""
    found: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            if name == "Refusal" and node.args:
                code = node.args[0]
            elif name == "ActionRefused":
                keyword = [k.value for k in node.keywords if k.arg == "code"]
                code = keyword[0] if keyword else node.args[1] if len(node.args) > 1 else None
                if code is None:
                    continue
            else:
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            assert not isinstance(code, ast.Constant), f"{where}: a literal code {code.value!r}"
            if isinstance(code, ast.Attribute) and isinstance(code.value, ast.Name):
                if code.value.id != "contract":
                    continue  # a code carried from elsewhere (refusal.code, stop.code)
                constant = code.attr
            elif isinstance(code, ast.Name):
                constant = code.id
            else:
                continue
            assert hasattr(contract, constant), f"{where}: {constant} is not in the contract"
            found.add(getattr(contract, constant))
    return found


def test_every_refusal_code_is_in_the_contract_as_who_refuses_with_it() -> None:
    shared = [ROOT / "shared/desktop_scope.py"]
    coordinator = _codes_raised(sorted((ROOT / "coordinator/runs/desktop").glob("*.py")) + shared)
    worker = _codes_raised(sorted((ROOT / "worker_agent/desktop").glob("*.py")) + shared)
    by = {who: {c for c, (w, _) in contract.CODES.items() if w in (who, contract.BOTH)}
          for who in (contract.COORDINATOR, contract.WORKER)}  # fmt: skip
    assert coordinator == by[contract.COORDINATOR]
    assert worker == by[contract.WORKER]


def test_the_readme_names_every_code() -> None:
    readme = (ROOT / "README.md").read_text()
    assert [c for c in contract.CODES if f"`{c}`" not in readme] == []


def test_the_coordinator_reads_every_code_off_a_worker_error_line() -> None:
    from coordinator.store.models import ActionRow

    for code in contract.CODES:
        row = ActionRow(id="act", run_id="run", status="FAILED", receipt_id="", error="")
        result = ActResult(row, {"status": "refused", "error": f"{code}: why"}, ())
        assert desktop_servicer._act_message(result).code == code


# ------------------------------------------------------------------------ the wire shape


def test_the_scope_travels_as_a_typed_message_and_never_in_the_args() -> None:
    granted = Scope(("left_click", "type"), (0, 2), Region(10, 20, 300, 400), 600.0, 50)
    order = DispatchOrder(
        "wrk", "act", "run", "att", 1, 1, "desktop.left_click", '{"x":1,"y":2}', False, 60.0,
        scope=granted.grant(540.25, 7),
    )  # fmt: skip
    # Through the store to another replica and out on the worker's stream.
    forwarded = relay.decode(None, relay.encode(order))  # type: ignore[arg-type]
    assert forwarded == order
    message = _message(forwarded)
    assert isinstance(message, worker_pb2.CoordinatorMessage)
    dispatch = worker_pb2.CoordinatorMessage.FromString(message.SerializeToString()).dispatch
    assert "scope" not in json.loads(dispatch.args_json)
    scope = DesktopScope.received(dispatch.scope, received_at=0.0)
    assert scope.grant == Grant(("left_click", "type"), (0, 2), Region(10, 20, 300, 400), 540.25, 7)
    assert worker_pb2.ScopeGrant.DESCRIPTOR.fields_by_name["region"].message_type is (
        desktop_pb2.Region.DESCRIPTOR
    )  # one Region message for approvals and grants


def test_a_caller_cannot_set_what_the_coordinator_adds() -> None:
    for key in ("scope", "resume"):
        with pytest.raises(InvalidArgumentError, match=rf"^args\.{key}: set by the coordinator"):
            coordinator_desktop.checked_args("left_click", encode_result({key: True}))


# ---------------------------------------------------- what the worker does with a bad scope


def bad(**fields: Any) -> worker_pb2.ScopeGrant:
    message = EVERYTHING.to_proto()
    for name, value in fields.items():
        if name == "region":
            message.region.CopyFrom(desktop_pb2.Region(**value))
        elif isinstance(value, list):
            del getattr(message, name)[:]
            getattr(message, name).extend(value)
        else:
            setattr(message, name, value)
    return message


@pytest.mark.parametrize(
    ("grant", "says"),
    [
        (bad(actions=[]), "scope.actions: empty"),
        (bad(actions=["screenshot", "shell"]), "scope.actions: unknown 'shell'"),
        (bad(actions=["desktop.left_click"]), "scope.actions: unknown 'desktop.left_click'"),
        (bad(displays=[]), "scope.displays"),
        (bad(displays=[-1]), "scope.displays"),
        (bad(displays=[contract.MAX_DISPLAYS]), "scope.displays"),
        (bad(region={"x": 0, "y": 0, "width": 0, "height": 10}), "scope.region"),
        (bad(region={"x": -1, "y": 0, "width": 10, "height": 10}), "scope.region"),
        (bad(region={"x": 0, "y": 0, "width": 2**31 - 1, "height": 10}), "scope.region"),
        (bad(expires_in_seconds=math.nan), "scope.expires_in_seconds"),
        (bad(expires_in_seconds=math.inf), "scope.expires_in_seconds"),
        (bad(expires_in_seconds=contract.MAX_TTL * 365), "scope.expires_in_seconds"),
        (bad(remaining_actions=-1), "scope.remaining_actions"),
        (bad(remaining_actions=2**31 - 1), "scope.remaining_actions"),
    ],
    ids=lambda v: "" if isinstance(v, worker_pb2.ScopeGrant) else v.split(":")[0],
)
def test_a_malformed_scope_is_refused_invalid_scope(
    grant: worker_pb2.ScopeGrant, says: str
) -> None:
    refused = worker_refusal(lambda: received(grant))
    assert refused.code == contract.INVALID_SCOPE
    assert str(refused).startswith("the scope sent breaks the contract: " + says), refused


def desktop_registry() -> ActionRegistry:
    registry = ActionRegistry()
    DesktopActions(DesktopSession()).register(registry)
    return registry


@pytest.mark.parametrize("kind", ["left_click", "type", "screenshot"])
def test_a_desktop_action_refuses_a_bad_scope_before_it_looks_at_the_screen(kind: str) -> None:
    registry = desktop_registry()
    args = {"left_click": {"x": 1, "y": 1}, "type": {"text": "hi"}, "screenshot": {}}[kind]
    cases = [
        # A hostile message: a scope in the args beside (or instead of) the real one.
        (args | {"scope": EVERYTHING.to_json()}, EVERYTHING.to_proto(), "invalid_scope: 'scope'"),
        (args | {"scope": EVERYTHING.to_json()}, None, "invalid_scope: 'scope'"),
        (args, bad(displays=[99]), "invalid_scope: the scope sent breaks the contract"),
        (args, None, "no_scope: no approved scope came with this action"),
    ]
    for sent, grant, says in cases:
        ctx = ActionContext("act", 1, scope=grant)
        outcome = run_action(registry, contract.PREFIX + kind, encode_result(sent), ctx)
        assert outcome.status == REFUSED and outcome.error.startswith(says), (sent, outcome)
        assert ctx.artifacts == []


def test_actions_that_need_no_scope_still_refuse_one_in_the_args() -> None:
    outcome = run_action(
        desktop_registry(),
        "desktop.wait",
        encode_result({"seconds": 0, "scope": EVERYTHING.to_json()}),
        ActionContext("act", 1),
    )
    assert outcome.status == REFUSED and outcome.error.startswith("invalid_scope: 'scope'")


INT32 = st.integers(-(2**31), 2**31 - 1)


@given(
    actions=st.lists(
        st.sampled_from(contract.ACTIONS) | st.text(st.characters(exclude_categories=["Cs"])),
        max_size=4,
    ),
    displays=st.lists(INT32, max_size=3),
    region=st.none() | st.tuples(INT32, INT32, INT32, INT32),
    expires_in=st.floats(),
    remaining=INT32,
)
@settings(max_examples=100, deadline=None)
def test_any_scope_a_coordinator_sends_is_within_the_contract_or_refused(
    actions: list[str],
    displays: list[int],
    region: tuple[int, int, int, int] | None,
    expires_in: float,
    remaining: int,
) -> None:
    message = worker_pb2.ScopeGrant(
        actions=actions, displays=displays, expires_in_seconds=expires_in,
        remaining_actions=remaining,
    )  # fmt: skip
    if region is not None:
        x, y, width, height = region
        message.region.CopyFrom(desktop_pb2.Region(x=x, y=y, width=width, height=height))
    try:
        grant = received(message).grant
    except ActionRefused as exc:
        assert exc.code == contract.INVALID_SCOPE
        return
    assert grant.actions and set(grant.actions) <= set(contract.ACTIONS)
    assert grant.displays and all(0 <= d < contract.MAX_DISPLAYS for d in grant.displays)
    assert grant.region is None or grant.region.fits()
    assert math.isfinite(grant.expires_in) and grant.expires_in <= contract.MAX_TTL
    assert 0 <= grant.remaining <= contract.MAX_ACTIONS


# ------------------------------------------------------ the actions today's tools added


def worker_hold(key: str, seconds: object) -> Any:
    return lambda: DesktopActions(DesktopSession())._plan(
        "hold_key", worker_desktop._Args("hold_key", {"key": key, "seconds": seconds})
    )


def worker_zoom(region: object) -> Any:
    return lambda: worker_desktop._zoom_corners(worker_desktop._Args("zoom", {"region": region}))


@pytest.mark.parametrize(
    ("what", "args", "worker", "accepted"),
    [
        ("a hold at the limit", {"key": "shift", "seconds": contract.MAX_HOLD},
         worker_hold("shift", contract.MAX_HOLD), True),
        ("a hold past it", {"key": "shift", "seconds": contract.MAX_HOLD + 0.5},
         worker_hold("shift", contract.MAX_HOLD + 0.5), False),
        ("a hold of no time", {"key": "shift", "seconds": 0}, worker_hold("shift", 0), False),
        ("a hold of true seconds", {"key": "shift", "seconds": True},
         worker_hold("shift", True), False),
        ("two combos held", {"key": "shift Return", "seconds": 1},
         worker_hold("shift Return", 1), False),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else "",
)  # fmt: skip
def test_hold_key_is_bounded_alike_on_both_ends(
    what: str, args: dict[str, Any], worker: Any, accepted: bool
) -> None:
    assert coordinator_accepts("hold_key", args) is accepted, what
    assert worker_accepts(worker) is accepted, what


@pytest.mark.parametrize(
    ("region", "accepted"),
    [
        ([0, 0, 1, 1], True),
        ([0, 0, contract.MAX_PIXELS, contract.MAX_PIXELS], True),
        ([5, 5, 5, 10], False),  # empty
        ([10, 0, 5, 10], False),  # reversed
        ([0, 0, 10], False),
        ([0, 0, 10.0, 10], False),
        ("0,0,10,10", False),
    ],
)
def test_a_zoom_region_is_read_alike_on_both_ends(region: object, accepted: bool) -> None:
    assert coordinator_accepts("zoom", {"region": region}) is accepted, region
    if isinstance(region, list) and len(region) == 4 and region[2] > contract.MAX_PIXELS:
        return
    assert worker_accepts(worker_zoom(region)) is accepted, region


def test_a_zoom_is_checked_against_the_approved_region_by_its_corners() -> None:
    granted = Scope(("zoom",), (0,), Region(0, 0, 700, 800))
    inside = coordinator_scope.check(granted, "zoom", {"region": [0, 0, 700, 800]}, DISPLAY)
    assert inside is None
    across = coordinator_scope.check(granted, "zoom", {"region": [600, 0, 701, 10]}, DISPLAY)
    assert across is not None and across.code == contract.OUTSIDE_REGION
    not_asked = coordinator_scope.check(
        Scope(("screenshot",), (0,)), "zoom", {"region": [0, 0, 10, 10]}, DISPLAY
    )
    assert not_asked is not None and not_asked.code == contract.OUT_OF_SCOPE
