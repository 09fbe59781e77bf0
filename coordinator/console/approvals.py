"""The approval pages: the list, one approval with its display drawn (and a peeked screen while
it is pending), and the answers: approve narrowed, deny, peek."""

from __future__ import annotations

import contextlib

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from coordinator.console import model
from coordinator.console.pages import Pages, Refused, form_reason
from coordinator.console.sessions import (
    Session,
)
from shared.errors import (
    NotFoundError,
)
from shared.gen.deskfleet.v1 import desktop_pb2, fleet_pb2, runs_pb2
from shared.states import APPROVAL_STATES


class ApprovalPages(Pages):
    """Approvals and their answers."""

    async def approvals(self, request: Request, session: Session) -> Response:
        status = request.query_params.get("status", "pending")
        if status not in APPROVAL_STATUSES:
            raise Refused(400, f"status: one of {', '.join(APPROVAL_STATUSES)}")
        listed = await self.rpc.call(
            session.token,
            self.rpc.approvals.ListApprovals,
            desktop_pb2.ListApprovalsRequest(status=status, limit=200),
        )
        asked = await self.rpc.call(
            session.token,
            self.rpc.runs.ListQuestions,
            runs_pb2.ListQuestionsRequest(limit=100),
        )
        return await self.page(
            request,
            session,
            "approvals.html",
            approvals=listed.approvals,
            questions=asked.questions,
            status=status,
            statuses=APPROVAL_STATUSES,
            csrf=session.csrf,
        )

    async def question_answer(self, request: Request, session: Session) -> Response:
        question_id = request.path_params["id"]
        form = await request.form()
        text = str(form.get("text") or "")
        if not text.strip():
            raise Refused(400, "answer: write what the goal asked for")
        question = await self.rpc.call(
            session.token,
            self.rpc.runs.AnswerQuestion,
            runs_pb2.AnswerQuestionRequest(id=question_id, text=text),
        )
        if question.guidance_id:
            session.flash("ok", "the question had expired: the answer joins the goal's next step")
        else:
            session.flash("ok", f"question {question.id} answered")
        back = str(form.get("back") or "")
        # Only the pages the forms come from: a posted address is never followed elsewhere.
        if back != f"/runs/{question.run_id}":
            back = "/approvals"
        return self.redirect(back)

    async def approval(self, request: Request, session: Session) -> Response:
        approval_id = request.path_params["id"]
        approval = await self._approval(session, approval_id)
        worker: fleet_pb2.WorkerInfo | None = None
        if session.is_admin:  # the worker's displays size the drawing (admins answer)
            with contextlib.suppress(NotFoundError):
                worker = await self.rpc.call(
                    session.token,
                    self.rpc.fleet.GetWorker,
                    fleet_pb2.WorkerRef(id=approval.worker_id),
                )
        shown = list(approval.requested.displays) or [0]
        display = None
        if worker is not None:
            display = next((d for d in worker.displays if d.index == shown[0]), None)
        requested = approval.requested
        peek = await self._shown_peek(session, approval)
        if peek is not None:  # the screen as it was captured: its real size is the surface's
            display = fleet_pb2.Display(index=peek.display, width=peek.width, height=peek.height)
        discussion = await self.rpc.call(
            session.token,
            self.rpc.approvals.DiscussApproval,
            desktop_pb2.DiscussApprovalRequest(id=approval_id),
        )
        return await self.page(
            request,
            session,
            "approval.html",
            discussion=discussion,
            approval=approval,
            worker=worker,
            display=display,
            peek=peek,
            region=requested.region if requested.HasField("region") else None,
            actions=list(requested.actions) or list(model.DESKTOP_ACTIONS),
            csrf=session.csrf,
        )

    async def _approval(self, session: Session, approval_id: str) -> desktop_pb2.Approval:
        for status in APPROVAL_STATUSES:
            listed = await self.rpc.call(
                session.token,
                self.rpc.approvals.ListApprovals,
                desktop_pb2.ListApprovalsRequest(status=status, limit=1000),
            )
            found: desktop_pb2.Approval | None = next(
                (a for a in listed.approvals if a.id == approval_id), None
            )
            if found is not None:
                return found
        raise NotFoundError(f"approval {approval_id} not found")

    async def approval_change(self, request: Request, session: Session) -> Response:
        approval_id, op = request.path_params["id"], request.path_params["op"]
        form = await request.form()
        if op == "deny":
            answer = await self.rpc.call(
                session.token,
                self.rpc.approvals.Deny,
                desktop_pb2.DenyRequest(id=approval_id, reason=form_reason(form)),
            )
            session.flash("ok", f"approval {answer.id} denied")
            return self.redirect("/approvals")
        if op == "discuss":
            text = str(form.get("text") or "")
            if not text.strip():
                raise Refused(400, "message: write something to add")
            await self.rpc.call(
                session.token,
                self.rpc.approvals.DiscussApproval,
                desktop_pb2.DiscussApprovalRequest(id=approval_id, text=text),
            )
            session.flash("ok", "message added to the discussion (it answers nothing)")
            return self.redirect(f"/approvals/{approval_id}#discussion")
        if op == "advise":
            note = await self.rpc.call(
                session.token,
                self.rpc.approvals.AdviseApproval,
                desktop_pb2.AdviseApprovalRequest(id=approval_id),
                timeout=150,
            )
            session.flash("ok", f"advice from {note.author} added (it approves nothing)")
            return self.redirect(f"/approvals/{approval_id}#discussion")
        if op == "guide":
            text = str(form.get("text") or "")
            if not text.strip():
                raise Refused(400, "guidance: write what the run should do instead")
            answer = await self.rpc.call(
                session.token,
                self.rpc.approvals.GuideApproval,
                desktop_pb2.GuideApprovalRequest(id=approval_id, text=text),
            )
            session.flash("ok", f"approval {answer.id} answered with guidance; not approved")
            return self.redirect("/approvals")
        if op == "peek":
            peek = await self.rpc.call(
                session.token,
                self.rpc.approvals.PeekScreen,
                desktop_pb2.PeekScreenRequest(id=approval_id),
            )
            session.keep_peek(peek)
            session.flash(
                "ok",
                f"screen of display {peek.display} captured at {model.when(peek.taken_at)}"
                f" ({peek.width}x{peek.height}); the look is in the audit log",
            )
            return self.redirect(f"/approvals/{approval_id}#screen")
        if op != "approve":
            raise Refused(404, f"no such approval operation: {op}")
        scope = approve_scope(form)
        answer = await self.rpc.call(
            session.token,
            self.rpc.approvals.Approve,
            desktop_pb2.ApproveRequest(id=approval_id, scope=scope, reason=form_reason(form)),
        )
        session.flash("ok", f"approval {answer.id} approved: {model.scope_text(answer.granted)}")
        return self.redirect(f"/approvals/{approval_id}")

    async def _shown_peek(
        self, session: Session, approval: desktop_pb2.Approval
    ) -> desktop_pb2.ScreenPeek | None:
        """The screen this session peeked for the approval, while it may still be shown: the
        approval is pending and no kill switch applies to it. Otherwise it is dropped."""
        peek = session.peeks.get(approval.id)
        if peek is None:
            return None
        if approval.status == "pending":
            kills = await self.rpc.call(
                session.token, self.rpc.kills.Status, desktop_pb2.KillStatusRequest()
            )
            if not any(_stops(k, approval) for k in kills.switches):
                return peek
        session.peeks.pop(approval.id, None)
        return None

    async def approval_screen(self, request: Request, session: Session) -> Response:
        """The image this session peeked for the approval (never another session's), only
        while the approval is pending and no kill switch applies to it."""
        approval_id = request.path_params["id"]
        if approval_id not in session.peeks:
            raise Refused(404, "no screen captured for this approval: use “Show the screen”")
        peek = await self._shown_peek(session, await self._approval(session, approval_id))
        if peek is None:
            raise Refused(
                410,
                "the screen is no longer shown: the approval is answered or ended, or a kill"
                " switch stops its desktop",
            )
        return Response(
            peek.data,
            media_type=peek.media_type,
            headers={"cache-control": "no-store", "content-disposition": "inline"},
        )


