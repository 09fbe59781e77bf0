"""Queries on admin/owner principals and enrollment tokens."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from coordinator.store.models import EnrollmentTokenRow, PrincipalRow


async def principal_by_hash(s: AsyncSession, secret_hash: str) -> PrincipalRow | None:
    return (
        await s.execute(select(PrincipalRow).where(PrincipalRow.secret_hash == secret_hash))
    ).scalar_one_or_none()


async def principal_by_name(s: AsyncSession, name: str) -> PrincipalRow | None:
    return (
        await s.execute(select(PrincipalRow).where(PrincipalRow.name == name))
    ).scalar_one_or_none()


async def add(s: AsyncSession, row: PrincipalRow | EnrollmentTokenRow) -> None:
    s.add(row)
    await s.flush()


async def enrollment_token_by_hash(s: AsyncSession, secret_hash: str) -> EnrollmentTokenRow | None:
    return (
        await s.execute(
            select(EnrollmentTokenRow).where(EnrollmentTokenRow.secret_hash == secret_hash)
        )
    ).scalar_one_or_none()


async def consume_enrollment_use(s: AsyncSession, token_id: str) -> bool:
    """Take one use of a token; False when none was left (guarded in SQL against races)."""
    result = await s.execute(
        update(EnrollmentTokenRow)
        .where(EnrollmentTokenRow.id == token_id, EnrollmentTokenRow.uses_left > 0)
        .values(uses_left=EnrollmentTokenRow.uses_left - 1)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]
