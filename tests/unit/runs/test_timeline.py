"""The run timeline: `coordinator.runs.timeline` on synthetic journals. A real run's timeline
(coordinator, worker, a failing-then-retried action) is tests/integration/runs/test_timeline.py."""

from __future__ import annotations

import math
from typing import Any

from coordinator.runs.timeline import JournalEntry, Timeline, build

T0 = 1_800_000_000.0


class Journal:
    """Synthetic events with the data the coordinator writes for each kind."""

    def __init__(self) -> None:
        self.events: list[JournalEntry] = []

    def add(self, event: str, at: float, **data: Any) -> Journal:
        self.events.append(JournalEntry(len(self.events) + 1, event, T0 + at, data))
        return self

    def state(
        self, at: float, status: str, *, stop: str = "", code: str = "", cause: str = ""
    ) -> Journal:
        return self.add(
            "run.state",
            at,
            status=status,
            stop_reason=stop,
            waiting={"code": code, "detail": f"detail of {code}" if code else ""},
            cause=cause,
        )

    def dispatched(self, at: float, action: str, attempt: int, worker: str = "wkr_1") -> Journal:
        return self.add(
            "action.dispatched",
            at,
            action=action,
            index=int(action.rsplit("_", 1)[1]),
            kind="diag.sleep",
            attempt=f"att_{action}_{attempt}",
            epoch=attempt,
            worker=worker,
            attempt_number=attempt,
        )

    def started(self, at: float, action: str, attempt: int, worker: str = "wkr_1") -> Journal:
        return self.add(
            "action.started", at, action=action, attempt=f"att_{action}_{attempt}", worker=worker
        )

    def receipt(
        self, at: float, action: str, attempt: int, status: str, error: str = ""
    ) -> Journal:
        return self.add(
            "receipt",
            at,
            action=action,
            attempt=f"att_{action}_{attempt}",
            epoch=attempt,
            status=status,
            receipt=f"rcp_{action}_{attempt}",
            error=error,
        )


def _sum(t: Timeline) -> float:
    return math.fsum(s.seconds for s in t.states)


def test_a_finished_run_with_a_retry_adds_up_and_names_each_attempt() -> None:
    j = (
        Journal()
        .add("run.submitted", 0.0)
        .dispatched(0.01, "act_0", 1)
        .started(0.02, "act_0", 1)
        .receipt(1.0, "act_0", 1, "failed", "boom")
        .add("action.retry", 1.0, action="act_0", cause="boom", attempts=1)
        .dispatched(1.0, "act_0", 2, worker="wkr_2")
        .receipt(3.5, "act_0", 2, "succeeded")
        .state(3.5, "SUCCEEDED", stop="completed: every action succeeded")
    )
    t = build(j.events, now=T0 + 100)
    assert [(s.state, s.seconds) for s in t.states] == [("RUNNING", 3.5), ("SUCCEEDED", 0.0)]
    assert t.states[0].left_at == t.states[1].entered_at == T0 + 3.5
    assert t.states[1].left_at is None
    assert not t.live and t.ended_at == T0 + 3.5 and t.wall_seconds == 3.5
    assert _sum(t) == t.wall_seconds
    assert t.stop_reason == "completed: every action succeeded"
    assert [(a.action_id, a.attempt, a.worker, a.status, a.error) for a in t.attempts] == [
        ("act_0", 1, "wkr_1", "FAILED", "boom"),
        ("act_0", 2, "wkr_2", "SUCCEEDED", ""),
    ]
    assert [round(a.seconds, 6) for a in t.attempts] == [0.99, 2.5]
    assert t.attempts[0].started_at == T0 + 0.02 and t.attempts[1].started_at is None
    assert [(r.action_id, r.attempt, r.cause, r.kind) for r in t.retries] == [
        ("act_0", 1, "boom", "retry")
    ]


