"""The run timeline (`coordinator.runs.timeline`) as the RunService returns it."""

from __future__ import annotations

from coordinator.runs.timeline import Note, Timeline
from shared.gen.deskfleet.v1 import runs_pb2
from shared.timestamps import to_timestamp


def _event(note: Note) -> runs_pb2.TimelineEvent:
    return runs_pb2.TimelineEvent(
        at=to_timestamp(note.at),
        kind=note.kind,
        detail=note.detail,
        action_id=note.action_id,
        seq=note.seq,
    )


def timeline_message(t: Timeline) -> runs_pb2.RunTimeline:
    return runs_pb2.RunTimeline(
        states=[
            runs_pb2.TimelineState(
                state=st.state,
                entered_at=to_timestamp(st.entered_at),
                left_at=to_timestamp(st.left_at),
                seconds=st.seconds,
                reason=st.reason,
                cause=st.cause,
                seq=st.seq,
            )
            for st in t.states
        ],
        actions=[
            runs_pb2.TimelineAttempt(
                id=a.action_id,
                index=a.index,
                kind=a.kind,
                worker=a.worker,
                attempt=a.attempt,
                attempt_id=a.attempt_id,
                status=a.status,
                dispatched_at=to_timestamp(a.dispatched_at),
                started_at=to_timestamp(a.started_at),
                finished_at=to_timestamp(a.finished_at),
                seconds=a.seconds,
                error=a.error,
                receipt_id=a.receipt_id,
            )
            for a in t.attempts
        ],
        retries=[
            runs_pb2.TimelineRetry(
                action_id=r.action_id,
                index=r.index,
                attempt=r.attempt,
                cause=r.cause,
                at=to_timestamp(r.at),
                kind=r.kind,
            )
            for r in t.retries
        ],
        recoveries=[_event(n) for n in t.recoveries],
        events=[_event(n) for n in t.notes],
        stop_reason=t.stop_reason,
        wall_seconds=t.wall_seconds,
        submitted_at=to_timestamp(t.submitted_at),
        ended_at=to_timestamp(t.ended_at),
        live=t.live,
        as_of=to_timestamp(t.as_of),
    )
