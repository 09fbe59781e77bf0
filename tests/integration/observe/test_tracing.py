"""Tracing and structured logs across CLI → coordinator → worker, with real processes.

Spans are received by a real OTLP/gRPC collector started here (the TraceService of the
opentelemetry-proto package on a grpc.aio server), so what is checked is what left each
process over the wire.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from shared.tracing import TraceParent, run_span_id
from tests.harness import (
    BIN,
    CoordinatorProcess,
    WorkerProcess,
    base_env,
    journal,
    run_together,
    submit,
    wait_run,
    wait_until,
    write_plan,
)
from worker_agent.action_log import LOG_NAME, read_frames


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP trace receiver on loopback, served by grpc.aio on a thread of its own."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._server: grpc.aio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    async def Export(
        self,
        request: trace_service_pb2.ExportTraceServiceRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        ReceivedSpan(
                            resource.get("service.name", ""),
                            span.name,
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            {a.key: _value(a.value) for a in span.attributes},
                        )
                    )
        return trace_service_pb2.ExportTraceServiceResponse()

    def start(self) -> Collector:
        async def serve() -> int:
            self._server = grpc.aio.server()
            trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self._server)
            port = self._server.add_insecure_port("127.0.0.1:0")
            await self._server.start()
            return port

        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(serve(), self._loop).result(10)
        return self

    def stop(self) -> None:
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._server.stop(None), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def find(self, **want: str) -> list[ReceivedSpan]:
        return [s for s in list(self.spans) if all(getattr(s, k) == v for k, v in want.items())]


def _value(v: Any) -> Any:
    return getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None


@pytest.fixture(scope="module")
def worker_browser() -> bool:
    """These tests' workers never browse: they start without Chromium (--no-headless)."""
    return False


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    """The tests that take a plain coordinator share the module's: each makes its own runs
    and workers. The tests that need one started with tracing or logging options start
    their own."""
    return module_coordinator


@pytest.fixture
def collector() -> Iterator[Collector]:
    received = Collector().start()
    yield received
    received.stop()


def _outer() -> tuple[str, str]:
    """A trace a script might be in: its trace id and its span id."""
    return secrets.token_hex(16), secrets.token_hex(8)


def _json_lines(path: Path) -> list[dict[str, Any]]:
    lines = []
    for raw in path.read_text().splitlines():
        if raw.strip():
            lines.append(json.loads(raw))  # every line must be a JSON object
    return lines


