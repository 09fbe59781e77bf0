"""RunService and JournalService: owner-scoped adapters over `coordinator.runs.service` and
`recall`."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from typing import Any

import grpc
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from coordinator.agent.loop import Goals
from coordinator.model.settings import DEFAULT_MAX_WATCH_STREAMS
from coordinator.runs import guidance, questions
from coordinator.runs.export import RunExports
from coordinator.runs.plan import Plan, PlannedAction, RawAction, parse_plan_actions
from coordinator.runs.questions import Questions
from coordinator.runs.recall import Recall
from coordinator.runs.research.routing import RoutingPolicy
from coordinator.runs.research.runs import ResearchRequest, research_plan
from coordinator.runs.service import Runs, RunView
from coordinator.servicers.guard import current_principal
from coordinator.servicers.names import UserNames
from coordinator.servicers.timeline import timeline_message
from coordinator.store.models import QuestionRow
from coordinator.streams.followers import OpenStreams
from shared.errors import FailedPreconditionError, InvalidArgumentError
from shared.gen.deskfleet.v1 import runs_pb2, runs_pb2_grpc
from shared.states import RUN_KINDS, RUN_STATES
from shared.text import refuse_control
from shared.timestamps import to_timestamp

Context = grpc.aio.ServicerContext[Any, Any]


# Ids are ours (`run_<ulid>`): anything else is refused before it reaches a query, where a NUL
# is a store error on PostgreSQL rather than "not found".
ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


OWNER_NAME = ("owner", "owner_name")


def _run_id(value: str, field: str = "id") -> str:
    if not ID.fullmatch(value):
        raise InvalidArgumentError(
            f"{field}: a run id is required (see `deskfleet runs list`), not {value[:40]!r}"
        )
    return value


def run_message(view: RunView) -> runs_pb2.Run:
    run = view.run
    limits = run.limits
    msg = runs_pb2.Run(
        id=run.id,
        owner=run.owner_id,
        worker_id=str(run.spec.get("worker") or "") if run.kind == "desktop" else "",
        title=run.title,
        status=run.status,
        kind=run.kind,
        stop_reason=run.stop_reason,
        created_at=to_timestamp(run.created_at),
        updated_at=to_timestamp(run.updated_at),
        limits=runs_pb2.Limits(
            max_actions=limits["max_actions"],
            max_seconds=limits["max_seconds"],
            estimate_actions=run.estimate_actions,
            estimate_seconds=run.estimate_seconds,
            action_timeout_seconds=limits["action_timeout_seconds"],
        ),
        extensions=run.extensions,
        actions_total=run.actions_total,
        actions_succeeded=run.actions_succeeded,
        attempts_used=run.attempts_used,
        last_seq=run.last_seq,
        trace_id=run.trace_id,
        guidance_queued=view.guidance_queued,
        parent=run.parent_id or "",
        root=run.root_id or run.id,
        children=[runs_pb2.RunChild(id=c.id, kind=c.kind, status=c.status) for c in view.children],
        children_total=view.children_total,
        execution=run.execution,
        guidance=[
            runs_pb2.GuidanceInfo(
                id=m.id,
                message_id=m.message_id or m.id,
                status=m.status,
                delivered_to=m.delivered_to,
                author=m.author_id,
                created_at=to_timestamp(m.created_at),
                execution=m.execution,
                text=m.text[: guidance.PREVIEW],
            )
            for m in view.guidance
        ],
    )
    msg.questions.extend(question_message(q) for q in view.questions)
    if run.waiting_code:
        msg.waiting.CopyFrom(
            runs_pb2.WaitingReason(code=run.waiting_code, detail=run.waiting_detail)
        )
    if view.timeline is not None:
        msg.timeline.CopyFrom(timeline_message(view.timeline))
    for a in view.actions:
        msg.actions.append(
            runs_pb2.ActionInfo(
                id=a.id,
                index=a.idx,
                kind=a.kind,
                intent=a.intent,
                fingerprint=a.fingerprint,
                idempotent=a.idempotent,
                status=a.status,
                worker_id=a.worker_id,
                attempt_id=a.attempt_id,
                epoch=a.epoch,
                attempts=a.attempts,
                dispatched_at=to_timestamp(a.dispatched_at),
                finished_at=to_timestamp(a.finished_at),
                error=a.error,
                receipt_id=a.receipt_id,
                receipt_traceparent=view.receipt_traces.get(a.receipt_id, ""),
                postcondition_json=a.postcondition,
                settled_by="observed" if a.check_state == "observed" else "",
                artifacts=[
                    runs_pb2.ArtifactRef(
                        sha256=art.sha256, media_type=art.media_type, size=art.size, role=art.role
                    )
                    for art in view.artifacts
                    if art.action_id == a.id
                ],
            )
        )
    return msg


def refuse_unknown_fields(msg: Message, path: str = "") -> None:
    """INVALID_ARGUMENT naming the first field `msg` carries that this coordinator's schema
    does not define: protobuf keeps such fields aside and would let the plan run without
    them (a newer client's field meeting an older coordinator, or a hand-built request)."""
    unknown = UnknownFieldSet(msg)
    if len(unknown):
        where = f"{path}: field" if path else "field"
        raise InvalidArgumentError(
            f"{where} {unknown[0].field_number} is unknown to this coordinator"
            f" ({msg.DESCRIPTOR.name}): leave it out or upgrade the coordinator"
        )
    for field, value in msg.ListFields():
        kind = field.message_type
        if kind is None or kind.GetOptions().map_entry:
            continue  # a scalar, or a map of strings
        inner = f"{path}.{field.name}" if path else field.name
        if field.is_repeated:
            for i, item in enumerate(value):
                refuse_unknown_fields(item, f"{inner}[{i}]")
        else:
            refuse_unknown_fields(value, inner)


def _route(msg: runs_pb2.RouteConstraint) -> dict[str, Any]:
    route: dict[str, Any] = {}
    if msg.worker:
        route["worker"] = msg.worker
    if msg.labels:
        route["labels"] = dict(msg.labels)
    if msg.capability:
        route["capability"] = msg.capability
    return route


def question_message(q: QuestionRow) -> runs_pb2.Question:
    return runs_pb2.Question(
        id=q.id,
        run_id=q.run_id,
        call_id=q.call_id,
        text=q.text,
        required=q.required,
        status=q.status,
        asked_at=to_timestamp(q.asked_at),
        expires_at=to_timestamp(q.expires_at),
        answer=q.answer,
        answered_by=q.answered_by,
        answered_at=to_timestamp(q.answered_at),
        guidance_id=q.guidance_id,
    )


def _planned(actions: Iterable[runs_pb2.PlannedAction]) -> list[PlannedAction]:
    return parse_plan_actions(
        [
            RawAction(
                a.kind,
                a.args_json,
                a.idempotent,
                _route(a.route),
                a.intent,
                (
                    (a.postcondition.kind, a.postcondition.args_json, a.postcondition.expect_json)
                    if a.HasField("postcondition")
                    else None
                ),
            )
            for a in actions
        ]
    )


class RunServicer(runs_pb2_grpc.RunServiceServicer):
    def __init__(
        self,
        runs: Runs,
        routing: RoutingPolicy,
        goals: Goals | None = None,
        streams: OpenStreams | None = None,
        questions: Questions | None = None,
        *,
        names: UserNames,
        exports: RunExports | None = None,
    ) -> None:
        self._runs = runs
        self._names = names
        self._exports = exports
        self._questions = questions
        self._routing = routing
        self._goals = goals
        # WatchRun and WaitRun calls each principal holds open (30.7); 0: no limit.
        self._streams = streams or OpenStreams(DEFAULT_MAX_WATCH_STREAMS)

    async def _run(self, view: RunView) -> runs_pb2.Run:
        msg = run_message(view)
        await self._names.fill([msg], OWNER_NAME)
        return msg

    async def StartGoal(self, request: runs_pb2.GoalRequest, context: Context) -> runs_pb2.Run:
        if self._goals is None:
            raise FailedPreconditionError("this coordinator runs no goal loops")
        view = await self._goals.start(
            current_principal(),
            request.text,
            request.desktop,
            request.model or "scripted:",
            request.max_steps,
        )
        return await self._run(view)

    async def SubmitRun(self, request: runs_pb2.SubmitRunRequest, context: Context) -> runs_pb2.Run:
        refuse_unknown_fields(request)
        actions = _planned(request.actions)
        lim = request.limits
        plan = Plan(
            tuple(actions),
            request.title,
            lim.max_actions,
            lim.max_seconds,
            lim.estimate_actions,
            lim.estimate_seconds,
            lim.action_timeout_seconds,
        )
        wait = request.wait_seconds
        if not 0 <= wait <= 3600:  # NaN fails this too
            raise InvalidArgumentError("wait_seconds: between 0 and 3600")
        me = current_principal()
        view = await self._runs.submit(me, plan, wait=wait)
        return await self._run(view)

    async def ReviseRun(self, request: runs_pb2.ReviseRunRequest, context: Context) -> runs_pb2.Run:
        refuse_unknown_fields(request)
        plan = Plan(tuple(_planned(request.actions)))
        return await self._run(
            await self._runs.revise(current_principal(), _run_id(request.id), plan)
        )

    async def StartResearch(
        self, request: runs_pb2.ResearchRequest, context: Context
    ) -> runs_pb2.Run:
        me = current_principal()
        plan = research_plan(
            ResearchRequest(
                request.query,
                tuple(request.urls),
                request.search_url,
                request.max_sources or 5,
                thorough=request.thorough,
                max_pages=request.max_pages,
                max_bytes=request.max_bytes,
                search_format=request.search_format,
                result_selector=request.result_selector,
                link_selector=request.link_selector,
                snippet_selector=request.snippet_selector,
                search_profile=request.search_profile,
            ),
            self._routing.research_routes(me.id, me.name),
            self._routing.research_search(me.id, me.name),
        )
        return await self._run(await self._runs.submit(me, plan))

    async def GetRun(self, request: runs_pb2.RunRef, context: Context) -> runs_pb2.Run:
        view = await self._runs.get(current_principal(), _run_id(request.id), with_timeline=True)
        return await self._run(view)

    async def ListRuns(
        self, request: runs_pb2.ListRunsRequest, context: Context
    ) -> runs_pb2.ListRunsResponse:
        limit = request.limit or 50
        if not 0 < limit <= 1000:
            raise InvalidArgumentError("limit: between 1 and 1000")
        if request.status and request.status not in RUN_STATES:
            raise InvalidArgumentError(
                f"status: one of {', '.join(RUN_STATES)} (or empty for all),"
                f" not {request.status[:40]!r}"
            )
        if request.kind and request.kind not in RUN_KINDS:
            raise InvalidArgumentError(
                f"kind: one of {', '.join(RUN_KINDS)} (or empty for all), not {request.kind[:40]!r}"
            )
        refuse_control("owner", request.owner)  # a NUL is a store error on PostgreSQL
        if len(request.owner) > 200:
            raise InvalidArgumentError("owner: a user's name or id, at most 200 characters")
        if request.parent:
            _run_id(request.parent, "parent")
        views = await self._runs.list(
            current_principal(),
            request.status,
            limit,
            kind=request.kind,
            owner=request.owner,
            parent=request.parent,
        )
        found = [run_message(v) for v in views]
        await self._names.fill(found, OWNER_NAME)
        return runs_pb2.ListRunsResponse(runs=found)

    async def WaitRun(self, request: runs_pb2.WaitRunRequest, context: Context) -> runs_pb2.Run:
        timeout = request.timeout_seconds or 30.0
        if not 0 < timeout <= 3600:
            raise InvalidArgumentError("timeout_seconds: between 0 and 3600")
        me = current_principal()
        with self._streams.hold(me.id):
            view = await self._runs.wait(me, _run_id(request.id), timeout)
        return await self._run(view)

    async def CancelRun(self, request: runs_pb2.RunRef, context: Context) -> runs_pb2.Run:
        return await self._run(await self._runs.cancel(current_principal(), _run_id(request.id)))

    async def RetryRun(self, request: runs_pb2.RunRef, context: Context) -> runs_pb2.Run:
        return await self._run(await self._runs.retry(current_principal(), _run_id(request.id)))

    async def AbandonRun(self, request: runs_pb2.RunRef, context: Context) -> runs_pb2.Run:
        return await self._run(await self._runs.abandon(current_principal(), _run_id(request.id)))

    async def GuideRun(
        self, request: runs_pb2.GuideRunRequest, context: Context
    ) -> runs_pb2.GuideRunResponse:
        queued = await self._runs.guide(
            current_principal(),
            _run_id(request.id),
            request.text,
            message_id=request.message_id,
            expected_execution=request.expected_execution,
        )
        return runs_pb2.GuideRunResponse(
            guidance_id=queued.guidance_id,
            seq=queued.seq,
            queued=queued.queued,
            repeated_send=queued.repeated_send,
            message_id=queued.message_id,
            execution=queued.execution,
        )

    async def ListQuestions(
        self, request: runs_pb2.ListQuestionsRequest, context: Context
    ) -> runs_pb2.ListQuestionsResponse:
        found = await self._questioned().list(
            current_principal(),
            _run_id(request.run_id) if request.run_id else "",
            include_closed=request.include_closed,
            limit=request.limit,
        )
        return runs_pb2.ListQuestionsResponse(questions=[question_message(q) for q in found])

    async def AnswerQuestion(
        self, request: runs_pb2.AnswerQuestionRequest, context: Context
    ) -> runs_pb2.Question:
        question = await self._questioned().answer(
            current_principal(), questions.check_question_id(request.id), request.text
        )
        return question_message(question)

    def _questioned(self) -> Questions:
        if self._questions is None:
            raise FailedPreconditionError("this coordinator runs no goals: it has no questions")
        return self._questions

    async def WatchRun(self, request: runs_pb2.WatchRunRequest, context: Context) -> None:
        if request.after_seq < 0:
            raise InvalidArgumentError("after_seq: must not be negative")
        me = current_principal()
        run_id = _run_id(request.id)
        # Closed here, not when collected: the run's feed loses this follower at once.
        watch = contextlib.aclosing(self._runs.watch(me, run_id, request.after_seq, request.follow))
        with self._streams.hold(me.id):
            async with watch as events:
                async for event in events:
                    await context.write(
                        runs_pb2.JournalEvent(
                            run_id=event.run_id,
                            seq=event.seq,
                            kind=event.kind,
                            at=to_timestamp(event.at),
                            data_json=event.data,
                            hash=event.hash,
                            prev_hash=event.prev_hash,
                            trace_id=event.trace_id,
                        )
                    )

    async def ExportRun(self, request: runs_pb2.ExportRunRequest, context: Context) -> None:
        if self._exports is None:
            raise FailedPreconditionError("this coordinator does not export runs")
        bundle_of = self._exports.bundle(
            current_principal(), _run_id(request.id), frames_only=request.frames_only
        )
        async with bundle_of as bundle:
            first = True
            sent = 0
            async for data in bundle.chunks():
                sent += len(data)
                chunk = runs_pb2.ExportChunk(data=data)
                if first:
                    chunk.total_bytes, chunk.fingerprint = bundle.size, bundle.fingerprint
                    first = False
                if sent == bundle.size:
                    chunk.sha256 = bundle.sha256
                await context.write(chunk)


class JournalServicer(runs_pb2_grpc.JournalServiceServicer):
    def __init__(self, runs: Runs, recall: Recall) -> None:
        self._runs = runs
        self._recall = recall

    async def ReadEntry(
        self, request: runs_pb2.ReadEntryRequest, context: Context
    ) -> runs_pb2.ReadEntryResponse:
        page = await self._recall.read(
            current_principal(),
            _run_id(request.run_id, "run_id"),
            request.seq,
            request.offset,
            request.limit,
        )
        return runs_pb2.ReadEntryResponse(
            run_id=page.run_id,
            seq=page.seq,
            kind=page.kind,
            text=page.text,
            offset=page.offset,
            next_offset=page.next_offset,
            total_length=page.total_length,
            archived=page.archived,
        )

    async def SearchJournal(
        self, request: runs_pb2.SearchJournalRequest, context: Context
    ) -> runs_pb2.SearchJournalResponse:
        page = await self._recall.search(
            current_principal(),
            _run_id(request.run_id, "run_id"),
            request.text,
            request.cursor,
            request.limit,
        )
        return runs_pb2.SearchJournalResponse(
            matches=[
                runs_pb2.SearchMatch(seq=m.seq, kind=m.kind, offset=m.offset, excerpt=m.excerpt)
                for m in page.matches
            ],
            cursor=page.cursor,
            has_more=page.has_more,
            match_limit_reached=page.match_limit_reached,
        )

    async def VerifyJournal(
        self, request: runs_pb2.RunRef, context: Context
    ) -> runs_pb2.VerifyJournalResponse:
        result = await self._runs.verify(current_principal(), _run_id(request.id))
        return runs_pb2.VerifyJournalResponse(
            ok=not result.problems,
            events_checked=result.events,
            receipts_checked=result.receipts,
            problems=list(result.problems),
        )
