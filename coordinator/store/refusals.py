"""The workers' refused reports already journaled, one row per (action, sender, reason)."""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from coordinator.store.models import RefusedReportRow

_REFUSED = cast(Table, RefusedReportRow.__table__)


def first_refusal(
    s: Session, run_id: str, action_id: str, worker_id: str, reason: str, at: float
) -> bool:
    """Note the refusal; True when it is the first of this (action, sender, reason).

    Sent at once, whatever the session's autoflush: the answer decides whether the journal
    gets an event in this same transaction. A concurrent transaction noting the same one
    waits for this one's end, so exactly one of them is the first."""
    insert = pg_insert if s.get_bind().dialect.name == "postgresql" else sqlite_insert
    statement = (
        insert(_REFUSED)
        .values(action_id=action_id, worker_id=worker_id, reason=reason, run_id=run_id, at=at)
        .on_conflict_do_nothing(index_elements=["action_id", "worker_id", "reason"])
        # What was inserted, rather than the rowcount: psycopg reports none (-1) for it.
        .returning(_REFUSED.c.action_id)
    )
    return s.connection().execute(statement).first() is not None
