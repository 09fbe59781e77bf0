"""OpenTelemetry tracing: one TracerProvider per process, W3C trace context between processes.

A run's `trace_id` is the trace: the CLI sends `traceparent` metadata on every call, the
coordinator makes the run's trace id the caller's, and each action attempt is a span of that
trace whose context travels to the worker in `Dispatch.traceparent` and back in
`Receipt.traceparent`.

Spans are exported over OTLP/gRPC only when an endpoint is configured (`--otlp-endpoint`, else
`OTEL_EXPORTER_OTLP_ENDPOINT`); without one no span processor is installed, so a span costs
the ids and a few attribute writes, nothing more. The exporter is imported only when used.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import os
import re
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context, trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

from shared.errors import InvalidArgumentError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.id_generator import IdGenerator

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACEPARENT_ENV = "TRACEPARENT"
METADATA_KEY = "traceparent"  # gRPC metadata keys are lower case

COORDINATOR = "deskfleet-coordinator"
WORKER = "deskfleet-worker"
CLI = "deskfleet-cli"
CLI_EXPORT_TIMEOUT = 2.0  # seconds

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ENDPOINT = re.compile(r"(?:(https?)://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})/?")
_TRACER = "deskfleet"

# Ids the next span must take instead of random ones: a run's span has an id derived from the
# run (so that action spans, made later and possibly on another replica, can name it as their
# parent), and a run without a caller's trace has a trace id chosen before its span exists.
_forced_trace_id: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "forced_trace_id", default=None
)
_forced_span_id: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "forced_span_id", default=None
)


@dataclass(frozen=True)
class TraceParent:
    """A W3C `traceparent`: version 00, lower-case hex ids, flags (01 = sampled)."""

    trace_id: str
    span_id: str
    flags: str = "01"

    @classmethod
    def parse(cls, value: str) -> TraceParent | None:
        """The trace context in `value`, or None when it is not a valid traceparent."""
        m = _TRACEPARENT.fullmatch(value.strip())
        if m is None or m[1] == "ff" or set(m[2]) == {"0"} or set(m[3]) == {"0"}:
            return None
        return cls(m[2], m[3], m[4])

    @classmethod
    def new(cls) -> TraceParent:
        return cls(secrets.token_hex(16), secrets.token_hex(8))

    def child(self) -> TraceParent:
        """The same trace, a new span id: the caller's own span under this parent."""
        return TraceParent(self.trace_id, secrets.token_hex(8), self.flags)

    def header(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"

    def context(self) -> otel_context.Context:
        """An OpenTelemetry context whose current span is this (remote) one."""
        span = SpanContext(
            int(self.trace_id, 16),
            int(self.span_id, 16),
            is_remote=True,
            trace_flags=TraceFlags(int(self.flags, 16)),
        )
        return trace.set_span_in_context(NonRecordingSpan(span))


def from_env(environ: Mapping[str, str] | None = None) -> TraceParent | None:
    """The TRACEPARENT a script gave us to join its trace; InvalidArgumentError if malformed."""
    raw = (os.environ if environ is None else environ).get(TRACEPARENT_ENV, "").strip()
    if not raw:
        return None
    parsed = TraceParent.parse(raw)
    if parsed is None:
        raise InvalidArgumentError(
            f"{TRACEPARENT_ENV}={raw[:80]!r} is not a W3C traceparent"
            " (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>)"
        )
    return parsed


def of_span(span: trace.Span) -> TraceParent | None:
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return TraceParent(
        format(ctx.trace_id, "032x"), format(ctx.span_id, "016x"), format(ctx.trace_flags, "02x")
    )


def current() -> TraceParent | None:
    """The current span's trace context (a server span of the RPC being handled, say)."""
    return of_span(trace.get_current_span())


def run_span_id(run_id: str) -> str:
    """The span id of a run's own span, derived from its id so that anyone can name it."""
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:16]
    return digest if set(digest) != {"0"} else "0000000000000001"


def run_parent(trace_id: str, run_id: str) -> TraceParent:
    """The parent of a run's action spans: the run's span in the run's trace."""
    return TraceParent(trace_id, run_span_id(run_id))


@functools.cache
def tracer() -> trace.Tracer:
    # Looked up once: the SDK builds a new Tracer on every lookup (9 us, in a deprecation
    # shim), and every dispatch asks. Got before `Tracing.start`, it is OpenTelemetry's proxy,
    # which follows the provider set later.
    return trace.get_tracer(_TRACER)


def attempt_attributes(
    run_id: str, action_id: str, kind: str, attempt_id: str, attempt: int
) -> dict[str, str | int]:
    """The attributes both sides put on an attempt's span, so either span can be found by them."""
    return {
        "deskfleet.run.id": run_id,
        "deskfleet.action.id": action_id,
        "deskfleet.action.kind": kind,
        "deskfleet.attempt.id": attempt_id,
        "deskfleet.attempt.number": attempt,
    }


