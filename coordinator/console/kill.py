"""The kill switch pages: the switches and who acknowledged them; engage and release."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from coordinator.console.pages import Pages, Refused, form_reason
from coordinator.console.sessions import (
    Session,
)
from shared.gen.deskfleet.v1 import desktop_pb2


class KillPages(Pages):
    """Kill switches."""

    async def kill(self, request: Request, session: Session) -> Response:
        show_all = request.query_params.get("all") == "1"
        status = await self.rpc.call(
            session.token,
            self.rpc.kills.Status,
            desktop_pb2.KillStatusRequest(include_released=show_all),
        )
        return await self.page(
            request,
            session,
            "kill.html",
            switches=status.switches,
            local=status.local,
            local_count=status.local_count,
            show_all=show_all,
            csrf=session.csrf,
        )

    async def kill_engage(self, request: Request, session: Session) -> Response:
        form = await request.form()
        target = str(form.get("target") or "fleet")
        worker = str(form.get("worker") or "").strip() if target == "worker" else ""
        run = str(form.get("run") or "").strip() if target == "run" else ""
        if (target == "worker" and not worker) or (target == "run" and not run):
            raise Refused(400, f"name the {target} to stop")
        switch = await self.rpc.call(
            session.token,
            self.rpc.kills.Engage,
            desktop_pb2.EngageKillRequest(worker=worker, run=run, reason=form_reason(form)),
        )
        where = switch.scope + (f" {switch.target}" if switch.target else "")
        session.flash("ok", f"kill switch {switch.id} engaged for the {where}")
        return self.redirect("/kill")

    async def kill_confirm(self, request: Request, session: Session) -> Response:
        switch_id = request.path_params["id"]
        return await self.page(
            request,
            session,
            "confirm.html",
            title=f"Release kill switch {switch_id}?",
            explain="Desktop input may resume; desktop runs it stopped must be approved again.",
            action=f"/kill/{switch_id}/release",
            button="Release",
            back="/kill",
            csrf=session.csrf,
            reason=True,
        )

    async def kill_release(self, request: Request, session: Session) -> Response:
        switch_id = request.path_params["id"]
        form = await request.form()
        await self.rpc.call(
            session.token,
            self.rpc.kills.Release,
            desktop_pb2.ReleaseKillRequest(id=switch_id, reason=form_reason(form)),
        )
        session.flash("ok", f"kill switch {switch_id} released")
        return self.redirect("/kill")
