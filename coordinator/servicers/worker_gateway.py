"""WorkerGateway: enrollment, and the one long-lived stream each worker keeps open."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import grpc

from coordinator import enrollment
from coordinator.presence import Presence, WorkerSession
from coordinator.servicers.guard import current_principal
from coordinator.settings import CoordinatorConfig
from coordinator.store import Database
from shared.advertisement import Advertisement
from shared.errors import DeskfleetError, InvalidArgumentError
from shared.gen.deskfleet.v1 import worker_pb2, worker_pb2_grpc

Context = grpc.aio.ServicerContext[Any, Any]

HELLO_TIMEOUT = 10.0


class WorkerGatewayServicer(worker_pb2_grpc.WorkerGatewayServicer):
    def __init__(self, db: Database, presence: Presence, config: CoordinatorConfig) -> None:
        self._db = db
        self._presence = presence
        self._config = config

    async def Enroll(
        self, request: worker_pb2.EnrollRequest, context: Context
    ) -> worker_pb2.EnrollResponse:
        enrolled = await enrollment.enroll(
            self._db, request.token, request.name, dict(request.labels)
        )
        return worker_pb2.EnrollResponse(
            worker_id=enrolled.worker_id,
            credential=enrolled.credential,
            allowed_capabilities=list(enrolled.allowed_capabilities),
        )

    async def Connect(self, request_iterator: Any, context: Context) -> None:
        worker = current_principal()
        try:
            first = await asyncio.wait_for(context.read(), HELLO_TIMEOUT)
        except TimeoutError as exc:
            raise InvalidArgumentError(f"no hello within {HELLO_TIMEOUT:.0f} s") from exc
        if first is grpc.aio.EOF:
            return
        if first.WhichOneof("body") != "hello":
            raise InvalidArgumentError("the first message on the stream must be a hello")
        session = await self._presence.open(
            worker.id, Advertisement.from_proto(first.hello.advertisement)
        )
        try:
            await context.write(
                worker_pb2.CoordinatorMessage(
                    welcome=worker_pb2.Welcome(
                        worker_id=worker.id,
                        session_id=session.session_id,
                        replica=self._config.replica,
                        heartbeat_interval_seconds=self._config.heartbeat_interval,
                        lease_ttl_seconds=self._config.lease_ttl,
                    )
                )
            )
            reader = asyncio.create_task(self._read(session, context))
            waiters: set[asyncio.Future[Any]] = {reader, session.ended}
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            if session.ended in done:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
                reason: DeskfleetError = session.ended.result()
                await context.abort(
                    reason.code
                    if reason.code != grpc.StatusCode.UNKNOWN
                    else grpc.StatusCode.ABORTED,
                    reason.message,
                )
            reader.result()
        finally:
            await self._presence.close(session)

    async def _read(self, session: WorkerSession, context: Context) -> None:
        while True:
            message = await context.read()
            if message is grpc.aio.EOF:
                return
            kind = message.WhichOneof("body")
            if kind == "heartbeat":
                self._presence.heartbeat(session)
                await context.write(
                    worker_pb2.CoordinatorMessage(
                        heartbeat_ack=worker_pb2.HeartbeatAck(seq=message.heartbeat.seq)
                    )
                )
            else:
                raise InvalidArgumentError(f"unexpected {kind or 'empty'} message on the stream")
