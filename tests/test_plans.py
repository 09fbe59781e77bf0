"""Plans are read strictly (30.17): one reading in `shared/plans.py` for the CLI, MCP and the
coordinator; a string where a boolean belongs, a misspelled key or a number of the wrong
kind is refused with its path, never taken loosely. The rules run in-process; the CLI and the
RPC are then held to them against a real coordinator."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from coordinator.admin_cli.runs_commands import plan_request
from shared import plans
from shared.errors import InvalidArgumentError
from shared.gen.deskfleet.v1 import runs_pb2
from tests.harness import CoordinatorProcess

ECHO = {"kind": "diag.echo", "args": {"value": "hi"}}


@pytest.fixture(scope="module")
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    return module_coordinator


def _refusal(doc: Any) -> str:
    with pytest.raises(InvalidArgumentError) as refused:
        plans.read_plan(doc)
    message = refused.value.message
    assert "\n" not in message and len(message) < 300, message
    return message


def _with(**action: Any) -> dict[str, Any]:
    return {"actions": [{**ECHO, **action}]}


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


# ------------------------------------------------------------------ a real coordinator


def test_the_cli_refuses_a_loose_plan_and_nothing_is_written(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    owner = _owner(coordinator, "loose-plans")
    for i, (doc, expected) in enumerate(
        [
            (_with(kind="diag.append", args={"name": "n", "line": "l"}, idempotent="false"),
             "actions[0].idempotent: must be true or false, not the string 'false'"),
            ({"actions": [{"kind": "diag.echo", "arg": {"value": 1}}]},
             "actions[0].arg: unknown field; did you mean args?"),
            ({"actions": [ECHO], "limits": {"max_action": 3}},
             "limits.max_action: unknown field; did you mean max_actions?"),
        ]
    ):  # fmt: skip
        plan = tmp_path / f"plan{i}.json"
        plan.write_text(json.dumps(doc))
        done = coordinator.cli("runs", "submit", str(plan), token_file=owner, check=False)
        assert done.returncode == 2, done.stderr
        assert done.stderr == f"deskfleet: {expected}\n"
    assert coordinator.cli_json("runs", "list", token_file=owner)["runs"] == []


def _owner(coordinator: CoordinatorProcess, name: str) -> Path:
    token = coordinator.cli_json("users", "create", name)["token"]
    path = coordinator.workdir / f"{name}.token"
    path.write_text(token)
    return path


def _raw_submit(coordinator: CoordinatorProcess, body: bytes, owner: Path) -> runs_pb2.Run:
    channel = coordinator.channel()
    assert channel is not None
    call: Callable[..., runs_pb2.Run] = channel.unary_unary(
        "/deskfleet.v1.RunService/SubmitRun",
        request_serializer=lambda raw: raw,
        response_deserializer=runs_pb2.Run.FromString,
    )
    return call(body, metadata=coordinator.admin_metadata(owner), timeout=30)


def _field(number: int, value: int) -> bytes:
    """One varint field on the wire (numbers and values below 128 fit one byte each)."""
    assert number < 16 and value < 128
    return bytes([number << 3, value])


def test_the_rpc_refuses_fields_it_does_not_know_and_limits_the_cli_refuses(
    coordinator: CoordinatorProcess,
) -> None:
    owner = _owner(coordinator, "raw-requests")
    action = runs_pb2.PlannedAction(kind="diag.echo", args_json="{}").SerializeToString()
    nested = action + _field(12, 1)  # PlannedAction has no field 12
    cases = [
        (runs_pb2.SubmitRunRequest(title="t").SerializeToString() + _field(9, 1),
         "field 9 is unknown to this coordinator (SubmitRunRequest)"),
        (bytes([0x0A, len(nested)]) + nested,
         "actions[0]: field 12 is unknown to this coordinator (PlannedAction)"),
    ]  # fmt: skip
    for body, expected in cases:
        with pytest.raises(grpc.RpcError) as refused:
            _raw_submit(coordinator, body, owner)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert refused.value.details().startswith(expected), refused.value.details()

    # A request built without the CLI meets the bounds the CLI's reading applies, in the
    # same words.
    over = runs_pb2.SubmitRunRequest(
        actions=[runs_pb2.PlannedAction(kind="diag.echo", args_json="{}")],
        limits=runs_pb2.Limits(max_actions=1_000_000),
    )
    with pytest.raises(grpc.RpcError) as refused:
        _raw_submit(coordinator, over.SerializeToString(), owner)
    cli_side = _refusal({"actions": [ECHO], "limits": {"max_actions": 1_000_000}})
    assert refused.value.details() == cli_side
    assert coordinator.cli_json("runs", "list", token_file=owner)["runs"] == []
