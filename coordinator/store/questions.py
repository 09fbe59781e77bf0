"""Queries on the questions goals ask people."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from coordinator.store.models import QuestionRow

OPEN = "open"


def of_call(s: Session, run_id: str, call_id: str) -> QuestionRow | None:
    return s.execute(
        select(QuestionRow).where(QuestionRow.run_id == run_id, QuestionRow.call_id == call_id)
    ).scalar_one_or_none()


def question_for_update(s: Session, question_id: str) -> QuestionRow | None:
    return s.execute(
        select(QuestionRow).where(QuestionRow.id == question_id).with_for_update()
    ).scalar_one_or_none()


def listed(
    s: Session, *, owner_id: str | None, run_id: str, open_only: bool, limit: int
) -> Sequence[QuestionRow]:
    """Questions newest first: an owner's (every owner's for None), one run's if named."""
    query = select(QuestionRow)
    if owner_id is not None:
        query = query.where(QuestionRow.owner_id == owner_id)
    if run_id:
        query = query.where(QuestionRow.run_id == run_id)
    if open_only:
        query = query.where(QuestionRow.status == OPEN)
    query = query.order_by(QuestionRow.asked_at.desc(), QuestionRow.id).limit(limit)
    return s.execute(query).scalars().all()


def of_run(s: Session, run_id: str, limit: int) -> Sequence[QuestionRow]:
    return (
        s.execute(
            select(QuestionRow)
            .where(QuestionRow.run_id == run_id)
            .order_by(QuestionRow.asked_at, QuestionRow.id)
            .limit(limit)
        )
        .scalars()
        .all()
    )


def open_of_run(s: Session, run_id: str) -> Sequence[QuestionRow]:
    return (
        s.execute(
            select(QuestionRow).where(QuestionRow.run_id == run_id, QuestionRow.status == OPEN)
        )
        .scalars()
        .all()
    )


def count_of_run(s: Session, run_id: str) -> int:
    return int(
        s.execute(
            select(func.count()).select_from(QuestionRow).where(QuestionRow.run_id == run_id)
        ).scalar_one()
    )