def record_run(run_id: str, kind: str, trace_id: str) -> None:
    """Emit the run's span (an instant, at creation), child of the caller's span if any."""
    caller = current()
    token_t = _forced_trace_id.set(None if caller else int(trace_id, 16))
    token_s = _forced_span_id.set(int(run_span_id(run_id), 16))
    try:
        span = tracer().start_span(
            f"run {kind}",
            context=caller.context() if caller and caller.trace_id == trace_id else None,
            kind=SpanKind.INTERNAL,
            attributes={"deskfleet.run.id": run_id, "deskfleet.run.kind": kind},
        )
        span.end()
    finally:
        _forced_span_id.reset(token_s)
        _forced_trace_id.reset(token_t)


@contextlib.contextmanager
def joined(parent: TraceParent | None) -> Iterator[None]:
    """Make `parent` the current span context for the block (nothing when None)."""
    if parent is None:
        yield
        return
    token = otel_context.attach(parent.context())
    try:
        yield
    finally:
        otel_context.detach(token)


@contextlib.contextmanager
def server_span(method: str, traceparent: str) -> Iterator[trace.Span]:
    """The span of one RPC handled here, child of the caller's `traceparent` when it sent one."""
    parent = TraceParent.parse(traceparent) if traceparent else None
    with tracer().start_as_current_span(
        method.lstrip("/"),
        context=parent.context() if parent is not None else None,
        kind=SpanKind.SERVER,
        attributes={"rpc.system": "grpc", "rpc.method": method},
    ) as span:
        yield span


@contextlib.contextmanager
def command_span(name: str, environ: Mapping[str, str] | None = None) -> Iterator[TraceParent]:
    """The trace context a CLI command sends: its own span, under TRACEPARENT if given.

    The SDK is loaded only when OTEL_EXPORTER_OTLP_ENDPOINT asks for the span to be exported;
    otherwise the context is made up here, which is all the coordinator needs.
    """
    outer = from_env(environ)
    endpoint = resolve_endpoint(None, environ)
    if endpoint is None:
        yield outer.child() if outer is not None else TraceParent.new()
        return
    # A collector that is down must not hold every command up for the default 10 s.
    spans = Tracing(CLI, {}, endpoint, export_timeout=CLI_EXPORT_TIMEOUT).start()
    try:
        with tracer().start_as_current_span(
            name,
            context=outer.context() if outer is not None else None,
            kind=SpanKind.CLIENT,
        ) as span:
            own = of_span(span)
            yield own if own is not None else TraceParent.new()
    finally:
        spans.shutdown()


def parse_endpoint(value: str, source: str) -> str:
    """Check an OTLP/gRPC endpoint (HOST:PORT, or http(s)://HOST:PORT); `source` names it."""
    m = _ENDPOINT.fullmatch(value.strip())
    if m is None or not 0 < int(m[3]) < 65536:
        raise InvalidArgumentError(
            f"{source}: {value[:80]!r} is not an OTLP endpoint"
            " (HOST:PORT or http://HOST:PORT, port 1-65535)"
        )
    return value.strip().rstrip("/")


def resolve_endpoint(flag: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """`--otlp-endpoint` wins over OTEL_EXPORTER_OTLP_ENDPOINT; neither means no exporter."""
    if flag:
        return parse_endpoint(flag, "--otlp-endpoint")
    env = (os.environ if environ is None else environ).get(ENDPOINT_ENV, "").strip()
    return parse_endpoint(env, ENDPOINT_ENV) if env else None


class Tracing:
    """This process's TracerProvider: set up once, flushed and shut down on exit."""

    def __init__(
        self,
        service: str,
        attributes: Mapping[str, str],
        endpoint: str | None = None,
        *,
        export_timeout: float | None = None,
    ) -> None:
        self.service = service
        self.endpoint = endpoint
        self._export_timeout = export_timeout
        self._attributes = dict(attributes)
        self._provider: TracerProvider | None = None

    def start(self) -> Tracing:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider

        resource = Resource.create({"service.name": self.service, **self._attributes})
        provider = TracerProvider(resource=resource, id_generator=_id_generator())
        if self.endpoint is not None:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            secure = self.endpoint.startswith("https://")
            target = re.sub(r"^https?://", "", self.endpoint)
            provider.add_span_processor(
                BatchSpanProcessor(
                    OTLPSpanExporter(
                        endpoint=target, insecure=not secure, timeout=self._export_timeout
                    )
                )
            )
        trace.set_tracer_provider(provider)
        self._provider = provider
        return self

    def shutdown(self) -> None:
        """Export what is still queued; safe to call twice."""
        provider, self._provider = self._provider, None
        if provider is not None:
            provider.shutdown()


def _id_generator() -> IdGenerator:
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class ForcedOrRandom(RandomIdGenerator):
        """Random ids, except where a caller forced one for the next span (`record_run`)."""

        def generate_span_id(self) -> int:
            forced = _forced_span_id.get()
            return forced if forced is not None else super().generate_span_id()

        def generate_trace_id(self) -> int:
            forced = _forced_trace_id.get()
            return forced if forced is not None else super().generate_trace_id()

    return ForcedOrRandom()
