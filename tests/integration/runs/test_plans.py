"""Plans are read strictly (30.17): one reading in `shared/plans.py` for the CLI, MCP and the
coordinator; a string where a boolean belongs, a misspelled key or a number of the wrong
kind is refused with its path, never taken loosely. The rules run in-process; the CLI and the
RPC are then held to them against a real coordinator."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

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
            (_with(postcondition={"kind": "diag.append", "args": {"name": "n", "line": "l"},
                                  "expect": {"bytes": 2}}),
             "actions[0].postcondition.kind: 'diag.append' is not a read-only check; a"
             " postcondition runs one of diag.has_line, browser.check"),
            (_with(postcondition={"kind": "diag.has_line", "args": {"name": "n", "line": "l"},
                                  "expect": {"present": True}, "expected": 1}),
             "actions[0].postcondition.expected: unknown field; did you mean expect?"),
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
    # A postcondition that would act, sent straight to the RPC: the same refusal.
    acting = runs_pb2.SubmitRunRequest(
        actions=[
            runs_pb2.PlannedAction(
                kind="diag.append",
                args_json='{"name": "n", "line": "l"}',
                postcondition=runs_pb2.Postcondition(
                    kind="diag.append", args_json='{"name": "n", "line": "l"}', expect_json="{}"
                ),
            )
        ]
    )
    with pytest.raises(grpc.RpcError) as refused:
        _raw_submit(coordinator, acting.SerializeToString(), owner)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details().startswith(
        "actions[0].postcondition.kind: 'diag.append' is not a read-only check"
    ), refused.value.details()
    assert coordinator.cli_json("runs", "list", token_file=owner)["runs"] == []
