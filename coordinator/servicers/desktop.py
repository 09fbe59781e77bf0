"""DesktopService, ApprovalService and KillSwitchService: adapters over `desktop` and
`killswitch`."""

from __future__ import annotations

import contextlib
from typing import Any

import grpc

from coordinator.agent.advice import Discussions
from coordinator.runs.desktop import scope
from coordinator.runs.desktop.peeks import Peeks
from coordinator.runs.desktop.runs import ActResult, Desktop
from coordinator.runs.desktop.scope import Scope
from coordinator.runs.desktop.takeovers import MAX_EVENTS, HumanEvent, Takeovers
from coordinator.runs.desktop.watches import Watches
from coordinator.runs.killswitch import KillSwitches, KillView
from coordinator.security import audit
from coordinator.servicers.guard import current_principal
from coordinator.servicers.names import UserNames
from coordinator.servicers.runs import ID, OWNER_NAME, run_message
from coordinator.store.models import (
    ApprovalNoteRow,
    ApprovalRow,
    RecordingFrameRow,
    TakeoverRow,
)
from shared.desktop_scope import Region
from shared.errors import FailedPreconditionError, InvalidArgumentError
from shared.gen.deskfleet.v1 import desktop_pb2, desktop_pb2_grpc, runs_pb2
from shared.receipts import encode_result
from shared.states import APPROVAL_STATES
from shared.timestamps import to_timestamp

Context = grpc.aio.ServicerContext[Any, Any]


def _id(value: str, what: str) -> str:
    if not ID.fullmatch(value):
        raise InvalidArgumentError(f"{what}: an id is required, not {value[:40]!r}")
    return value


def _worker_ref(value: str) -> str:
    """A worker's id or name, resolved by the domain call (`store.workers.resolve`)."""
    if not value.strip():
        raise InvalidArgumentError("worker: a worker's id or name is required")
    if len(value) > 200:
        raise InvalidArgumentError(
            f"worker: a worker's id or name is at most 200 characters, not {len(value)}"
        )
    return value


def _region(msg: desktop_pb2.DesktopScope) -> Region | None:
    if not msg.HasField("region"):
        return None
    r = msg.region
    return Region(r.x, r.y, r.width, r.height)


def _scope_message(data: dict[str, Any]) -> desktop_pb2.DesktopScope:
    if not data:
        return desktop_pb2.DesktopScope()
    s = Scope.from_json(data)
    msg = desktop_pb2.DesktopScope(
        actions=list(s.actions),
        displays=list(s.displays),
        ttl_seconds=s.ttl,
        max_actions=s.max_actions,
    )
    if s.region is not None:
        msg.region.CopyFrom(
            desktop_pb2.Region(
                x=s.region.x, y=s.region.y, width=s.region.width, height=s.region.height
            )
        )
    return msg


APPROVAL_NAMES = (("owner", "owner_name"), ("answered_by", "answered_by_name"))
KILL_NAMES = (("engaged_by", "engaged_by_name"), ("released_by", "released_by_name"))


def approval_message(row: ApprovalRow) -> desktop_pb2.Approval:
    return desktop_pb2.Approval(
        id=row.id,
        run_id=row.run_id,
        owner=row.owner_id,
        kind=row.kind,
        worker_id=row.worker_id,
        status=row.status,
        requested=_scope_message(row.requested),
        granted=_scope_message(row.granted),
        reason=row.reason,
        answer=row.answer,
        answered_by=row.answered_by,
        requested_at=to_timestamp(row.requested_at),
        answered_at=to_timestamp(row.answered_at),
        expires_at=to_timestamp(row.expires_at),
        actions_used=row.actions_used,
    )


def _act_message(result: ActResult) -> desktop_pb2.DesktopActResponse:
    action, receipt = result.action, result.receipt or {}
    status = str(receipt.get("status") or action.status.lower())
    error = str(receipt.get("error") or action.error)
    code = str(receipt.get("code") or "")
    if not code and status in ("refused", "failed", "cancelled") and ":" in error:
        head = error.split(":", 1)[0]
        code = head if head.isidentifier() and head.islower() else ""
    return desktop_pb2.DesktopActResponse(
        run_id=action.run_id,
        action_id=action.id,
        status=status,
        code=code,
        error=error,
        result_json=encode_result(receipt.get("result")) if "result" in receipt else "",
        receipt_id=action.receipt_id,
        artifacts=[
            desktop_pb2.ArtifactInfo(
                sha256=a.sha256,
                media_type=a.media_type,
                size=a.size,
                width=a.width,
                height=a.height,
                role=role,
            )
            for role, a in result.artifacts
        ],
    )


