"""Counts the metrics endpoint reads at scrape time: cheap aggregate queries, one snapshot."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from coordinator.store.models import ActionRow, ApprovalRow, JournalRow, KillSwitchRow, RunRow
from shared.states import ACTIVE, IN_FLIGHT, ActionState, RunState

WORK_UNIT_STATES = ("ready", "running", "blocked")


def _unit_state(run_status: str, action_status: str | None) -> str:
    if action_status in IN_FLIGHT or (action_status is None and run_status == RunState.RUNNING):
        return "running"
    if run_status in (RunState.RUNNING, RunState.RECOVERING):
        return "ready"  # waits only for its turn: a slot, a worker, the reconciliation
    return "blocked"  # waits for a person, the environment or a child run


def runs_by_status(s: Session) -> dict[str, int]:
    rows = s.execute(select(RunRow.status, func.count()).group_by(RunRow.status))
    return {status: count for status, count in rows}


def work_units(s: Session) -> dict[tuple[str, str], int]:
    """Work units by (run kind, state): ready, running or blocked (SPEC: metrics).

    A unit is an open action of an active run (PENDING, DISPATCHED or STARTED): in flight it
    is running; pending, it is ready while its run is RUNNING or RECOVERING and blocked while
    its run waits. An active run with no open action (a goal thinking or waiting on its
    children, a desktop run waiting for its approval) is one unit of its own: running when
    RUNNING, ready when RECOVERING, else blocked. Two grouped reads, whatever the fleet's size;
    what they scan grows with the runs still active, not with history."""
    found: dict[tuple[str, str], int] = {}
    open_states = (ActionState.PENDING, *IN_FLIGHT)
    rows = s.execute(
        select(RunRow.kind, RunRow.status, ActionRow.status, func.count())
        .join(ActionRow, ActionRow.run_id == RunRow.id)
        .where(RunRow.status.in_(ACTIVE), ActionRow.status.in_(open_states))
        .group_by(RunRow.kind, RunRow.status, ActionRow.status)
    )
    for kind, run_status, action_status, count in rows:
        key = (kind, _unit_state(run_status, action_status))
        found[key] = found.get(key, 0) + count
    has_open = (
        select(ActionRow.id)
        .where(ActionRow.run_id == RunRow.id, ActionRow.status.in_(open_states))
        .exists()
    )
    idle = s.execute(
        select(RunRow.kind, RunRow.status, func.count())
        .where(RunRow.status.in_(ACTIVE), ~has_open)
        .group_by(RunRow.kind, RunRow.status)
    )
    for kind, run_status, count in idle:
        key = (kind, _unit_state(run_status, None))
        found[key] = found.get(key, 0) + count
    return found


def approvals_pending(s: Session) -> int:
    found = s.scalar(
        select(func.count()).select_from(ApprovalRow).where(ApprovalRow.status == "pending")
    )
    return int(found or 0)


def kill_switches_engaged(s: Session) -> dict[str, int]:
    rows = s.execute(
        select(KillSwitchRow.scope, func.count())
        .where(KillSwitchRow.released_at.is_(None))
        .group_by(KillSwitchRow.scope)
    )
    return {scope: count for scope, count in rows}


def state_entered_at(s: Session, run_id: str) -> float | None:
    """When the run entered its current state: its newest `run.state` event, if any."""
    return s.scalar(
        select(JournalRow.at)
        .where(JournalRow.run_id == run_id, JournalRow.kind == "run.state")
        .order_by(JournalRow.seq.desc())
        .limit(1)
    )
