"""Runs dispatched attempts on a bounded thread pool, apart from any one stream.

Everything public here is called on the event loop thread. Handlers run on pool threads; what
they produce comes back to the loop with `call_soon_threadsafe` and leaves through the sink the
connection attaches while a stream is up. With no stream the message is dropped: receipts are
in the outbox and go out after the next Welcome, running attempts are in the next Hello.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from opentelemetry.trace import SpanKind, StatusCode

from shared import faults, tracing
from shared.action_kinds import rerun_is_harmless
from shared.errors import InvalidArgumentError
from shared.gen.deskfleet.v1 import worker_pb2
from shared.logs import log_context
from shared.receipts import safe_text
from shared.tracing import TraceParent
from worker_agent.action_log import (
    ActionLog,
    ReceiptRecord,
    StartedRecord,
    StoredArtifact,
    Verdict,
)
from worker_agent.actions import (
    CANCELLED,
    FAILED,
    REFUSED,
    SUCCEEDED,
    ActionContext,
    ActionRefused,
    ActionRegistry,
    Handler,
    Outcome,
    default_registry,
    error_line,
    run_handler,
)
from worker_agent.input_guard import InputGuard

log = logging.getLogger("deskfleet.worker")

ACTION_THREADS = 4

Sink = Callable[[worker_pb2.WorkerMessage], None]


@dataclass
class Attempt:
    dispatch: worker_pb2.Dispatch
    handler: Handler
    args: dict[str, Any]
    ctx: ActionContext
    cancel_reason: str = ""
    done: bool = False
    timer: asyncio.TimerHandle | None = field(default=None, repr=False)

    @property
    def key(self) -> tuple[str, str]:
        return (self.dispatch.action_id, self.dispatch.attempt_id)


class ActionExecutor:
    """Admits dispatches against the action log, runs them, and reports what happened."""

    def __init__(
        self,
        action_log: ActionLog,
        registry: ActionRegistry | None = None,
        *,
        threads: int = ACTION_THREADS,
        guard: InputGuard | None = None,
    ) -> None:
        self.log = action_log
        self.guard = guard
        self.registry = registry or default_registry()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="action")
        self._running: dict[tuple[str, str], Attempt] = {}
        self._sink: Sink | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Told of each attempt over (kind, status, artifact bytes): the worker's metrics.
        self.observe: Callable[[str, str, int], None] = lambda kind, status, size: None

    def attach(self, sink: Sink | None) -> None:
        """Where messages go from now on (the current stream), or None while disconnected."""
        self._sink = sink

    def held(self) -> list[worker_pb2.HeldAction]:
        return [entry.to_proto() for entry in self.log.held()]

    def pending(self) -> list[worker_pb2.WorkerMessage]:
        return [worker_pb2.WorkerMessage(receipt=r.to_proto()) for r in self.log.pending_receipts()]

    @property
    def running(self) -> int:
        return len(self._running)

    def dispatch(self, d: worker_pb2.Dispatch) -> None:
        """Start an attempt without waiting for it, or refuse it, or recognise a repeat."""
        self._loop = asyncio.get_running_loop()
        try:
            admission = self.log.admit(d.action_id, d.attempt_id, d.epoch)
        except InvalidArgumentError as exc:
            self._refuse(d, exc.message)
            return
        if admission.verdict is Verdict.DUPLICATE:
            log.debug("attempt %s of %s is already running", d.attempt_id, d.action_id)
            return
        if admission.verdict is Verdict.FINISHED:
            assert admission.receipt is not None
            self._emit(worker_pb2.WorkerMessage(receipt=admission.receipt.to_proto()))
            return
        if admission.verdict is not Verdict.ACCEPT:
            self._refuse(d, admission.reason)
            return
        try:
            handler, args = self.registry.resolve(d.kind, d.args_json)
        except ActionRefused as exc:
            self.log.release(d.action_id, d.attempt_id)
            self._refuse(d, str(exc))
            return
        for old in admission.superseded:
            previous = self._running.get((d.action_id, old))
            if previous is not None:
                self._cancel(previous, f"superseded by attempt {d.attempt_id} (epoch {d.epoch})")
        timeout = d.timeout_seconds if d.timeout_seconds > 0 else None
        guard, run_id = self.guard, d.run_id
        context = ActionContext(
            d.action_id,
            d.attempt,
            timeout,
            run_id=run_id,
            secrets=dict(d.secrets),
            input_blocked=(lambda: guard.blocked(run_id)) if guard else _no_input,
            scope=d.scope if d.HasField("scope") else None,
        )
        attempt = Attempt(d, handler, args, context)
        self._running[attempt.key] = attempt
        self._pool.submit(self._execute, attempt)

    def cancel(self, c: worker_pb2.CancelAction) -> None:
        """Ask the attempt (every attempt of the action, without attempt_id) to stop."""
        targets = [
            a
            for (action_id, attempt_id), a in self._running.items()
            if action_id == c.action_id and c.attempt_id in ("", attempt_id)
        ]
        for attempt in targets:
            self._cancel(attempt, c.reason or "cancelled by the coordinator")
        if not targets and c.attempt_id:
            # Already over: the coordinator may have missed the receipt.
            receipt = self.log.receipt(c.action_id, c.attempt_id)
            if receipt is not None:
                self._emit(worker_pb2.WorkerMessage(receipt=receipt.to_proto()))

    def acknowledge(self, ack: worker_pb2.ReceiptAck) -> None:
        self.log.acknowledge(ack.action_id, ack.attempt_id)
        if not ack.accepted:
            log.warning(
                "the coordinator refused the receipt of attempt %s of %s: %s",
                ack.attempt_id,
                ack.action_id,
                ack.reason or "no reason given",
            )

    def close(self, *, wait: bool = False) -> None:
        """Stop: cancel what runs (its receipts reach the outbox), take no more work."""
        for attempt in list(self._running.values()):
            self._cancel(attempt, "the worker is stopping")
        self._pool.shutdown(wait=wait)

    def _cancel(self, attempt: Attempt, reason: str) -> None:
        if not attempt.ctx.cancelled.is_set():
            attempt.cancel_reason = reason  # before the event: the thread reads it once it is set
            attempt.ctx.cancelled.set()

    def _refuse(self, d: worker_pb2.Dispatch, reason: str) -> None:
        # Not kept in the outbox: nothing happened, and a repeat of the dispatch is refused again.
        now = time.time()
        log.info("refused attempt %s of %s: %s", d.attempt_id, d.action_id, reason)
        receipt = worker_pb2.Receipt(
            action_id=d.action_id,
            run_id=d.run_id,
            attempt_id=d.attempt_id,
            epoch=d.epoch,
            status=REFUSED,
            error=safe_text(reason),
            started_at=now,
            finished_at=now,
            traceparent=d.traceparent,
        )
        self._emit(worker_pb2.WorkerMessage(receipt=receipt))
        self.observe(d.kind, REFUSED, 0)

    def _emit(self, message: worker_pb2.WorkerMessage) -> None:
        if self._sink is not None:
            self._sink(message)

    def _execute(self, attempt: Attempt) -> None:
        """Pool thread: the attempt in its own span (child of the coordinator's) and log ids."""
        d = attempt.dispatch
        parent = TraceParent.parse(d.traceparent) if d.traceparent else None
        with (
            tracing.tracer().start_as_current_span(
                f"action {d.kind}",
                context=parent.context() if parent is not None else None,
                kind=SpanKind.CONSUMER,
                attributes=tracing.attempt_attributes(
                    d.run_id, d.action_id, d.kind, d.attempt_id, d.attempt
                ),
            ) as span,
            log_context(run_id=d.run_id, action_id=d.action_id, attempt_id=d.attempt_id),
        ):
            own = tracing.of_span(span)
            status = self._act(attempt, own.header() if own is not None else d.traceparent)
            span.set_attribute("deskfleet.outcome", status)
            if status != SUCCEEDED:
                span.set_status(StatusCode.ERROR)

    def _act(self, attempt: Attempt, traceparent: str) -> str:
        """Record the start, act, record the receipt; hand both to the loop. The status."""
        d = attempt.dispatch
        started_at = time.time()
        status = FAILED
        try:
            if attempt.ctx.cancelled.is_set():
                outcome = Outcome(CANCELLED, error="ActionCancelled: cancelled before it started")
            else:
                try:
                    # A restart forgets an attempt that is harmless to rerun (it is sent
                    # again); any other is reported as interrupted, never rerun blindly.
                    if not rerun_is_harmless(d.kind, d.idempotent):
                        self.log.begin(
                            StartedRecord(
                                d.action_id,
                                d.attempt_id,
                                d.epoch,
                                d.run_id,
                                d.kind,
                                started_at,
                                traceparent,
                            )
                        )
                except OSError as exc:
                    outcome = Outcome(FAILED, error=f"not started: {error_line(exc)}")
                else:
                    self._to_loop(self._on_started, attempt)
                    if not rerun_is_harmless(d.kind, d.idempotent):  # tests only: shared/faults.py
                        faults.crash(faults.WORKER_EXIT_BEFORE_EFFECT)
                    outcome = run_handler(attempt.handler, attempt.args, attempt.ctx)
                    if not rerun_is_harmless(d.kind, d.idempotent):
                        faults.crash(faults.WORKER_EXIT_AFTER_EFFECT)
            if outcome.status == CANCELLED and attempt.cancel_reason:
                # Why it was cancelled, then what the handler says it had done by then.
                done = outcome.error.removeprefix("ActionCancelled:").strip()
                detail = f"; {done}" if done and done != "cancelled" else ""
                outcome = replace(
                    outcome, error=f"ActionCancelled: {attempt.cancel_reason}{detail}"
                )
            artifacts = self._keep_artifacts(attempt)
            receipt = ReceiptRecord(
                d.action_id,
                d.run_id,
                d.attempt_id,
                d.epoch,
                outcome.status,
                outcome.result_json,
                safe_text(outcome.error),
                started_at,
                time.time(),
                artifacts,
                traceparent,
            )
            try:
                self.log.finish(receipt)
            except OSError as exc:  # still sent: the coordinator may take it now
                log.error("could not record the receipt of %s: %s", d.action_id, exc)
            log.info("attempt %s of %s %s", d.attempt_id, d.action_id, outcome.status)
            self._to_loop(self._on_finished, attempt, receipt)
            status = outcome.status
        except Exception:  # a pool swallows exceptions; this one is a defect worth seeing
            log.exception("attempt %s of %s broke down", d.attempt_id, d.action_id)
        return status

    def _keep_artifacts(self, attempt: Attempt) -> tuple[StoredArtifact, ...]:
        kept = []
        for a in attempt.ctx.artifacts:
            try:
                kept.append(
                    self.log.keep_artifact(a.sha256, a.media_type, a.data, a.width, a.height)
                )
            except OSError as exc:
                log.error("could not keep an artifact of %s: %s", attempt.dispatch.action_id, exc)
        return tuple(kept)

    def _to_loop(self, callback: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            pass  # the loop is closed: the worker is stopping, the outbox keeps the receipt

    def _on_started(self, attempt: Attempt) -> None:
        d = attempt.dispatch
        started = worker_pb2.ActionStarted(
            action_id=d.action_id, attempt_id=d.attempt_id, epoch=d.epoch
        )
        self._emit(worker_pb2.WorkerMessage(started=started))
        if attempt.ctx.timeout is not None and not attempt.done:
            assert self._loop is not None
            attempt.timer = self._loop.call_later(
                attempt.ctx.timeout,
                self._cancel,
                attempt,
                f"timed out after {attempt.ctx.timeout:g} s",
            )

    def _on_finished(self, attempt: Attempt, receipt: ReceiptRecord) -> None:
        attempt.done = True
        if attempt.timer is not None:
            attempt.timer.cancel()
        if self._running.get(attempt.key) is attempt:
            del self._running[attempt.key]
        # The artifacts' bytes are still in memory: not read back from the files just written
        # (on the event loop), only a resend does that.
        in_memory = {a.sha256: a.data for a in attempt.ctx.artifacts}
        self._emit(worker_pb2.WorkerMessage(receipt=receipt.to_proto(in_memory)))
        self.observe(attempt.dispatch.kind, receipt.status, _size(attempt))


def _size(attempt: Attempt) -> int:
    return sum(len(a.data) for a in attempt.ctx.artifacts)


def _no_input() -> str:
    return "this worker runs no desktop input"