def test_a_live_run_is_open_ended_up_to_now() -> None:
    j = (
        Journal()
        .add("run.submitted", 0.0)
        .dispatched(0.0, "act_0", 1)
        .receipt(2.0, "act_0", 1, "succeeded")
        .state(2.0, "WAITING_FOR_ENVIRONMENT", code="no_eligible_worker", cause="no route")
    )
    t = build(j.events, now=T0 + 7.25)
    assert t.live and t.ended_at is None and t.stop_reason == ""
    assert [(s.state, s.seconds) for s in t.states] == [
        ("RUNNING", 2.0),
        ("WAITING_FOR_ENVIRONMENT", 5.25),
    ]
    assert t.states[-1].reason == "no_eligible_worker: detail of no_eligible_worker"
    assert t.states[-1].cause == "no route" and t.states[-1].left_at is None
    assert t.wall_seconds == 7.25 == _sum(t)
    # An attempt still in flight runs up to now as well.
    live = build(Journal().add("run.submitted", 0).dispatched(1, "act_0", 1).events, T0 + 4)
    assert (live.attempts[0].status, live.attempts[0].seconds) == ("DISPATCHED", 3.0)


def test_a_run_never_dispatched_waits_from_its_submission() -> None:
    # The submitting transaction found no worker: the run was created waiting, never RUNNING.
    j = (
        Journal()
        .add("run.submitted", 0.0)
        .state(0.001, "WAITING_FOR_ENVIRONMENT", code="no_eligible_worker", cause="no route")
    )
    t = build(j.events, now=T0 + 30)
    assert [(s.state, s.entered_at) for s in t.states] == [("WAITING_FOR_ENVIRONMENT", T0)]
    assert t.attempts == () and t.wall_seconds == 30 == _sum(t)
    # Cancelled later: the wait ends there, and the stop reason is the cancel's.
    j.state(12.0, "CANCELLED", stop="cancelled by admin")
    t = build(j.events, now=T0 + 30)
    assert [(s.state, s.seconds) for s in t.states] == [
        ("WAITING_FOR_ENVIRONMENT", 12.0),
        ("CANCELLED", 0.0),
    ]
    assert (t.stop_reason, t.wall_seconds, t.live) == ("cancelled by admin", 12.0, False)


def test_a_cancel_moments_after_submission_is_not_taken_for_the_initial_state() -> None:
    j = Journal().add("run.submitted", 0.0).state(1.0, "CANCELLED", stop="cancelled by admin")
    t = build(j.events, now=T0 + 5)
    assert [(s.state, s.seconds) for s in t.states] == [("RUNNING", 1.0), ("CANCELLED", 0.0)]


def test_a_cancelled_run_closes_its_attempt_with_the_worker_receipt() -> None:
    j = (
        Journal()
        .add("run.submitted", 0.0)
        .dispatched(0.0, "act_0", 1)
        .started(0.1, "act_0", 1)
        .state(2.0, "CANCELLED", stop="cancelled by admin")
        .receipt(2.2, "act_0", 1, "cancelled", "cancelled while sleeping")
    )
    t = build(j.events, now=T0 + 9)
    assert (t.stop_reason, t.wall_seconds) == ("cancelled by admin", 2.0)
    assert [(a.status, round(a.seconds, 6)) for a in t.attempts] == [("CANCELLED", 2.2)]
    # Had no receipt come back, the attempt would be open up to the stop.
    t = build(j.events[:-1], now=T0 + 9)
    assert [(a.status, a.seconds) for a in t.attempts] == [("STARTED", 2.0)]


