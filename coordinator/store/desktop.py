"""Queries on approvals, kill switches and their acknowledgements, artifacts, input leases
and secrets."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import exists, insert, or_, select
from sqlalchemy.orm import Session

from coordinator.store.models import (
    ActionRow,
    ApprovalRow,
    ArtifactRow,
    InputLeaseRow,
    KillAckRow,
    KillSwitchRow,
    PresenceRow,
    RunRow,
    SecretRow,
)


def latest_approval(s: Session, run_id: str) -> ApprovalRow | None:
    return (
        s.execute(
            select(ApprovalRow)
            .where(ApprovalRow.run_id == run_id)
            .order_by(ApprovalRow.requested_at.desc(), ApprovalRow.id.desc())
            .limit(1)
        )
        .scalars()
        .first()
    )


def approval(s: Session, approval_id: str) -> ApprovalRow | None:
    return s.get(ApprovalRow, approval_id)


def approvals(s: Session, status: str, limit: int) -> Sequence[ApprovalRow]:
    return (
        s.execute(
            select(ApprovalRow)
            .where(ApprovalRow.status == status)
            .order_by(ApprovalRow.requested_at)
            .limit(limit)
        )
        .scalars()
        .all()
    )


def approved_runs_of_worker(s: Session, worker_id: str) -> Sequence[tuple[ApprovalRow, RunRow]]:
    return s.execute(
        select(ApprovalRow, RunRow)
        .join(RunRow, RunRow.id == ApprovalRow.run_id)
        .where(ApprovalRow.worker_id == worker_id, ApprovalRow.status == "approved")
        .order_by(ApprovalRow.answered_at)
    ).all()


def approvals_with_status(
    s: Session, statuses: Sequence[str], *, worker_id: str = "", run_id: str = ""
) -> Sequence[ApprovalRow]:
    query = select(ApprovalRow).where(ApprovalRow.status.in_(statuses))
    if worker_id:
        query = query.where(ApprovalRow.worker_id == worker_id)
    if run_id:
        query = query.where(ApprovalRow.run_id == run_id)
    return s.execute(query.order_by(ApprovalRow.requested_at)).scalars().all()


def session_of(s: Session, worker_id: str) -> str:
    row = s.get(PresenceRow, worker_id)
    return row.session_id if row is not None else ""


# --------------------------------------------------------------------------- kill switches


def engaged_kills(s: Session) -> Sequence[KillSwitchRow]:
    return (
        s.execute(
            select(KillSwitchRow)
            .where(KillSwitchRow.released_at.is_(None))
            .order_by(KillSwitchRow.engaged_at)
        )
        .scalars()
        .all()
    )


def kills(
    s: Session, *, include_released: bool, owner_id: str = "", limit: int = 200
) -> Sequence[KillSwitchRow]:
    """The newest switches; with `owner_id`, only those that owner may see: the fleet's,
    those of workers the owner's runs asked to control, and those of the owner's runs."""
    query = select(KillSwitchRow)
    if owner_id:
        query = query.where(
            or_(
                KillSwitchRow.scope == "fleet",
                (KillSwitchRow.scope == "worker")
                & exists().where(
                    ApprovalRow.owner_id == owner_id,
                    ApprovalRow.worker_id == KillSwitchRow.target,
                ),
                (KillSwitchRow.scope == "run")
                & exists().where(RunRow.id == KillSwitchRow.target, RunRow.owner_id == owner_id),
            )
        )
    if not include_released:
        query = query.where(KillSwitchRow.released_at.is_(None))
    return s.execute(query.order_by(KillSwitchRow.engaged_at.desc()).limit(limit)).scalars().all()


def kills_applying(s: Session, worker_id: str, run_ids: Iterable[str]) -> Sequence[KillSwitchRow]:
    """Engaged kill switches for the fleet, this worker, or one of these runs."""
    runs = list(run_ids)
    return (
        s.execute(
            select(KillSwitchRow).where(
                KillSwitchRow.released_at.is_(None),
                or_(
                    KillSwitchRow.scope == "fleet",
                    (KillSwitchRow.scope == "worker") & (KillSwitchRow.target == worker_id),
                    (KillSwitchRow.scope == "run") & (KillSwitchRow.target.in_(runs)),
                ),
            )
        )
        .scalars()
        .all()
    )


def owner_uses_worker(s: Session, owner_id: str, worker_id: str) -> bool:
    """Whether any of the owner's runs asked to control the worker's desktop."""
    found = s.execute(
        select(ApprovalRow.id)
        .where(ApprovalRow.owner_id == owner_id, ApprovalRow.worker_id == worker_id)
        .limit(1)
    ).first()
    return found is not None


def workers_of_run(s: Session, run_id: str) -> set[str]:
    """Workers a run may act on: its approvals' and its actions' workers."""
    approved = s.execute(
        select(ApprovalRow.worker_id).where(ApprovalRow.run_id == run_id)
    ).scalars()
    acted = s.execute(
        select(ActionRow.worker_id).where(ActionRow.run_id == run_id, ActionRow.worker_id != "")
    ).scalars()
    return {*approved, *acted}


def runs_of_worker(s: Session, worker_id: str) -> set[str]:
    """Active runs a kill switch of scope `run` could reach this worker through."""
    approved = s.execute(
        select(ApprovalRow.run_id)
        .join(RunRow, RunRow.id == ApprovalRow.run_id)
        .where(
            ApprovalRow.worker_id == worker_id,
            RunRow.status.in_(("RUNNING", "WAITING_FOR_ENVIRONMENT", "WAITING_FOR_AUTHORITY")),
        )
    ).scalars()
    acting = s.execute(
        select(ActionRow.run_id).where(
            ActionRow.worker_id == worker_id, ActionRow.status.in_(("DISPATCHED", "STARTED"))
        )
    ).scalars()
    return {*approved, *acting}


def acks(s: Session, kill_ids: Sequence[str]) -> Sequence[KillAckRow]:
    return s.execute(select(KillAckRow).where(KillAckRow.kill_id.in_(kill_ids))).scalars().all()


def add_acks(s: Session, rows: Iterable[tuple[str, str, bool, float]]) -> None:
    """Record acknowledgements, many in one statement; repeats of a recorded one are dropped."""
    fresh: dict[tuple[str, str, bool], float] = {}
    for kill_id, worker_id, engaged, at in rows:
        fresh.setdefault((kill_id, worker_id, engaged), at)
    if not fresh:
        return
    known = s.execute(
        select(KillAckRow.kill_id, KillAckRow.worker_id, KillAckRow.engaged).where(
            KillAckRow.kill_id.in_({k for k, _, _ in fresh})
        )
    )
    for key in known:
        fresh.pop((key[0], key[1], key[2]), None)
    if fresh:
        s.execute(
            insert(KillAckRow),
            [
                {"kill_id": k, "worker_id": w, "engaged": e, "acked_at": at}
                for (k, w, e), at in fresh.items()
            ],
        )


# --------------------------------------------------------------- leases, artifacts, secrets


def input_lease(s: Session, worker_id: str) -> InputLeaseRow | None:
    return s.execute(
        select(InputLeaseRow).where(InputLeaseRow.worker_id == worker_id).with_for_update()
    ).scalar_one_or_none()


def artifact(s: Session, run_id: str, sha256: str) -> ArtifactRow | None:
    return s.get(ArtifactRow, (run_id, sha256))


def secret(s: Session, owner_id: str, name: str) -> SecretRow | None:
    return s.get(SecretRow, (owner_id, name))


def all_secrets(s: Session, *, lock: bool = False) -> Sequence[SecretRow]:
    query = select(SecretRow).order_by(SecretRow.owner_id, SecretRow.name)
    return s.execute(query.with_for_update() if lock else query).scalars().all()


def artifacts_of_run(s: Session, run_id: str) -> Sequence[ArtifactRow]:
    return (
        s.execute(
            select(ArtifactRow).where(ArtifactRow.run_id == run_id).order_by(ArtifactRow.created_at)
        )
        .scalars()
        .all()
    )
