"""WorkerGateway: enrollment, and the one long-lived stream each worker keeps open."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import grpc

from coordinator.fleet import enrollment
from coordinator.heart.dispatch import Dispatcher, Started
from coordinator.model.orders import (
    CancelOrder,
    DispatchOrder,
    Held,
    IncomingArtifact,
    IncomingReceipt,
    KillPush,
    ReceiptVerdict,
    RotateOrder,
)
from coordinator.model.settings import CoordinatorConfig
from coordinator.runs.desktop.peeks import PeekAnswer, PeekOrder, Peeks
from coordinator.runs.desktop.takeovers import HumanInputOrder, InputResult, Takeovers
from coordinator.runs.desktop.watches import Watches, WatchOrder
from coordinator.runs.killswitch import KillSwitches
from coordinator.security.certificates import PEER_CERT_PROPERTY, WorkerCertificates
from coordinator.security.principals import rotate_worker_credential
from coordinator.servicers.guard import current_principal
from coordinator.store import Database
from coordinator.streams import worker_bounds
from coordinator.streams.presence import Presence, WorkerSession
from shared import faults
from shared.advertisement import Advertisement
from shared.errors import (
    DeskfleetError,
    FailedPreconditionError,
    InvalidArgumentError,
    PermissionDeniedError,
)
from shared.gen.deskfleet.v1 import desktop_pb2, worker_pb2, worker_pb2_grpc
from shared.local_kill import LocalKill
from shared.logs import log_context
from shared.tracing import TraceParent

Context = grpc.aio.ServicerContext[Any, Any]

log = logging.getLogger(__name__)

HELLO_TIMEOUT = 10.0
# Initial metadata of Enroll: the port of the listener that takes worker streams with client
# certificates (the enrollment port does not ask for them; see coordinator/app/server.py).
WORKER_PORT_METADATA = "deskfleet-worker-port"


def _peer_certificate(context: Context) -> bytes | None:
    values = list(context.auth_context().get(PEER_CERT_PROPERTY) or ())
    return values[0] if values else None


def _serialize(message: worker_pb2.CoordinatorMessage | bytes) -> bytes:
    """The stream's serializer; a message sent to many streams (a kill switch change) comes
    serialized once by its sender."""
    return message if isinstance(message, bytes) else message.SerializeToString()


def add_to_server(servicer: WorkerGatewayServicer, server: Any) -> None:
    """The generated registration, with `_serialize` for the stream's messages."""
    handlers: dict[str, Any] = {}

    class Capture:
        def add_generic_rpc_handlers(self, generic: object) -> None:
            pass

        def add_registered_method_handlers(self, service: str, found: dict[str, Any]) -> None:
            handlers.update(found)

    worker_pb2_grpc.add_WorkerGatewayServicer_to_server(servicer, Capture())
    connect = handlers["Connect"]
    handlers["Connect"] = grpc.stream_stream_rpc_method_handler(
        connect.stream_stream,
        request_deserializer=connect.request_deserializer,
        response_serializer=_serialize,
    )
    service = worker_pb2.DESCRIPTOR.services_by_name["WorkerGateway"].full_name
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    server.add_registered_method_handlers(service, handlers)