class DesktopServicer(desktop_pb2_grpc.DesktopServiceServicer):
    def __init__(
        self,
        desktop: Desktop,
        names: UserNames,
        watches: Watches | None = None,
        takeovers: Takeovers | None = None,
    ) -> None:
        self._desktop = desktop
        self._names = names
        self._watches = watches
        self._takeovers = takeovers

    def _live(self) -> tuple[Watches, Takeovers]:
        if self._watches is None or self._takeovers is None:
            raise FailedPreconditionError("this coordinator serves no live view")
        return self._watches, self._takeovers

    async def WatchScreen(self, request: desktop_pb2.WatchScreenRequest, context: Context) -> None:
        watches, _ = self._live()
        if request.worker:
            _worker_ref(request.worker)
        if request.run:
            _id(request.run, "run")
        if not -1 <= request.display < 16:
            raise InvalidArgumentError("display: a display index in 0..15")
        frames = watches.watch(
            current_principal(),
            worker=request.worker,
            run=request.run,
            display=request.display if request.display else -1,
            max_fps=request.max_fps,
            quality=request.quality,
            client=request.client,
        )
        async with contextlib.aclosing(frames) as feed:
            async for frame in feed:
                await context.write(
                    desktop_pb2.LiveFrame(
                        seq=frame.seq,
                        media_type=frame.media_type,
                        data=frame.data,
                        width=frame.width,
                        height=frame.height,
                        captured_at=to_timestamp(frame.captured_at) if frame.seq else None,
                        worker_id=frame.worker_id,
                        display=frame.display,
                    )
                )

    async def TakeOver(
        self, request: desktop_pb2.TakeOverRequest, context: Context
    ) -> desktop_pb2.Takeover:
        _, takeovers = self._live()
        if request.worker:
            _worker_ref(request.worker)
        if request.run:
            _id(request.run, "run")
        row = await takeovers.take_over(
            current_principal(), run=request.run, worker=request.worker, reason=request.reason
        )
        return takeover_message(row)

    async def SendInput(
        self, request: desktop_pb2.SendInputRequest, context: Context
    ) -> desktop_pb2.SendInputResponse:
        _, takeovers = self._live()
        events = [
            HumanEvent(e.kind, e.x, e.y, e.button, e.dx, e.dy, e.key, e.text)
            for e in request.events[: MAX_EVENTS + 1]
        ]
        applied = await takeovers.send_input(
            current_principal(), _id(request.takeover, "takeover"), events
        )
        return desktop_pb2.SendInputResponse(applied=applied)

    async def HandBack(
        self, request: desktop_pb2.HandBackRequest, context: Context
    ) -> desktop_pb2.Takeover:
        _, takeovers = self._live()
        if request.worker:
            _worker_ref(request.worker)
        if request.takeover:
            _id(request.takeover, "takeover")
        row = await takeovers.hand_back(
            current_principal(),
            takeover=request.takeover,
            worker=request.worker,
            note=request.note,
        )
        return takeover_message(row)

    async def _run(self, msg: runs_pb2.Run) -> runs_pb2.Run:
        await self._names.fill([msg], OWNER_NAME)
        return msg

    async def RequestDesktop(
        self, request: desktop_pb2.RequestDesktopRequest, context: Context
    ) -> runs_pb2.Run:
        s = request.scope
        asked = scope.requested(
            list(s.actions), list(s.displays), _region(s), s.ttl_seconds, s.max_actions
        )
        view = await self._desktop.request(
            current_principal(), _worker_ref(request.worker), asked, request.title, request.reason
        )
        return await self._run(run_message(view))

    async def Act(
        self, request: desktop_pb2.DesktopActRequest, context: Context
    ) -> desktop_pb2.DesktopActResponse:
        if not 0 <= request.timeout_seconds <= 600:
            raise InvalidArgumentError("timeout_seconds: between 0 and 600")
        result = await self._desktop.act(
            current_principal(),
            _id(request.run_id, "run_id"),
            request.action,
            request.args_json,
            request.timeout_seconds,
        )
        return _act_message(result)

    async def Continue(self, request: runs_pb2.RunRef, context: Context) -> runs_pb2.Run:
        view = await self._desktop.resume(current_principal(), _id(request.id, "id"))
        return await self._run(run_message(view))

    async def GetArtifact(
        self, request: desktop_pb2.GetArtifactRequest, context: Context
    ) -> desktop_pb2.Artifact:
        row = await self._desktop.artifact(
            current_principal(), _id(request.run_id, "run_id"), _id(request.sha256, "sha256")
        )
        return desktop_pb2.Artifact(
            info=desktop_pb2.ArtifactInfo(
                sha256=row.sha256,
                media_type=row.media_type,
                size=row.size,
                width=row.width,
                height=row.height,
            ),
            data=row.data,
        )

    async def ListRecording(
        self, request: desktop_pb2.ListRecordingRequest, context: Context
    ) -> desktop_pb2.RecordingPage:
        page = await self._desktop.recording(
            current_principal(), _id(request.run_id, "run_id"), request.after_seq, request.limit
        )
        return desktop_pb2.RecordingPage(
            frames=[recorded_frame(row) for row in page.frames],
            next_seq=page.next_seq,
            total=page.total,
        )

    async def GetRecordingFrame(
        self, request: desktop_pb2.GetRecordingFrameRequest, context: Context
    ) -> desktop_pb2.RecordedFrameData:
        if request.seq < 1:
            raise InvalidArgumentError("seq: a frame's number, 1 or more")
        row = await self._desktop.recording_frame(
            current_principal(), _id(request.run_id, "run_id"), request.seq
        )
        return desktop_pb2.RecordedFrameData(frame=recorded_frame(row), data=row.data)

    async def SetSecret(
        self, request: desktop_pb2.SetSecretRequest, context: Context
    ) -> desktop_pb2.SecretInfo:
        row = await self._desktop.set_secret(
            current_principal(), request.owner, request.name, request.value
        )
        return desktop_pb2.SecretInfo(
            name=row.name,
            owner=row.owner_id,
            updated_at=to_timestamp(row.updated_at),
            updated_by=row.updated_by,
        )


