"""The run pages: the list, one run (its timeline, report, journal), its replay and recording,
its artifacts; cancel, retry, abandon, guide and a run kill switch."""

from __future__ import annotations

import json
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from coordinator.admin_cli.runs_commands import plan_request
from coordinator.console import model, recording
from coordinator.console.pages import JOURNAL_PAGE, Pages, Refused, form_reason, query_without_page
from coordinator.console.screens import checked_id
from coordinator.console.sessions import (
    Session,
)
from shared.errors import DeskfleetError
from shared.gen.deskfleet.v1 import desktop_pb2, runs_pb2
from shared.receipts import decode_result
from shared.states import RUN_KINDS, RUN_STATES, STOPPED, STOPPED_FOR_A_PERSON, RunState

MAX_REVISE_CHARS = 256 * 1024  # a plan's text; the coordinator bounds the plan itself
MAX_SEQ = 2**32 - 1  # a recorded frame's number as the request holds it


class RunPages(Pages):
    """Runs, their replays and artifacts."""

    async def runs(self, request: Request, session: Session) -> Response:
        q = request.query_params
        filters = {k: q.get(k, "") for k in ("status", "kind", "owner", "q")}
        limit = min(max(model.parse_int(q.get("limit"), 200), 1), 1000)
        # Whose runs is the coordinator's decision: an owner naming anyone else is refused
        # there, not filtered here.
        listed = await self.rpc.call(
            session.token,
            self.rpc.runs.ListRuns,
            runs_pb2.ListRunsRequest(
                limit=limit,
                status=filters["status"],
                kind=filters["kind"],
                owner=filters["owner"].strip(),
            ),
        )
        shown = model.filter_runs(listed.runs, text=filters["q"])
        page = model.page_of(shown, model.parse_int(q.get("page"), 1))
        return await self.page(
            request,
            session,
            "runs.html",
            page=page,
            filters=filters,
            kinds=RUN_KINDS,
            run_states=[str(s) for s in RUN_STATES],
            query=query_without_page(request),
        )

    async def run(self, request: Request, session: Session) -> Response:
        run_id = request.path_params["id"]
        q = request.query_params
        run = await self.rpc.call(session.token, self.rpc.runs.GetRun, runs_pb2.RunRef(id=run_id))
        # Past the run's last event is an empty page, never a number the request cannot hold
        # (an `after` beyond 32 bits was an internal error).
        after = min(max(model.parse_int(q.get("after"), 0), 0), run.last_seq)
        events = await self.rpc.journal_page(session.token, run_id, after, JOURNAL_PAGE)
        search = q.get("search", "").strip()
        matches: runs_pb2.SearchJournalResponse | None = None
        if search:
            matches = await self.rpc.call(
                session.token,
                self.rpc.journal.SearchJournal,
                runs_pb2.SearchJournalRequest(
                    run_id=run_id, text=search, cursor=q.get("cursor", ""), limit=20
                ),
            )
        recorded = 0
        if run.kind == "desktop":
            first = await self.rpc.call(
                session.token,
                self.rpc.desktop.ListRecording,
                desktop_pb2.ListRecordingRequest(run_id=run_id, limit=1),
            )
            recorded = first.total
        report = None
        if run.kind == "research":
            found = await self.rpc.events_of(session.token, run_id, ("research.report",))
            report = model.research_report(found[-1].data_json) if found else None
        return await self.page(
            request,
            session,
            "run.html",
            run=run,
            report=report,
            replayable=any(a.kind.startswith("desktop.") for a in run.actions),
            recorded=recorded,
            timeline=model.timeline(run.timeline),
            events=events,
            after=after,
            next_after=events[-1].seq if len(events) >= JOURNAL_PAGE else None,
            journal_pages=model.JournalPages(after, run.last_seq, JOURNAL_PAGE),
            # Collapsed on arrival (a run's journal made its page thousands of pixels tall);
            # open when one of its pages or a search was asked for.
            journal_open="after" in q or bool(search),
            search=search,
            matches=matches,
            stopped=run.status in STOPPED,
            guidable=run.status not in (RunState.SUCCEEDED, RunState.CANCELLED),
            revisable=run.kind == "plan"
            and run.status in STOPPED_FOR_A_PERSON
            and not run.stop_reason.startswith("budget_exhausted"),
            # One id per form shown: the same form sent twice is one message.
            message_id=f"console-{uuid.uuid4().hex}",
            csrf=session.csrf,
        )

    async def replay(self, request: Request, session: Session) -> Response:
        run_id = request.path_params["id"]
        run = await self.rpc.call(session.token, self.rpc.runs.GetRun, runs_pb2.RunRef(id=run_id))
        results: dict[str, dict[str, Any]] = {}
        for event in await self.rpc.events_of(session.token, run_id, ("receipt",)):
            data = json.loads(event.data_json)
            action_id = str(data.get("action", ""))
            if "archive" in data:  # a bulky result: the journal holds a preview only
                data = json.loads(await self.rpc.entry_text(session.token, run_id, event.seq))
            result = data.get("result")
            if isinstance(result, dict):
                results[action_id] = result  # the newest attempt's
        frames, total = await self._recording(session, run) if run.kind == "desktop" else ([], 0)
        return await self.page(
            request,
            session,
            "replay.html",
            run=run,
            frames=model.replay(run.actions, results),
            recording=recording.as_json(recording.played(frames, run.actions, results)),
            recorded=total,
        )

    async def _recording(
        self, session: Session, run: runs_pb2.Run
    ) -> tuple[list[desktop_pb2.RecordedFrame], int]:
        """The run's recorded frames, page by page, up to what one page lists; and how many
        the recording holds."""
        frames: list[desktop_pb2.RecordedFrame] = []
        after, total = 0, 0
        while len(frames) < recording.MAX_FRAMES:
            page = await self.rpc.call(
                session.token,
                self.rpc.desktop.ListRecording,
                desktop_pb2.ListRecordingRequest(run_id=run.id, after_seq=after),
            )
            frames.extend(page.frames)
            total = page.total
            if not page.next_seq or page.next_seq <= after:
                break
            after = page.next_seq
        return frames[: recording.MAX_FRAMES], total

    async def recording_frame(self, request: Request, session: Session) -> Response:
        run_id = checked_id(request.path_params["id"], "run")
        seq = request.path_params["seq"]
        if not (seq.isascii() and seq.isdigit() and 0 < int(seq) <= MAX_SEQ):
            raise Refused(400, "frame: a recorded frame's number, 1 or more")
        got = await self.rpc.call(
            session.token,
            self.rpc.desktop.GetRecordingFrame,
            desktop_pb2.GetRecordingFrameRequest(run_id=run_id, seq=int(seq)),
        )
        media = (
            got.frame.media_type
            if got.frame.media_type in IMAGE_TYPES
            else "application/octet-stream"
        )
        return Response(
            got.data,
            media_type=media,
            # A recorded frame never changes: the player steps back and forth without asking
            # again, and only this browser's cache holds it (never a shared one).
            headers={"cache-control": "private, max-age=600", "content-disposition": "inline"},
        )

    async def run_confirm(self, request: Request, session: Session) -> Response:
        run_id, op = request.path_params["id"], request.path_params["op"]
        if op not in RUN_OPS:
            raise Refused(404, f"no such run operation: {op}")
        return await self.page(
            request,
            session,
            "confirm.html",
            title=f"{RUN_OPS[op][0]} run {run_id}?",
            explain=RUN_OPS[op][1],
            action=f"/runs/{run_id}/{op}",
            button=RUN_OPS[op][0],
            back=f"/runs/{run_id}",
            csrf=session.csrf,
            reason=False,
        )

    async def run_change(self, request: Request, session: Session) -> Response:
        run_id, op = request.path_params["id"], request.path_params["op"]
        rpc = self.rpc
        if op == "guide":
            form = await request.form()
            text = str(form.get("text") or "")
            if not text.strip():
                raise Refused(400, "guidance: write what the run should know")
            message = runs_pb2.GuideRunRequest(
                id=run_id,
                text=text,
                message_id=str(form.get("message_id") or ""),
                # A page's own number, or anything a browser sends: 0 (current) if not one.
                expected_execution=min(
                    max(model.parse_int(form.get("expected_execution"), 0), 0), 2**31 - 1
                ),
            )
            done = await rpc.call(session.token, rpc.runs.GuideRun, message)
            if done.repeated_send:
                session.flash("ok", "that guidance was already sent: nothing sent twice")
            else:
                session.flash("ok", f"guidance queued ({done.queued} waiting)")
            return self.redirect(f"/runs/{run_id}")
        if op == "revise":
            form = await request.form()
            text = str(form.get("plan") or "")
            if len(text) > MAX_REVISE_CHARS:
                raise Refused(400, f"plan: at most {MAX_REVISE_CHARS} characters")
            try:
                parsed = decode_result(text)
                request_plan = plan_request(parsed)
            except DeskfleetError as exc:
                raise Refused(400, f"plan: {exc.message}") from exc
            if request_plan.limits.ByteSize():
                raise Refused(400, "plan: limits carry over from the run; a revise sets none")
            await rpc.call(
                session.token,
                rpc.runs.ReviseRun,
                runs_pb2.ReviseRunRequest(id=run_id, actions=request_plan.actions),
            )
            session.flash("ok", f"run {run_id} revised: it goes on with the new part")
            return self.redirect(f"/runs/{run_id}")
        if op == "kill":
            form = await request.form()
            switch = await rpc.call(
                session.token,
                rpc.kills.Engage,
                desktop_pb2.EngageKillRequest(run=run_id, reason=form_reason(form)),
            )
            session.flash("ok", f"kill switch {switch.id} engaged for run {run_id}")
            return self.redirect("/kill")
        method = {
            "cancel": rpc.runs.CancelRun,
            "retry": rpc.runs.RetryRun,
            "abandon": rpc.runs.AbandonRun,
        }.get(op)
        if method is None:
            raise Refused(404, f"no such run operation: {op}")
        run = await rpc.call(session.token, method, runs_pb2.RunRef(id=run_id))
        session.flash("ok", f"run {run.id}: {run.status}")
        return self.redirect(f"/runs/{run_id}")

    async def artifact(self, request: Request, session: Session) -> Response:
        run_id, sha = request.path_params["id"], request.path_params["sha"]
        art = await self.rpc.call(
            session.token,
            self.rpc.desktop.GetArtifact,
            desktop_pb2.GetArtifactRequest(run_id=run_id, sha256=sha),
        )
        media = (
            art.info.media_type
            if art.info.media_type in IMAGE_TYPES
            else "application/octet-stream"
        )
        return Response(
            art.data,
            media_type=media,
            # Not kept by the browser: a screen must not outlive the session that saw it.
            headers={"cache-control": "no-store", "content-disposition": "inline"},
        )


RUN_OPS = {
    "cancel": ("Cancel", "The run stops; actions in flight are cancelled."),
    "retry": (
        "Retry",
        "The run continues from its checkpoint: no completed effect is replayed, no permission"
        " granted, no budget replenished.",
    ),
    "abandon": ("Abandon", "The run is given up for good; it cannot be retried."),
}
IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp")
