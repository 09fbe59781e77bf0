"""FleetService: status, worker rows, revoke and drain."""

from __future__ import annotations

from typing import Any

import grpc

from coordinator.fleet.service import Fleet, worker_filter
from coordinator.security import audit
from coordinator.servicers.convert import worker_info, worker_status
from coordinator.servicers.guard import current_principal
from shared.errors import InvalidArgumentError
from shared.gen.deskfleet.v1 import fleet_pb2, fleet_pb2_grpc

Context = grpc.aio.ServicerContext[Any, Any]


def _worker_id(ref: fleet_pb2.WorkerRef | fleet_pb2.RotateWorkerRequest) -> str:
    if not ref.id.strip():
        raise InvalidArgumentError(
            "id: a worker's id or name is required (see `deskfleet workers list`)"
        )
    if len(ref.id) > 200:
        # Said as what it is: a name pasted whole from somewhere was told it was missing.
        raise InvalidArgumentError(
            f"id: a worker's id or name is at most 200 characters, not {len(ref.id)}"
            " (see `deskfleet workers list`)"
        )
    return ref.id


class FleetServicer(fleet_pb2_grpc.FleetServiceServicer):
    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet

    async def GetWorkerStatus(
        self, request: fleet_pb2.GetWorkerStatusRequest, context: Context
    ) -> fleet_pb2.WorkerStatus:
        return worker_status(await self._fleet.status(request.limit, request.page_token))

    async def ListWorkers(
        self, request: fleet_pb2.ListWorkersRequest, context: Context
    ) -> fleet_pb2.ListWorkersResponse:
        where = worker_filter(
            include_revoked=request.include_revoked,
            state=request.state,
            capability=request.capability,
            replica=request.replica,
            online=request.online if request.HasField("online") else None,
            text=request.text,
        )
        page = await self._fleet.page(where, request.limit, request.page_token)
        return fleet_pb2.ListWorkersResponse(
            workers=[worker_info(v) for v in page.workers], next_page_token=page.next_page_token
        )

    async def GetWorker(
        self, request: fleet_pb2.WorkerRef, context: Context
    ) -> fleet_pb2.WorkerInfo:
        return worker_info(await self._fleet.get(_worker_id(request)))

    async def RevokeWorker(
        self, request: fleet_pb2.WorkerRef, context: Context
    ) -> fleet_pb2.WorkerInfo:
        by = audit.actor(current_principal())
        return worker_info(await self._fleet.revoke(_worker_id(request), by))

    async def RotateWorker(
        self, request: fleet_pb2.RotateWorkerRequest, context: Context
    ) -> fleet_pb2.WorkerInfo:
        by = audit.actor(current_principal())
        view = await self._fleet.rotate(
            _worker_id(request), by, while_offline=request.while_offline
        )
        return worker_info(view)

    async def DrainWorker(
        self, request: fleet_pb2.WorkerRef, context: Context
    ) -> fleet_pb2.WorkerInfo:
        by = audit.actor(current_principal())
        return worker_info(await self._fleet.drain(_worker_id(request), by, draining=True))

    async def UndrainWorker(
        self, request: fleet_pb2.WorkerRef, context: Context
    ) -> fleet_pb2.WorkerInfo:
        by = audit.actor(current_principal())
        return worker_info(await self._fleet.drain(_worker_id(request), by, draining=False))
