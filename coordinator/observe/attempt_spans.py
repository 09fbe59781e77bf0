"""The trace spans of the attempts this replica sends to workers.

An attempt's span starts when its dispatch goes down the worker's stream (on the replica that
holds the stream) and ends with its receipt's verdict or its timeout. It is a child of the
run's span (`tracing.run_parent`), and its context travels in `Dispatch.traceparent`, so the
worker's span of the attempt is its child.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from coordinator.model.orders import DispatchOrder
from shared import tracing

# Spans whose outcome never comes back here (the worker left, the order went elsewhere) are
# ended once this many newer ones are open, so that memory stays bounded.
OPEN_LIMIT = 10_000


class AttemptSpans:
    """Open spans by (action id, attempt id)."""

    def __init__(self) -> None:
        self._open: OrderedDict[tuple[str, str], Span] = OrderedDict()

    def dispatched(self, order: DispatchOrder) -> DispatchOrder:
        """Start the attempt's span; the order comes back carrying its traceparent."""
        parent = tracing.run_parent(order.trace_id, order.run_id) if order.trace_id else None
        span = tracing.tracer().start_span(
            f"action {order.kind}",
            context=parent.context() if parent is not None else None,
            kind=SpanKind.PRODUCER,
            attributes={
                **tracing.attempt_attributes(
                    order.run_id, order.action_id, order.kind, order.attempt_id, order.attempt
                ),
                "deskfleet.attempt.epoch": order.epoch,
                "deskfleet.worker.id": order.worker_id,
            },
        )
        key = (order.action_id, order.attempt_id)
        previous = self._open.pop(key, None)
        if previous is not None:
            previous.end()
        self._open[key] = span
        while len(self._open) > OPEN_LIMIT:
            _, oldest = self._open.popitem(last=False)
            oldest.set_attribute("deskfleet.outcome", "not seen by this replica")
            oldest.end()
        own = tracing.of_span(span)
        return replace(order, traceparent=own.header() if own is not None else "")

    def finished(self, action_id: str, attempt_id: str, *, ok: bool, detail: str = "") -> None:
        """End the attempt's span (nothing if this replica has none open)."""
        span = self._open.pop((action_id, attempt_id), None)
        if span is None:
            return
        if not ok:
            span.set_status(Status(StatusCode.ERROR, detail or None))
        elif detail:
            span.set_attribute("deskfleet.outcome", detail)
        span.end()

    def close(self) -> None:
        """End every open span (the replica is stopping); safe to call twice."""
        while self._open:
            _, span = self._open.popitem()
            span.set_attribute("deskfleet.outcome", "the replica stopped")
            span.end()
