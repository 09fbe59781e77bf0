"""Queries on enrolled workers and their presence leases."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, or_, select, update
from sqlalchemy.orm import Session

from coordinator.store.models import PresenceRow, WorkerCertificateRow, WorkerRow


def add_worker(s: Session, row: WorkerRow) -> None:
    s.add(row)
    s.flush()


def worker_by_hash(s: Session, secret_hash: str) -> WorkerRow | None:
    """The worker with this credential, or with it as the previous one of a rotation that its
    new credential has not yet confirmed."""
    return (
        s.execute(
            select(WorkerRow).where(
                or_(
                    WorkerRow.secret_hash == secret_hash,
                    WorkerRow.previous_secret_hash == secret_hash,
                )
            )
        )
    ).scalar_one_or_none()


def confirm_rotation(s: Session, worker_id: str) -> None:
    """The new credential was used: the previous one stops working."""
    s.execute(update(WorkerRow).where(WorkerRow.id == worker_id).values(previous_secret_hash=""))


def worker_by_id(s: Session, worker_id: str) -> WorkerRow | None:
    return s.get(WorkerRow, worker_id)


def worker_for_update(s: Session, worker_id: str) -> WorkerRow | None:
    """The worker row, locked for this transaction: its certificates are about to change."""
    return s.execute(
        select(WorkerRow).where(WorkerRow.id == worker_id).with_for_update()
    ).scalar_one_or_none()


def workers_with_presence(
    s: Session, *, include_revoked: bool, worker_id: str | None = None
) -> Sequence[tuple[WorkerRow, PresenceRow | None]]:
    query = select(WorkerRow, PresenceRow).outerjoin(
        PresenceRow, PresenceRow.worker_id == WorkerRow.id
    )
    if not include_revoked:
        query = query.where(WorkerRow.state != "revoked")
    if worker_id is not None:
        query = query.where(WorkerRow.id == worker_id)
    rows = s.execute(query.order_by(WorkerRow.enrolled_at)).all()
    return rows


def set_state(s: Session, worker_id: str, state: str, **values: Any) -> None:
    s.execute(update(WorkerRow).where(WorkerRow.id == worker_id).values(state=state, **values))


def set_advertisement(s: Session, worker_id: str, advertisement: dict[str, Any]) -> None:
    s.execute(
        update(WorkerRow).where(WorkerRow.id == worker_id).values(advertisement=advertisement)
    )


def claim_presence(
    s: Session, worker_id: str, replica: str, session_id: str, now: float, lease_ttl: float
) -> None:
    """Record that `session_id` on `replica` holds the worker's stream, replacing any older one."""
    s.execute(delete(PresenceRow).where(PresenceRow.worker_id == worker_id))
    s.add(
        PresenceRow(
            worker_id=worker_id,
            replica=replica,
            session_id=session_id,
            connected_at=now,
            last_heartbeat_at=now,
            lease_expires_at=now + lease_ttl,
        )
    )
    s.flush()


def renew_leases(
    s: Session, renewals: Iterable[tuple[str, str]], now: float, lease_ttl: float
) -> None:
    """Renew many leases in one statement; a session that lost its claim renews nothing."""
    params = [{"w": w, "sid": sid} for w, sid in renewals]
    if not params:
        return
    # Core table, not the ORM entity: an executemany UPDATE with our own WHERE clause.
    table = cast(Table, PresenceRow.__table__)
    s.execute(
        update(table)
        .where(table.c.worker_id == bindparam("w"), table.c.session_id == bindparam("sid"))
        .values(last_heartbeat_at=now, lease_expires_at=now + lease_ttl),
        params,
    )


def release_presence(s: Session, worker_id: str, session_id: str) -> None:
    s.execute(
        delete(PresenceRow).where(
            PresenceRow.worker_id == worker_id, PresenceRow.session_id == session_id
        )
    )


def revoked_among(s: Session, worker_ids: Sequence[str]) -> list[str]:
    if not worker_ids:
        return []
    rows = s.execute(
        select(WorkerRow.id).where(WorkerRow.id.in_(worker_ids), WorkerRow.state == "revoked")
    )
    return list(rows.scalars())


def record_certificate(s: Session, row: WorkerCertificateRow) -> None:
    """Store a newly signed certificate as the worker's newest; older ones stop opening streams.
    The caller holds the worker row's lock (worker_for_update) or has just created the worker."""
    s.execute(
        update(WorkerCertificateRow)
        .where(
            WorkerCertificateRow.worker_id == row.worker_id,
            WorkerCertificateRow.superseded_at.is_(None),
        )
        .values(superseded_at=row.issued_at)
    )
    s.add(row)
    s.flush()


def certificate_by_fingerprint(
    s: Session, fingerprint: str
) -> tuple[WorkerCertificateRow, str] | None:
    """The certificate and its worker's state."""
    row = s.execute(
        select(WorkerCertificateRow, WorkerRow.state)
        .join(WorkerRow, WorkerRow.id == WorkerCertificateRow.worker_id)
        .where(WorkerCertificateRow.fingerprint == fingerprint)
    ).first()
    return (row[0], row[1]) if row is not None else None


def current_certificate(s: Session, worker_id: str) -> WorkerCertificateRow | None:
    return s.execute(
        select(WorkerCertificateRow).where(
            WorkerCertificateRow.worker_id == worker_id,
            WorkerCertificateRow.superseded_at.is_(None),
        )
    ).scalar_one_or_none()