def test_a_hand_back_and_a_retry_by_a_person_are_recoveries() -> None:
    j = (
        Journal()
        .add("run.submitted", 0.0)
        .dispatched(0.0, "act_0", 1)
        .add("action.unknown", 1.0, action="act_0", attempt="att_act_0_1", epoch=1, cause="lost")
        .state(
            1.0,
            "HAND_BACK_TO_HUMAN",
            stop="unknown_outcome: not idempotent",
            code="unknown_outcome",
        )
        .add("run.retry", 61.0, by="usr_admin")
        .state(61.0, "RUNNING", cause="retry by admin")
        .dispatched(61.0, "act_0", 2)
        .receipt(62.0, "act_0", 2, "succeeded")
        .state(62.0, "SUCCEEDED", stop="completed: every action succeeded")
    )
    t = build(j.events, now=T0 + 100)
    assert [(s.state, s.seconds) for s in t.states] == [
        ("RUNNING", 1.0),
        ("HAND_BACK_TO_HUMAN", 60.0),
        ("RUNNING", 1.0),
        ("SUCCEEDED", 0.0),
    ]
    assert [r.kind for r in t.recoveries] == ["action.unknown", "hand_back", "run.retry"]
    assert t.recoveries[0].detail == "lost" and t.recoveries[2].detail == "retry by usr_admin"
    assert [a.status for a in t.attempts] == ["UNKNOWN", "SUCCEEDED"]
    assert t.wall_seconds == 62.0 == _sum(t)


def test_approvals_and_budgets_are_noted_and_a_desktop_run_starts_waiting() -> None:
    j = (
        Journal()
        .add("run.submitted", 0.0)
        .add("approval.requested", 0.0, approval="apr_1", by="usr_1", reason="please")
        .state(0.0, "WAITING_FOR_AUTHORITY", code="approval_pending")
        .add("approval.granted", 4.0, approval="apr_1", by="usr_2", reason="")
        .state(4.0, "RUNNING")
        .add(
            "budget.extended",
            5.0,
            extension=1,
            estimate_actions=4,
            estimate_seconds=20.0,
            succeeded=2,
        )
    )
    t = build(j.events, now=T0 + 6)
    assert [(s.state, s.seconds) for s in t.states] == [
        ("WAITING_FOR_AUTHORITY", 4.0),
        ("RUNNING", 2.0),
    ]
    assert [(n.kind, n.detail) for n in t.notes] == [
        ("approval.requested", "approval apr_1 by usr_1: please"),
        ("approval.granted", "approval apr_1 by usr_2"),
        ("budget.extended", "extension 1: estimate now 4 attempts / 20 s"),
    ]


def test_clocks_that_step_back_never_make_negative_time() -> None:
    j = (
        Journal()
        .add("run.submitted", 0.0)
        .dispatched(5.0, "act_0", 1)
        .state(4.0, "FAILED", stop="act_0 failed")  # written on a replica whose clock is behind
    )
    t = build(j.events, now=T0 + 9)
    assert [(s.state, s.seconds) for s in t.states] == [("RUNNING", 5.0), ("FAILED", 0.0)]
    assert all(s.seconds >= 0 for s in t.states) and t.wall_seconds == 5.0


def test_an_empty_journal_is_an_empty_timeline() -> None:
    t = build([], now=T0)
    assert (t.states, t.wall_seconds, t.submitted_at) == ((), 0.0, None)


# ------------------------------------------------------------------------- a real run


def test_a_goal_shows_its_children_its_delegation_and_its_recovery() -> None:
    j = (
        Journal()
        .add("run.submitted", 0.0)
        .add("run.child", 0.5, child="run_d", kind="desktop", origin="toolu_1")
        .state(0.5, "DELEGATED", code="delegated")
        .state(4.0, "RUNNING")
        .state(9.0, "RECOVERING", cause="the coordinator restarted")
        .add("goal.tool_result", 9.5, call="toolu_3", recovered="act_7", text="{}")
        .state(10.0, "RUNNING", cause="the goal was rebuilt from its journal")
    )
    t = build(j.events, now=T0 + 12)
    assert [(s.state, s.seconds) for s in t.states] == [
        ("RUNNING", 0.5),
        ("DELEGATED", 3.5),
        ("RUNNING", 5.0),
        ("RECOVERING", 1.0),
        ("RUNNING", 2.0),
    ]
    assert _sum(t) == t.wall_seconds == 12
    assert [n.detail for n in t.notes] == ["started desktop run run_d for call toolu_1"]
    [recovered] = t.recoveries
    assert "toolu_3" in recovered.detail and "act_7" in recovered.detail
