"""Queries for the fleet's live view: attempts in flight and runs counted by state."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from coordinator.store.models import ActionRow, RunRow
from shared.states import IN_FLIGHT


def in_flight_actions(s: Session, owner_id: str | None) -> Sequence[tuple[ActionRow, str]]:
    """Attempts in flight, oldest first, with their run's owner; `owner_id` narrows to one."""
    query = (
        select(ActionRow, RunRow.owner_id)
        .join(RunRow, RunRow.id == ActionRow.run_id)
        .where(ActionRow.status.in_(IN_FLIGHT))
    )
    if owner_id is not None:
        query = query.where(RunRow.owner_id == owner_id)
    rows = s.execute(query.order_by(ActionRow.dispatched_at, ActionRow.id)).all()
    return [(action, owner) for action, owner in rows]


def recent_actions(
    s: Session, worker_id: str, owner_id: str | None, limit: int
) -> Sequence[ActionRow]:
    """The worker's finished attempts, newest first (the current attempt of each action)."""
    query = select(ActionRow).where(
        ActionRow.worker_id == worker_id, ActionRow.finished_at.is_not(None)
    )
    if owner_id is not None:
        query = query.join(RunRow, RunRow.id == ActionRow.run_id).where(RunRow.owner_id == owner_id)
    query = query.order_by(ActionRow.finished_at.desc(), ActionRow.id.desc()).limit(limit)
    return s.execute(query).scalars().all()


def runs_by_status(s: Session, owner_id: str | None) -> dict[str, int]:
    query = select(RunRow.status, func.count(RunRow.id)).group_by(RunRow.status)
    if owner_id is not None:
        query = query.where(RunRow.owner_id == owner_id)
    return {status: int(count) for status, count in s.execute(query).all()}
