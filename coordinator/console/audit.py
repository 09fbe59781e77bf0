"""The audit page (admins): entries filtered by action, actor, target and period."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response

from coordinator.console import model
from coordinator.console.pages import Pages, Refused, query_without_page
from coordinator.console.sessions import (
    Session,
)
from coordinator.console.wording import article
from shared.gen.deskfleet.v1 import admin_pb2


class AuditPages(Pages):
    """The audit log."""

    async def audit(self, request: Request, session: Session) -> Response:
        if not session.is_admin:  # the link is not shown to them; asked for by address
            raise Refused(
                403,
                f"Only an admin can read the audit log: you are signed in as {session.name},"
                f" {article(session.role)} {session.role}.",
            )
        q = request.query_params
        filters = {k: q.get(k, "") for k in ("action", "actor", "target", "hours")}
        hours = model.parse_float(filters["hours"], 0.0)
        # More hours than there have been (a hand-typed 1e308, inf) is all of them: it was a
        # refusal about "epoch seconds" nobody on this page typed.
        since = max(time.time() - hours * 3600, 0.0) if hours > 0 else 0.0
        entries = await self.rpc.call(
            session.token,
            self.rpc.admin.ListAudit,
            admin_pb2.ListAuditRequest(since=since, limit=10000),
        )
        rows = [
            e
            for e in entries.entries
            if (not filters["action"] or filters["action"] in e.action)
            and (not filters["actor"] or filters["actor"] in (e.actor_name, e.actor_id))
            and (not filters["target"] or filters["target"] in e.target)
        ]
        rows.reverse()  # newest first
        page = model.page_of(rows, model.parse_int(q.get("page"), 1))
        return await self.page(
            request,
            session,
            "audit.html",
            page=page,
            filters=filters,
            more=entries.more,
            query=query_without_page(request),
        )