def _message(order: object) -> worker_pb2.CoordinatorMessage | bytes:
    if isinstance(order, bytes):
        return order  # serialized once for every stream it goes to
    if isinstance(order, DispatchOrder):
        return worker_pb2.CoordinatorMessage(
            dispatch=worker_pb2.Dispatch(
                action_id=order.action_id,
                run_id=order.run_id,
                attempt_id=order.attempt_id,
                epoch=order.epoch,
                attempt=order.attempt,
                kind=order.kind,
                args_json=order.args_json,
                idempotent=order.idempotent,
                timeout_seconds=order.timeout_seconds,
                secrets=order.secrets,
                traceparent=order.traceparent,
                scope=None if order.scope is None else order.scope.to_proto(),
            )
        )
    if isinstance(order, PeekOrder):
        return worker_pb2.CoordinatorMessage(
            peek=worker_pb2.PeekScreenNow(
                peek_id=order.peek_id, display=order.display, max_bytes=order.max_bytes
            )
        )
    if isinstance(order, WatchOrder):
        return worker_pb2.CoordinatorMessage(
            watch=worker_pb2.WatchScreenNow(
                watch_id=order.watch_id,
                display=order.display,
                max_fps=order.max_fps,
                quality=order.quality,
                max_bytes=order.max_bytes,
                stop=order.stop,
            )
        )
    if isinstance(order, HumanInputOrder):
        return worker_pb2.CoordinatorMessage(
            human_input=worker_pb2.HumanInputNow(
                input_id=order.input_id,
                takeover_id=order.takeover_id,
                display=order.display,
                by_owner=order.by_owner,
                events=[
                    desktop_pb2.HumanEvent(
                        kind=e.kind,
                        x=e.x,
                        y=e.y,
                        button=e.button,
                        dx=e.dx,
                        dy=e.dy,
                        key=e.key,
                        text=e.text,
                    )
                    for e in order.events
                ],
            )
        )
    if isinstance(order, RotateOrder):
        return worker_pb2.CoordinatorMessage(rotate_credential=worker_pb2.RotateCredentialNow())
    if isinstance(order, KillPush):
        return worker_pb2.CoordinatorMessage(
            kill=worker_pb2.KillState(
                kill_id=order.kill_id,
                engaged=order.engaged,
                scope=order.scope,
                target=order.target,
                reason=order.reason,
            )
        )
    if isinstance(order, CancelOrder):
        return worker_pb2.CoordinatorMessage(
            cancel=worker_pb2.CancelAction(
                action_id=order.action_id,
                attempt_id=order.attempt_id,
                reason=order.reason,
            )
        )
    if isinstance(order, _Ack):
        return worker_pb2.CoordinatorMessage(heartbeat_ack=worker_pb2.HeartbeatAck(seq=order.seq))
    if isinstance(order, ReceiptVerdict):
        return worker_pb2.CoordinatorMessage(
            receipt_ack=worker_pb2.ReceiptAck(
                action_id=order.action_id,
                attempt_id=order.attempt_id,
                accepted=order.accepted,
                reason=order.reason,
            )
        )
    raise TypeError(f"no message for {order!r}")