APPROVAL_STATUSES = tuple(str(s) for s in APPROVAL_STATES)


def approve_scope(form: FormData) -> desktop_pb2.DesktopScope:
    """The narrowing an approver chose: actions ticked, ttl, count, and the drawn region."""
    scope = desktop_pb2.DesktopScope(
        actions=[str(a) for a in form.getlist("actions") if str(a) in model.DESKTOP_ACTIONS],
        ttl_seconds=max(model.parse_float(form.get("ttl_minutes"), 0.0), 0.0) * 60,
        max_actions=max(model.parse_int(form.get("max_actions"), 0), 0),
    )
    w = model.parse_int(form.get("region_width"), 0)
    h = model.parse_int(form.get("region_height"), 0)
    if w > 0 and h > 0:
        scope.region.CopyFrom(
            desktop_pb2.Region(
                x=model.parse_int(form.get("region_x"), 0),
                y=model.parse_int(form.get("region_y"), 0),
                width=w,
                height=h,
            )
        )
    return scope


def _stops(kill: desktop_pb2.KillSwitch, approval: desktop_pb2.Approval) -> bool:
    """Whether an engaged kill switch applies to the approval's desktop."""
    return kill.engaged and (
        kill.scope == "fleet"
        or (kill.scope == "worker" and kill.target == approval.worker_id)
        or (kill.scope == "run" and kill.target == approval.run_id)
    )
