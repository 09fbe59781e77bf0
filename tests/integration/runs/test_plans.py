"""Plans are read strictly (30.17): one reading in `shared/plans.py` for the CLI, MCP and the
coordinator; a string where a boolean belongs, a misspelled key, a number of the wrong kind
or a key given twice (B12) is refused with its path, never taken loosely. The rules run
in-process; the CLI, MCP and the RPC are then held to them against a real coordinator."""

from __future__ import annotations

import json
import selectors
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from mcp.types import LATEST_PROTOCOL_VERSION

from shared import plans
from shared.errors import InvalidArgumentError
from shared.gen.deskfleet.v1 import runs_pb2
from tests.harness import BIN, CoordinatorProcess, base_env

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


# The red team's plan: each key given twice, the second value the dangerous one (an effect the
# recovery sweep may rerun, a budget 100,000 times the one written first). It was taken with
# idempotent true and maxActions 100000.
GIVEN_TWICE = (
    '{"actions":[{"kind":"diag.append","args":{"name":"a.txt","line":"x"},'
    '"idempotent":false,"idempotent":true}],"limits":{"max_actions":1,"max_actions":100000}}'
)


def test_a_key_given_twice_is_refused_by_its_path_by_the_cli_and_the_rpc(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    owner = _owner(coordinator, "given-twice")
    for i, (text, expected) in enumerate(
        [
            (GIVEN_TWICE, "actions[0].idempotent: given twice"),
            ('{"actions":[{"kind":"diag.echo"}],"limits":{"max_actions":1,"max_actions":9}}',
             "limits.max_actions: given twice"),
            ('{"actions":[],"actions":[{"kind":"diag.echo"}]}', "actions: given twice"),
        ]
    ):  # fmt: skip
        plan = tmp_path / f"twice{i}.json"
        plan.write_text(text)
        done = coordinator.cli("runs", "submit", str(plan), token_file=owner, check=False)
        assert (done.returncode, done.stderr) == (2, f"deskfleet: {expected}\n")
    # The typed request: an action's arguments are JSON text, read by the same rule.
    request = runs_pb2.SubmitRunRequest(
        actions=[
            runs_pb2.PlannedAction(kind="diag.echo", args_json='{"value": 1}'),
            runs_pb2.PlannedAction(
                kind="diag.append", args_json='{"name": "a.txt", "line": "x", "name": "b.txt"}'
            ),
        ]
    )
    with pytest.raises(grpc.RpcError) as refused:
        _raw_submit(coordinator, request.SerializeToString(), owner)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details() == "actions[1].args.name: given twice"
    assert coordinator.cli_json("runs", "list", token_file=owner)["runs"] == []


class McpLines:
    """`deskfleet mcp` spoken to in raw JSON-RPC lines: the SDK's client writes JSON from
    Python objects, which cannot give a key twice."""

    def __init__(self, coordinator: CoordinatorProcess, token_file: Path) -> None:
        env = base_env(coordinator.workdir)
        env["DESKFLEET_COORDINATOR"] = coordinator.address
        env["DESKFLEET_TOKEN_FILE"] = str(token_file)
        self.proc = subprocess.Popen(
            [str(BIN / "deskfleet"), "mcp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.ask(
            json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": LATEST_PROTOCOL_VERSION, "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"}}})
        )  # fmt: skip
        self.send('{"jsonrpc": "2.0", "method": "notifications/initialized"}')

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def ask(self, line: str, timeout: float = 30) -> dict[str, Any]:
        self.send(line)
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + timeout
            while True:
                assert sel.select(max(0.0, deadline - time.monotonic())), "no answer in time"
                answer: dict[str, Any] = json.loads(self.proc.stdout.readline())
                if "id" in answer:  # not a notification of the server's
                    return answer

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()  # the server's end of input: it stops
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


def test_mcp_refuses_a_request_that_gives_a_key_twice_naming_its_path(
    coordinator: CoordinatorProcess,
) -> None:
    owner = _owner(coordinator, "mcp-given-twice")
    mcp = McpLines(coordinator, owner)
    try:
        call = '{{"jsonrpc": "2.0", "id": {id}, "method": "tools/call", "params": {params}}}'
        answer = mcp.ask(call.format(id=1, params=(
            '{"name": "submit_plan", "arguments": {"wait": false, "plan": ' + GIVEN_TWICE + "}}"
        )))  # fmt: skip
        assert answer["id"] == 1 and answer["result"]["isError"] is True
        assert answer["result"]["content"][0]["text"] == "plan.actions[0].idempotent: given twice"
        # Anywhere in a request: the tool's name, the request's id.
        answer = mcp.ask(call.format(id=2, params=(
            '{"name": "fleet_status", "name": "submit_plan", "arguments": {}}'
        )))  # fmt: skip
        assert answer["result"]["isError"] is True, answer
        assert answer["result"]["content"][0]["text"] == "params.name: given twice"
        answer = mcp.ask('{"jsonrpc": "2.0", "id": 3, "id": 4, "method": "tools/list"}')
        assert answer == {"jsonrpc": "2.0", "id": 4, "error": {
            "code": -32602, "message": "id: given twice"}}  # fmt: skip
        assert coordinator.cli_json("runs", "list", token_file=owner)["runs"] == []
        # The same plan with each key once goes through, and nothing else was written.
        once = GIVEN_TWICE.replace('"idempotent":false,', "").replace('"max_actions":1,', "")
        answer = mcp.ask(call.format(id=5, params=(
            '{"name": "submit_plan", "arguments": {"wait": false, "plan": ' + once + "}}"
        )))  # fmt: skip
        assert answer["result"]["isError"] is False, answer
        [run] = coordinator.cli_json("runs", "list", token_file=owner)["runs"]
        shown = coordinator.cli_json("runs", "show", run["id"], token_file=owner)
        assert shown["actions"][0]["idempotent"] is True
    finally:
        mcp.close()