def recorded_frame(row: RecordingFrameRow) -> desktop_pb2.RecordedFrame:
    return desktop_pb2.RecordedFrame(
        seq=row.seq,
        captured_at=to_timestamp(row.captured_at),
        held_by=row.held_by,
        width=row.width,
        height=row.height,
        size=row.size,
        sha256=row.sha256,
        media_type=row.media_type,
    )


def takeover_message(row: TakeoverRow) -> desktop_pb2.Takeover:
    return desktop_pb2.Takeover(
        id=row.id,
        worker_id=row.worker_id,
        run_id=row.run_id,
        display=row.display,
        by=row.by_name,
        started_at=to_timestamp(row.started_at),
        ended_at=to_timestamp(row.ended_at) if row.ended_at else None,
        events=row.events,
        status=row.status,
        reason=row.reason,
    )


def note_message(note: ApprovalNoteRow) -> desktop_pb2.ApprovalNote:
    return desktop_pb2.ApprovalNote(
        id=note.id, kind=note.kind, author=note.author, text=note.text, at=to_timestamp(note.at)
    )


class ApprovalServicer(desktop_pb2_grpc.ApprovalServiceServicer):
    def __init__(
        self,
        desktop: Desktop,
        peeks: Peeks,
        discussions: Discussions | None = None,
        *,
        names: UserNames,
    ) -> None:
        self._desktop = desktop
        self._peeks = peeks
        self._discussions = discussions
        self._names = names

    async def _approval(self, row: ApprovalRow) -> desktop_pb2.Approval:
        msg = approval_message(row)
        await self._names.fill([msg], *APPROVAL_NAMES)
        return msg

    def _discussed(self) -> Discussions:
        if self._discussions is None:
            raise FailedPreconditionError("this coordinator keeps no approval discussions")
        return self._discussions

    async def DiscussApproval(
        self, request: desktop_pb2.DiscussApprovalRequest, context: Context
    ) -> desktop_pb2.ApprovalDiscussion:
        found = await self._discussed().discuss(
            current_principal(), _id(request.id, "id"), request.text
        )
        return desktop_pb2.ApprovalDiscussion(
            approval=await self._approval(found.approval),
            goal_request=found.goal_request,
            notes=[note_message(n) for n in found.notes],
        )

    async def AdviseApproval(
        self, request: desktop_pb2.AdviseApprovalRequest, context: Context
    ) -> desktop_pb2.ApprovalNote:
        if len(request.model) > 300:
            raise InvalidArgumentError("model: PROVIDER:MODEL, at most 300 characters")
        note = await self._discussed().advise(
            current_principal(), _id(request.id, "id"), request.model
        )
        return note_message(note)

    async def ListApprovals(
        self, request: desktop_pb2.ListApprovalsRequest, context: Context
    ) -> desktop_pb2.ListApprovalsResponse:
        if not 0 <= request.limit <= 1000:
            raise InvalidArgumentError("limit: between 0 and 1000")
        if (request.status and not request.status.isalpha()) or len(request.status) > 20:
            raise InvalidArgumentError(
                f"status: an approval status ({', '.join(APPROVAL_STATES)}),"
                f" not {request.status[:40]!r}"
            )
        rows = await self._desktop.approvals(
            current_principal(), request.status, request.limit or 50
        )
        found = [approval_message(r) for r in rows]
        await self._names.fill(found, *APPROVAL_NAMES)
        return desktop_pb2.ListApprovalsResponse(approvals=found)

    async def Approve(
        self, request: desktop_pb2.ApproveRequest, context: Context
    ) -> desktop_pb2.Approval:
        s = request.scope
        grant = (list(s.actions), list(s.displays), _region(s), s.ttl_seconds, s.max_actions)
        row = await self._desktop.answer(
            current_principal(), _id(request.id, "id"), grant=grant, reason=request.reason
        )
        return await self._approval(row)

    async def Deny(
        self, request: desktop_pb2.DenyRequest, context: Context
    ) -> desktop_pb2.Approval:
        row = await self._desktop.answer(
            current_principal(), _id(request.id, "id"), grant=None, reason=request.reason
        )
        return await self._approval(row)

    async def GuideApproval(
        self, request: desktop_pb2.GuideApprovalRequest, context: Context
    ) -> desktop_pb2.Approval:
        row = await self._desktop.guide_approval(
            current_principal(), _id(request.id, "id"), request.text
        )
        return await self._approval(row)

    async def PeekScreen(
        self, request: desktop_pb2.PeekScreenRequest, context: Context
    ) -> desktop_pb2.ScreenPeek:
        peek = await self._peeks.peek(current_principal(), _id(request.id, "id"))
        return desktop_pb2.ScreenPeek(
            approval_id=peek.approval_id,
            worker_id=peek.worker_id,
            display=peek.display,
            media_type=peek.media_type,
            data=peek.data,
            width=peek.width,
            height=peek.height,
            taken_at=to_timestamp(peek.taken_at),
        )