@pytest.mark.slow
def test_the_callers_trace_is_the_runs_down_to_the_workers_receipt(
    coordinator: CoordinatorProcess,
    workers: Callable[..., WorkerProcess],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker = workers("w")
    worker.wait_online()
    trace_id, outer_span = _outer()
    monkeypatch.setenv("TRACEPARENT", f"00-{trace_id}-{outer_span}-01")
    plan = write_plan(
        tmp_path / "plan.json",
        [
            # Not idempotent: the worker records the start before it acts.
            {"kind": "diag.sleep", "args": {"seconds": 1.0}, "idempotent": False},
            {"kind": "diag.echo", "args": {"value": "traced"}, "idempotent": True},
        ],
    )
    run = submit(coordinator, plan)
    # The worker's action log records the attempt's trace before it acts.
    log_file = worker.state_dir / "actions" / LOG_NAME

    def started() -> list[dict[str, Any]]:
        data = log_file.read_bytes() if log_file.exists() else b""
        records = [json.loads(payload) for _, _, payload in read_frames(data)]
        return [r for r in records if r["op"] == "started"]

    record = wait_until(started, 30, 0.02, "a started record")[0]
    assert record["run_id"] == run["id"]
    logged = TraceParent.parse(record["traceparent"])
    assert logged is not None and logged.trace_id == trace_id
    assert logged.span_id != outer_span  # the worker's own span, not the caller's

    # Later commands are in traces of their own; the run keeps the one it was made in.
    monkeypatch.delenv("TRACEPARENT")
    done = wait_run(coordinator, run["id"], lambda r: r["status"] == "SUCCEEDED")
    assert done["traceId"] == trace_id
    events = journal(coordinator, run["id"])
    assert events and {e["traceId"] for e in events} == {trace_id}
    receipts = [e["data"] for e in events if e["kind"] == "receipt"]
    assert len(receipts) == 2
    assert {r["traceId"] for r in receipts} == {trace_id}
    span_ids = {r["spanId"] for r in receipts}
    assert len(span_ids) == 2 and logged.span_id in span_ids
    assert {TraceParent.parse(a["receiptTraceparent"]) for a in done["actions"]} == {
        TraceParent(trace_id, span_id) for span_id in span_ids
    }

    # Without TRACEPARENT each command starts a trace of its own, and a run made by one has it.
    plan = write_plan(tmp_path / "plan2.json", [{"kind": "diag.echo", "args": {"value": 1}}])
    other = submit(coordinator, plan)
    assert TraceParent.parse(f"00-{other['traceId']}-{outer_span}-01") is not None
    assert other["traceId"] != trace_id
    wait_run(coordinator, other["id"], lambda r: r["status"] == "SUCCEEDED")
    (receipt,) = [e for e in journal(coordinator, other["id"]) if e["kind"] == "receipt"]
    assert receipt["data"]["traceId"] == other["traceId"]


@pytest.mark.slow
def test_spans_leave_the_cli_the_coordinator_and_the_worker_as_one_trace(
    collector: Collector, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = f"127.0.0.1:{collector.port}"
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # export within 0.1 s, not 5 s
    coordinator = CoordinatorProcess(
        tmp_path / "c", serve_args=("--otlp-endpoint", endpoint)
    ).start()
    worker = WorkerProcess(
        coordinator, "w", extra_args=("--otlp-endpoint", endpoint), browser=False
    )
    try:
        worker.start().wait_online()
        trace_id, outer_span = _outer()
        # The CLI exports its span when the standard variable names a collector.
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://{endpoint}")
        monkeypatch.setenv("TRACEPARENT", f"00-{trace_id}-{outer_span}-01")
        plan = write_plan(
            tmp_path / "plan.json", [{"kind": "diag.echo", "args": {"value": "over the wire"}}]
        )
        run = submit(coordinator, plan)
        monkeypatch.delenv("TRACEPARENT")
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
        wait_run(coordinator, run["id"], lambda r: r["status"] == "SUCCEEDED")

        def exported() -> tuple[ReceivedSpan, ReceivedSpan] | None:
            ours = collector.find(service="deskfleet-coordinator", name="action diag.echo")
            theirs = collector.find(service="deskfleet-worker", name="action diag.echo")
            return (ours[0], theirs[0]) if ours and theirs else None

        coordinator_span, worker_span = wait_until(exported, 30, 0.1, "both action spans")
    finally:
        worker.stop()
        coordinator.stop()

    assert coordinator_span.trace_id == worker_span.trace_id == trace_id
    assert worker_span.parent_id == coordinator_span.span_id
    assert coordinator_span.attributes["deskfleet.run.id"] == run["id"]
    assert (
        worker_span.attributes["deskfleet.action.id"]
        == (coordinator_span.attributes["deskfleet.action.id"])
    )
    # Up the tree: action ← run ← SubmitRun on the coordinator ← the CLI's command ← the caller.
    assert coordinator_span.parent_id == run_span_id(run["id"])
    (run_span,) = collector.find(span_id=run_span_id(run["id"]))
    assert run_span.service == "deskfleet-coordinator" and run_span.trace_id == trace_id
    (rpc,) = collector.find(span_id=run_span.parent_id)
    assert rpc.name == "deskfleet.v1.RunService/SubmitRun"
    (command,) = collector.find(span_id=rpc.parent_id)
    assert command.service == "deskfleet-cli" and command.parent_id == outer_span


@pytest.mark.slow
def test_logs_are_json_lines_with_the_ids_of_the_action(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    coordinator = CoordinatorProcess(tmp_path / "c", serve_args=("--log-level", "DEBUG")).start()
    worker = WorkerProcess(coordinator, "w", browser=False)
    try:
        worker.start().wait_online()
        trace_id, outer_span = _outer()
        monkeypatch.setenv("TRACEPARENT", f"00-{trace_id}-{outer_span}-01")
        plan = write_plan(tmp_path / "plan.json", [{"kind": "diag.echo", "args": {"value": 2}}])
        run = submit(coordinator, plan)
        monkeypatch.delenv("TRACEPARENT")
        done = wait_run(coordinator, run["id"], lambda r: r["status"] == "SUCCEEDED")
        action_id = done["actions"][0]["id"]

        def about_the_action(path: Path) -> list[dict[str, Any]]:
            return [line for line in _json_lines(path) if line.get("action_id") == action_id]

        worker_lines = wait_until(lambda: about_the_action(worker.log), 10, 0.1, "worker lines")
        coordinator_lines = wait_until(
            lambda: about_the_action(coordinator.log), 10, 0.1, "coordinator lines"
        )
    finally:
        worker.stop()
        coordinator.stop()
    for line in worker_lines + coordinator_lines:
        assert {"ts", "level", "logger", "msg"} <= line.keys(), line
        assert line["run_id"] == run["id"], line
        assert line["worker_id"] == worker.worker_id, line
        assert line["trace_id"] == trace_id, line
    assert any("succeeded" in line["msg"] for line in worker_lines)
    assert any("dispatching" in line["msg"] for line in coordinator_lines)
    assert any("receipt" in line["msg"] for line in coordinator_lines)
    # Everything else the two processes logged is JSON too (a line that is not fails above).
    assert _json_lines(coordinator.log) and _json_lines(worker.log)


@pytest.mark.parametrize("value", ["nonsense", "ftp://host:99999"])
def test_a_bad_otlp_endpoint_is_one_clear_line(tmp_path: Path, value: str) -> None:
    env = base_env(tmp_path)
    serve, worker = run_together(
        [
            str(BIN / "deskfleet-coordinator"),
            "serve",
            "--db",
            f"sqlite:///{tmp_path / 'fleet.db'}",
            "--listen",
            "127.0.0.1:0",
            "--otlp-endpoint",
            value,
        ],
        [
            str(BIN / "deskfleet-worker"),
            "run",
            "--state-dir",
            str(tmp_path / "state"),
            "--otlp-endpoint",
            value,
        ],
        env=env,
    )
    for done, prog in ((serve, "deskfleet-coordinator"), (worker, "deskfleet-worker")):
        assert done.returncode == 1
        assert done.stderr.splitlines() == [
            f"{prog}: --otlp-endpoint: {value!r} is not an OTLP endpoint"
            " (HOST:PORT or http://HOST:PORT, port 1-65535)"
        ]
    assert not (tmp_path / "fleet.db").exists()  # refused before anything was opened


def test_an_unknown_log_level_is_one_clear_line(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    commands = (
        ("deskfleet-coordinator", ["serve", "--db", db, "--log-level", "LOUD"]),
        ("deskfleet-worker", ["run", "--state-dir", str(tmp_path / "s"), "--log-level", "LOUD"]),
    )
    results = run_together(*([str(BIN / prog), *argv] for prog, argv in commands), env=env)
    for (prog, _), done in zip(commands, results, strict=True):
        assert done.returncode == 1
        assert done.stderr.splitlines() == [
            f"{prog}: --log-level: 'LOUD' is not a level (DEBUG, INFO, WARNING, ERROR)"
        ]


def test_the_cli_refuses_a_malformed_traceparent_or_endpoint_in_its_environment(
    coordinator: CoordinatorProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACEPARENT", "00-not-a-trace-01")
    done = coordinator.cli("status", check=False)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "deskfleet: TRACEPARENT='00-not-a-trace-01' is not a W3C traceparent"
        " (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>)"
    ]
    monkeypatch.delenv("TRACEPARENT")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "no port here")
    done = coordinator.cli("status", check=False)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "deskfleet: OTEL_EXPORTER_OTLP_ENDPOINT: 'no port here' is not an OTLP endpoint"
        " (HOST:PORT or http://HOST:PORT, port 1-65535)"
    ]
