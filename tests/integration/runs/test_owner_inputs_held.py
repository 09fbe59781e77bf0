"""Owner inputs that held, kept held at the RPC of a real coordinator: control characters in
every text an owner writes, and numbers JSON cannot hold. The pure checks are
tests/unit/runs/test_owner_inputs_held.py."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from coordinator.runs.desktop.admission import checked_args as _validate_args
from shared.errors import InvalidArgumentError
from shared.gen.deskfleet.v1 import runs_pb2, runs_pb2_grpc
from tests.harness import CoordinatorProcess
from tests.unit.runs.test_owner_inputs_held import BIDI, C1, ESC


@pytest.fixture(scope="module")
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    return module_coordinator


def _refused(call: Any) -> str:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    details = str(caught.value.details())
    assert "\n" not in details and ESC not in details and BIDI not in details
    return details


def _echo(**fields: Any) -> runs_pb2.PlannedAction:
    return runs_pb2.PlannedAction(**{"kind": "diag.echo", "args_json": "{}", **fields})


def test_the_rpc_refuses_control_characters_in_every_text_an_owner_writes(
    coordinator: CoordinatorProcess,
) -> None:
    token = coordinator.cli_json("users", "create", "writer")["token"]
    path = coordinator.workdir / "writer.token"
    path.write_text(token)
    md = coordinator.admin_metadata(path)
    channel = coordinator.channel()
    assert channel is not None
    runs = runs_pb2_grpc.RunServiceStub(channel)

    def submit(**request: Any) -> Any:
        return lambda: runs.SubmitRun(runs_pb2.SubmitRunRequest(**request), metadata=md, timeout=30)

    route = runs_pb2.RouteConstraint
    cases = [
        (submit(title=f"nightly{ESC}", actions=[_echo()]), "title: must not contain control"),
        (submit(actions=[_echo(intent=f"look{BIDI}evil")]), "actions[0].intent: must not contain"),
        (submit(actions=[_echo(route=route(labels={"zone": f"eu{C1}"}))]),
         "actions[0].route.labels['zone']: must not contain"),
        (submit(actions=[_echo(route=route(labels={f"zo{ESC}ne": "eu"}))]),
         "actions[0].route.labels key: must not contain"),
        (submit(actions=[_echo(route=route(worker="w\x00"))]),
         "actions[0].route.worker: must not contain"),
        (lambda: runs.StartResearch(runs_pb2.ResearchRequest(query=f"keeper{ESC}"), metadata=md,
                                    timeout=30),
         "query: must not contain control"),
        # Goals and guidance are prose: line breaks and tabs, nothing else.
        (lambda: runs.StartGoal(runs_pb2.GoalRequest(text=f"find it\n\t{ESC}",
                                                     model="scripted:none"),
                                metadata=md, timeout=30),
         "text: must not contain control"),
    ]  # fmt: skip
    for call, expected in cases:
        assert _refused(call).startswith(expected)
    listed = runs.ListRuns(runs_pb2.ListRunsRequest(), metadata=md, timeout=30)
    assert list(listed.runs) == []  # nothing was written
    run = runs.SubmitRun(
        runs_pb2.SubmitRunRequest(actions=[_echo(route=route(worker="nobody"))]),
        metadata=md,
        timeout=30,
    )
    guide = runs_pb2.GuideRunRequest(id=run.id, text=f"stop\r{ESC}now")
    details = _refused(lambda: runs.GuideRun(guide, metadata=md, timeout=30))
    assert details.startswith("text: must not contain control")
    assert runs.GetRun(runs_pb2.RunRef(id=run.id), metadata=md, timeout=30).guidance_queued == 0


def test_non_finite_numbers_never_reach_an_act_or_a_plan(coordinator: CoordinatorProcess) -> None:
    for action, text, expected in [
        ("left_click", '{"x": NaN, "y": 1}', "args: not valid JSON"),
        ("wait", '{"seconds": Infinity}', "args: not valid JSON"),
        ("left_click", '{"x": 1e400, "y": 1}', "args: not valid JSON: the number 1e400"),
        ("wait", '{"seconds": 1e400}', "args: not valid JSON: the number 1e400 is out of range"),
    ]:
        with pytest.raises(InvalidArgumentError) as refused:
            _validate_args(action, text)
        assert refused.value.message.startswith(expected), refused.value.message
    channel = coordinator.channel()
    assert channel is not None
    runs = runs_pb2_grpc.RunServiceStub(channel)
    md = coordinator.admin_metadata()
    for args_json, expected in [
        ('{"value": NaN}', "actions[0].args: not valid JSON"),
        ('{"value": 1e400}', "actions[0].args: not valid JSON: the number 1e400 is out of range"),
    ]:
        request = runs_pb2.SubmitRunRequest(actions=[_echo(args_json=args_json)])
        details = _refused(lambda r=request: runs.SubmitRun(r, metadata=md, timeout=30))
        assert details.startswith(expected), details
