"""Queries on admin/owner principals and enrollment tokens."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from coordinator.store.models import EnrollmentTokenRow, PrincipalRow


def principal_by_hash(s: Session, secret_hash: str) -> PrincipalRow | None:
    return s.execute(
        select(PrincipalRow).where(PrincipalRow.secret_hash == secret_hash)
    ).scalar_one_or_none()


def add(s: Session, row: PrincipalRow | EnrollmentTokenRow) -> None:
    s.add(row)
    s.flush()


def enrollment_token_by_hash(s: Session, secret_hash: str) -> EnrollmentTokenRow | None:
    return s.execute(
        select(EnrollmentTokenRow).where(EnrollmentTokenRow.secret_hash == secret_hash)
    ).scalar_one_or_none()


def consume_enrollment_use(s: Session, token_id: str) -> bool:
    """Take one use of a token; False when none was left (guarded in SQL against races)."""
    result = s.execute(
        update(EnrollmentTokenRow)
        .where(
            EnrollmentTokenRow.id == token_id,
            EnrollmentTokenRow.uses_left > 0,
            # A revocation that commits between reading the token and taking its use wins.
            EnrollmentTokenRow.revoked_at.is_(None),
        )
        .values(uses_left=EnrollmentTokenRow.uses_left - 1)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def principal_by_name(s: Session, name: str) -> PrincipalRow | None:
    return s.execute(select(PrincipalRow).where(PrincipalRow.name == name)).scalar_one_or_none()


def enrollment_tokens(s: Session) -> Sequence[EnrollmentTokenRow]:
    """Every enrollment token, newest first."""
    return (
        s.execute(
            select(EnrollmentTokenRow).order_by(
                EnrollmentTokenRow.created_at.desc(), EnrollmentTokenRow.id.desc()
            )
        )
        .scalars()
        .all()
    )


def enrollment_token(s: Session, token_id: str) -> EnrollmentTokenRow | None:
    return s.get(EnrollmentTokenRow, token_id)


def users(s: Session) -> Sequence[PrincipalRow]:
    """The admins and owners whose tokens work (revoked ones are gone), oldest first."""
    return (
        s.execute(
            select(PrincipalRow)
            .where(PrincipalRow.revoked_at.is_(None))
            .order_by(PrincipalRow.created_at, PrincipalRow.id)
        )
        .scalars()
        .all()
    )


def names_of(s: Session, ids: Collection[str]) -> dict[str, str]:
    """User names by id, revoked users' too (what they did stays theirs), in one query."""
    wanted = sorted(set(ids) - {""})
    if not wanted:
        return {}
    rows = s.execute(select(PrincipalRow.id, PrincipalRow.name).where(PrincipalRow.id.in_(wanted)))
    return {i: n for i, n in rows}