def kill_message(view: KillView) -> desktop_pb2.KillSwitch:
    row = view.row
    return desktop_pb2.KillSwitch(
        id=row.id,
        scope=row.scope,
        target=row.target,
        reason=row.reason,
        engaged_by=view.engaged_by,
        engaged_at=to_timestamp(row.engaged_at),
        engaged=row.released_at is None,
        released_by=view.released_by,
        released_at=to_timestamp(row.released_at),
        acknowledged=list(view.acknowledged),
        unacknowledged=list(view.unacknowledged),
        acknowledged_count=view.acknowledged_count,
        unacknowledged_count=view.unacknowledged_count,
    )


class KillSwitchServicer(desktop_pb2_grpc.KillSwitchServiceServicer):
    def __init__(self, kills: KillSwitches, names: UserNames) -> None:
        self._kills = kills
        self._names = names

    async def _switches(self, views: list[KillView]) -> list[desktop_pb2.KillSwitch]:
        found = [kill_message(v) for v in views]
        await self._names.fill(found, *KILL_NAMES)
        return found

    async def Engage(
        self, request: desktop_pb2.EngageKillRequest, context: Context
    ) -> desktop_pb2.KillSwitch:
        view = await self._kills.engage(
            current_principal(),
            audit.peer(),
            worker_id=request.worker,
            run_id=request.run,
            reason=request.reason,
        )
        return (await self._switches([view]))[0]

    async def Release(
        self, request: desktop_pb2.ReleaseKillRequest, context: Context
    ) -> desktop_pb2.KillStatusResponse:
        views = await self._kills.release(
            current_principal(),
            kill_id=request.id,
            worker_id=request.worker,
            run_id=request.run,
            fleet=request.fleet,
            reason=request.reason,
        )
        return desktop_pb2.KillStatusResponse(switches=await self._switches(views))

    async def Status(
        self, request: desktop_pb2.KillStatusRequest, context: Context
    ) -> desktop_pb2.KillStatusResponse:
        who = current_principal()
        views = await self._kills.status(who, request.include_released)
        local_count, local = await self._kills.local(who)
        return desktop_pb2.KillStatusResponse(
            switches=await self._switches(views),
            local=[
                desktop_pb2.LocalKillSwitch(
                    worker_id=r.worker_id, worker_name=r.worker_name, state=r.state.to_proto()
                )
                for r in local
            ],
            local_count=local_count,
        )
