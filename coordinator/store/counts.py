"""Counts the metrics endpoint reads at scrape time: cheap aggregate queries, one snapshot."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from coordinator.store.models import ApprovalRow, JournalRow, KillSwitchRow, RunRow


def runs_by_status(s: Session) -> dict[str, int]:
    rows = s.execute(select(RunRow.status, func.count()).group_by(RunRow.status))
    return {status: count for status, count in rows}


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
