"""The fleet and worker pages: counts, a page of workers, one worker; drain, undrain, revoke."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from coordinator.console import model
from coordinator.console.pages import RECENT_ACTIONS, Pages, Refused
from coordinator.console.sessions import (
    Session,
)
from shared.errors import (
    NotFoundError,
)
from shared.gen.deskfleet.v1 import admin_pb2, desktop_pb2, fleet_pb2


class FleetPages(Pages):
    """The fleet and its workers."""

    async def fleet(self, request: Request, session: Session) -> Response:
        """Counts of the whole fleet and one page of its workers, both read by the coordinator
        (keyset pages and filters in the store): the cost does not grow with the fleet."""
        q = request.query_params
        rpc, token = self.rpc, session.token
        filters = {k: q.get(k, "") for k in ("q", "state", "capability", "online")}
        after = q.get("after", "")
        rows: Awaitable[fleet_pb2.ListWorkersResponse | fleet_pb2.WorkerStatus]
        if session.is_admin:  # listing with filters (and revoked workers) is an admin's
            listing = fleet_pb2.ListWorkersRequest(
                limit=model.PAGE_SIZE,
                page_token=after,
                state=filters["state"],
                capability=filters["capability"],
                text=filters["q"].strip(),
                include_revoked=filters["state"] == "revoked",
            )
            if filters["online"] in ("yes", "no"):
                listing.online = filters["online"] == "yes"
            rows = rpc.call(token, rpc.fleet.ListWorkers, listing)
        else:
            rows = rpc.call(
                token,
                rpc.fleet.GetWorkerStatus,
                fleet_pb2.GetWorkerStatusRequest(limit=model.PAGE_SIZE, page_token=after),
            )
        status, listed, activity = await asyncio.gather(
            rpc.call(token, rpc.fleet.GetWorkerStatus, fleet_pb2.GetWorkerStatusRequest(limit=1)),
            rows,
            rpc.call(token, rpc.admin.GetFleetActivity, admin_pb2.FleetActivityRequest()),
        )
        current = {a.worker_id: a for a in activity.actions}
        return await self.page(
            request,
            session,
            "fleet.html",
            status=status,
            workers=list(listed.workers),
            next_after=listed.next_page_token,
            first=not after,
            filters=filters,
            current=current,
            activity=activity,
            query=urlencode([(k, v) for k, v in filters.items() if v]),
        )

    async def worker(self, request: Request, session: Session) -> Response:
        worker_id = request.path_params["id"]
        status = await self.rpc.call(
            session.token, self.rpc.fleet.GetWorkerStatus, fleet_pb2.GetWorkerStatusRequest()
        )
        worker = next((w for w in status.workers if w.id == worker_id), None)
        if worker is None and session.is_admin:  # revoked workers are not in the status rows
            worker = await self.rpc.call(
                session.token, self.rpc.fleet.GetWorker, fleet_pb2.WorkerRef(id=worker_id)
            )
        if worker is None:
            raise NotFoundError(f"worker {worker_id} not found")
        activity = await self.rpc.call(
            session.token,
            self.rpc.admin.GetFleetActivity,
            admin_pb2.FleetActivityRequest(worker=worker_id, recent=RECENT_ACTIONS),
        )
        kills = await self.rpc.call(
            session.token, self.rpc.kills.Status, desktop_pb2.KillStatusRequest()
        )
        return await self.page(
            request,
            session,
            "worker.html",
            worker=worker,
            actions=[a for a in activity.actions if a.worker_id == worker_id],
            recent=activity.recent,
            fleet_wide=activity.fleet_wide,
            switches=[k for k in kills.switches if k.target == worker_id or k.scope == "fleet"],
            csrf=session.csrf,
        )

    async def worker_confirm(self, request: Request, session: Session) -> Response:
        worker_id, op = request.path_params["id"], request.path_params["op"]
        if op not in WORKER_OPS:
            raise Refused(404, f"no such worker operation: {op}")
        return await self.page(
            request,
            session,
            "confirm.html",
            title=f"{WORKER_OPS[op][0]} worker {worker_id}?",
            explain=WORKER_OPS[op][1],
            action=f"/workers/{worker_id}/{op}",
            button=WORKER_OPS[op][0],
            back=f"/workers/{worker_id}",
            csrf=session.csrf,
            reason=False,
        )

    async def worker_change(self, request: Request, session: Session) -> Response:
        worker_id, op = request.path_params["id"], request.path_params["op"]
        method = {
            "drain": self.rpc.fleet.DrainWorker,
            "undrain": self.rpc.fleet.UndrainWorker,
            "revoke": self.rpc.fleet.RevokeWorker,
        }.get(op)
        if method is None:
            raise Refused(404, f"no such worker operation: {op}")
        info = await self.rpc.call(session.token, method, fleet_pb2.WorkerRef(id=worker_id))
        session.flash("ok", f"worker {info.name or info.id}: {info.state}")
        return self.redirect(f"/workers/{worker_id}")


WORKER_OPS = {
    "drain": ("Drain", "No new work reaches the worker; it stays connected."),
    "undrain": ("Undrain", "The worker takes new work again."),
    "revoke": (
        "Revoke",
        "The worker is cut off at once and its credential is refused from then on."
        " This cannot be undone: the machine must enroll again.",
    ),
}