class WorkerGatewayServicer(worker_pb2_grpc.WorkerGatewayServicer):
    def __init__(
        self,
        db: Database,
        presence: Presence,
        dispatcher: Dispatcher,
        config: CoordinatorConfig,
        kills: KillSwitches,
        peeks: Peeks,
        certificates: WorkerCertificates | None = None,
        worker_port: int = 0,
        *,
        watches: Watches | None = None,
        takeovers: Takeovers | None = None,
    ) -> None:
        self._peeks = peeks
        self._watches = watches
        self._takeovers = takeovers
        self._certificates = certificates
        self._worker_port = worker_port
        self._db = db
        self._kills = kills
        self._presence = presence
        self._dispatcher = dispatcher
        self._config = config
        self._refused_starts = worker_bounds.RefusalLog("action starts")
        self._refused_receipts = worker_bounds.RefusalLog("receipts")
        self._refused_peeks = worker_bounds.RefusalLog("peek answers")
        self._refused_frames = worker_bounds.RefusalLog("screen frames")

    async def Enroll(
        self, request: worker_pb2.EnrollRequest, context: Context
    ) -> worker_pb2.EnrollResponse:
        enrolled = await enrollment.enroll(
            self._db,
            request.token,
            request.name,
            dict(request.labels),
            csr_pem=request.csr_pem,
            certificates=self._certificates,
            limits=self._config.hello_limits,
        )
        if enrolled.certificate_pem:
            await context.send_initial_metadata(((WORKER_PORT_METADATA, str(self._worker_port)),))
        return worker_pb2.EnrollResponse(
            worker_id=enrolled.worker_id,
            credential=enrolled.credential,
            allowed_capabilities=list(enrolled.allowed_capabilities),
            certificate_pem=enrolled.certificate_pem,
            ca_pem=self._certificates.ca.pem if self._certificates is not None else "",
        )

    async def RotateCredential(
        self, request: worker_pb2.RotateCredentialRequest, context: Context
    ) -> worker_pb2.RotateCredentialResponse:
        secret = await rotate_worker_credential(self._db, current_principal())
        return worker_pb2.RotateCredentialResponse(credential=secret)

    async def RenewCertificate(
        self, request: worker_pb2.RenewCertificateRequest, context: Context
    ) -> worker_pb2.Certificate:
        if self._certificates is None:
            raise FailedPreconditionError(
                "this coordinator signs no certificates (it serves without --ca-dir)"
            )
        worker = current_principal()
        issued = await self._certificates.renew(
            worker.id, _peer_certificate(context), request.csr_pem
        )
        return worker_pb2.Certificate(
            certificate_pem=issued.pem,
            ca_pem=self._certificates.ca.pem,
            not_after=issued.not_after,
        )

    async def Connect(self, request_iterator: Any, context: Context) -> None:
        worker = current_principal()
        if self._certificates is not None:
            await self._certificates.check(worker.id, _peer_certificate(context))
        try:
            first = await asyncio.wait_for(context.read(), HELLO_TIMEOUT)
        except TimeoutError as exc:
            raise InvalidArgumentError(f"no hello within {HELLO_TIMEOUT:.0f} s") from exc
        if first is grpc.aio.EOF:
            return
        if first.WhichOneof("body") != "hello":
            raise InvalidArgumentError("the first message on the stream must be a hello")
        hello = first.hello
        advertisement = Advertisement.from_proto(hello.advertisement)
        held = [
            Held(action_id=h.action_id, attempt_id=h.attempt_id, epoch=h.epoch, state=h.state)
            for h in hello.held
        ]
        refusal = worker_bounds.hello_refusal(
            hello.ByteSize(), advertisement, held, self._config.hello_limits
        )
        if refusal:
            raise InvalidArgumentError(refusal)
        local_kill = LocalKill.from_proto(hello.local_kill, "hello.local_kill")
        session = await self._presence.open(worker.id, advertisement, local_kill)
        tasks: list[asyncio.Task[None]] = []

        def end(reason: str) -> None:
            self._dispatcher.metrics.streams_ended.labels("refused_reports").inc()
            session.end(PermissionDeniedError(reason))

        budget = self._dispatcher.reports.open(
            worker.id, end, [(h.action_id, h.attempt_id) for h in held]
        )
        try:
            # Read after the session is open: a switch engaged from now on is pushed to it.
            kills = await self._kills.for_worker(worker.id)
            await context.write(
                worker_pb2.CoordinatorMessage(
                    welcome=worker_pb2.Welcome(
                        worker_id=worker.id,
                        session_id=session.session_id,
                        replica=self._config.replica,
                        heartbeat_interval_seconds=self._config.heartbeat_interval,
                        lease_ttl_seconds=self._config.lease_ttl,
                        rotate_credential=session.rotate_credential,
                        stream_liveness=hello.stream_liveness,
                        local_kill_reports=True,
                        kills=[
                            worker_pb2.KillState(
                                kill_id=k.id,
                                engaged=True,
                                scope=k.scope,
                                target=k.target,
                                reason=k.reason,
                            )
                            for k in kills
                        ],
                    )
                )
            )
            await self._dispatcher.on_connect(worker.id, held, session.opened_at)
            tasks = [
                asyncio.create_task(
                    self._read(session, budget, context, ack_beats=not hello.stream_liveness)
                ),
                asyncio.create_task(self._write(session, context)),
            ]
            waiters: set[asyncio.Future[Any]] = {*tasks, session.ended}
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            if session.ended in done:
                reason: DeskfleetError = session.ended.result()
                code = (
                    reason.code
                    if reason.code != grpc.StatusCode.UNKNOWN
                    else grpc.StatusCode.ABORTED
                )
                await context.abort(code, reason.message)
            for task in done:
                try:
                    task.result()
                except Exception:
                    if context.cancelled():
                        return  # the worker went away mid-write: a disconnect, not a defect
                    raise
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._dispatcher.reports.close(budget)
            await self._presence.close(session)
            self._peeks.on_disconnect(worker.id)
            if self._watches is not None:
                self._watches.on_disconnect(worker.id)
            if self._takeovers is not None:
                self._takeovers.on_disconnect(worker.id)

    async def _write(self, session: WorkerSession, context: Context) -> None:
        while True:
            order = await session.outbox.get()
            await context.write(_message(order))
            if isinstance(order, DispatchOrder):  # tests only: shared/faults.py
                faults.crash(faults.EXIT_AFTER_DISPATCH)

    async def _read(
        self,
        session: WorkerSession,
        budget: worker_bounds.ReportBudget,
        context: Context,
        *,
        ack_beats: bool,
    ) -> None:
        """`ack_beats`: the worker predates stream liveness and wants its heartbeats acknowledged
        (they renew nothing: presence lives as long as the stream does). Receipts and starts
        refused here count in the stream's `budget`, as those the ledger refuses do."""
        refused = self._dispatcher.metrics.refused_reports
        while True:
            message = await context.read()
            if message is grpc.aio.EOF:
                return
            kind = message.WhichOneof("body")
            if kind == "heartbeat":
                if ack_beats:
                    session.outbox.put_nowait(_Ack(message.heartbeat.seq))
            elif kind == "started":
                m = message.started
                refusal = worker_bounds.ids_refusal(action_id=m.action_id, attempt_id=m.attempt_id)
                if refusal:
                    self._refused_starts.note(session.worker_id, refusal)
                    refused.labels("start", "bounds").inc()
                    budget.refused(m.action_id, m.attempt_id, refusal)
                    continue
                self._dispatcher.on_started(Started(session.worker_id, m.action_id, m.attempt_id))
            elif kind == "receipt":
                r = message.receipt
                receipt = _receipt(session.worker_id, r)
                refusal = worker_bounds.receipt_refusal(receipt)
                if refusal:
                    # Answered, so that the worker forgets it instead of sending it again.
                    self._refused_receipts.note(session.worker_id, refusal)
                    refused.labels("receipt", "bounds").inc()
                    budget.refused(r.action_id, r.attempt_id, refusal)
                    session.outbox.put_nowait(
                        ReceiptVerdict(
                            session.worker_id,
                            r.action_id[: worker_bounds.MAX_ID],
                            r.attempt_id[: worker_bounds.MAX_ID],
                            False,
                            refusal,
                        )
                    )
                    continue
                self._dispatcher.on_receipt(receipt)
                if log.isEnabledFor(logging.DEBUG):
                    parent = TraceParent.parse(r.traceparent)
                    with log_context(
                        run_id=r.run_id,
                        action_id=r.action_id,
                        attempt_id=r.attempt_id,
                        worker_id=session.worker_id,
                        trace_id=parent.trace_id if parent is not None else "",
                    ):
                        log.debug("receipt %s of attempt %s", r.status, r.attempt_id)
            elif kind == "peek_result":
                p = message.peek_result
                refusal = worker_bounds.ids_refusal(peek_id=p.peek_id)
                if refusal:
                    self._refused_peeks.note(session.worker_id, refusal)
                    continue
                # Its refusal reaches the admin who asked, as one line: cut, never refused (it
                # is the answer the admin waits for).
                error = p.error[: worker_bounds.MAX_PEEK_ERROR]
                code = p.code[: worker_bounds.MAX_CODE]
                self._peeks.on_answer(
                    session.worker_id,
                    PeekAnswer(
                        peek_id=p.peek_id,
                        media_type=p.media_type,
                        data=p.data,
                        width=p.width,
                        height=p.height,
                        error=error,
                        code=code,
                    ),
                )
            elif kind == "frame":
                f = message.frame
                refusal = worker_bounds.ids_refusal(watch_id=f.watch_id)
                if not refusal and self._watches is not None:
                    refusal = self._watches.on_frame(
                        session.worker_id,
                        f.watch_id,
                        media_type=f.media_type,
                        data=f.data,
                        width=f.width,
                        height=f.height,
                        captured_at=f.captured_at,
                        error=f.error,
                        code=f.code,
                    )
                if refusal:
                    self._refused_frames.note(session.worker_id, refusal)
            elif kind == "input_result":
                r = message.input_result
                refusal = worker_bounds.ids_refusal(input_id=r.input_id)
                if refusal:
                    self._refused_peeks.note(session.worker_id, refusal)
                elif self._takeovers is not None:
                    self._takeovers.on_result(
                        session.worker_id,
                        InputResult(
                            r.input_id,
                            r.applied,
                            r.error[: worker_bounds.MAX_PEEK_ERROR],
                            r.code[: worker_bounds.MAX_CODE],
                        ),
                    )
            elif kind == "kill_ack":
                ack = message.kill_ack
                self._kills.on_ack(session.worker_id, ack.kill_id, ack.engaged)
            elif kind == "local_kill":
                state = LocalKill.from_proto(message.local_kill)
                if self._presence.report_local_kill(session, state):
                    log.info(
                        "worker %s reports its own kill switch %s",
                        session.worker_id,
                        f"engaged by {state.means}" if state.engaged else "released",
                    )
            else:
                raise InvalidArgumentError(f"unexpected {kind or 'empty'} message on the stream")


def _receipt(worker_id: str, r: worker_pb2.Receipt) -> IncomingReceipt:
    return IncomingReceipt(
        worker_id=worker_id,
        action_id=r.action_id,
        run_id=r.run_id,
        attempt_id=r.attempt_id,
        epoch=r.epoch,
        status=r.status,
        result_json=r.result_json,
        error=r.error,
        started_at=r.started_at,
        finished_at=r.finished_at,
        artifacts=tuple(
            IncomingArtifact(
                sha256=a.sha256,
                media_type=a.media_type,
                data=a.data,
                width=a.width,
                height=a.height,
            )
            for a in r.artifacts
        ),
        traceparent=r.traceparent,
    )


class _Ack:
    """A heartbeat acknowledgement, queued behind any order sent before it."""

    def __init__(self, seq: int) -> None:
        self.seq = seq
