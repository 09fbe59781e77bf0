"""Queries on approvals, kill switches and their acknowledgements, artifacts, input leases,
secrets and recordings."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

from sqlalchemy import exists, func, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from coordinator.store import runs as run_queries
from coordinator.store.models import (
    ActionRow,
    ApprovalNoteRow,
    ApprovalRow,
    ArtifactRow,
    InputLeaseRow,
    KillAckRow,
    KillSwitchRow,
    PresenceRow,
    RecordingFrameRow,
    ReplicaRow,
    RunRow,
    SecretRow,
    TakeoverRow,
    WorkerRow,
)
from shared.states import ACTIVE, IN_FLIGHT


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


def notes_of(s: Session, approval_id: str) -> Sequence[ApprovalNoteRow]:
    """An approval's discussion, oldest first (bounded where it is written)."""
    return (
        s.execute(
            select(ApprovalNoteRow)
            .where(ApprovalNoteRow.approval_id == approval_id)
            .order_by(ApprovalNoteRow.at, ApprovalNoteRow.id)
        )
        .scalars()
        .all()
    )


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


def kills_by_id(s: Session, kill_ids: Collection[str]) -> dict[str, KillSwitchRow]:
    """The switches of these ids that exist, engaged or released."""
    ids = sorted(kill_ids)
    if not ids:
        return {}
    rows = s.execute(select(KillSwitchRow).where(KillSwitchRow.id.in_(ids))).scalars()
    return {row.id: row for row in rows}


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
    """Workers a run or one of its descendants may act on: their approvals' and their
    actions' workers."""
    runs = [run_id, *run_queries.descendant_ids(s, run_id)]
    approved = s.execute(
        select(ApprovalRow.worker_id).where(ApprovalRow.run_id.in_(runs))
    ).scalars()
    acted = s.execute(
        select(ActionRow.worker_id).where(ActionRow.run_id.in_(runs), ActionRow.worker_id != "")
    ).scalars()
    return {*approved, *acted}


def runs_of_workers(s: Session, worker_ids: Collection[str]) -> dict[str, set[str]]:
    """Active runs a kill switch of scope `run` could reach each of these workers through
    (approved for it, or with an attempt in flight on it), by worker id: two queries."""
    ids = sorted(worker_ids)
    found: dict[str, set[str]] = {}
    if not ids:
        return found
    approved = s.execute(
        select(ApprovalRow.worker_id, ApprovalRow.run_id)
        .join(RunRow, RunRow.id == ApprovalRow.run_id)
        .where(
            ApprovalRow.worker_id.in_(ids),
            RunRow.status.in_(ACTIVE),
        )
    )
    acting = s.execute(
        select(ActionRow.worker_id, ActionRow.run_id).where(
            ActionRow.worker_id.in_(ids), ActionRow.status.in_(IN_FLIGHT)
        )
    )
    for worker_id, run_id in [*approved, *acting]:
        found.setdefault(worker_id, set()).add(run_id)
    # A switch on a run covers its descendants: a worker is reached through their ancestors too.
    lines: dict[str, list[str]] = {}
    for runs in found.values():
        for run_id in list(runs):
            if run_id not in lines:
                row = s.get(RunRow, run_id)
                lines[run_id] = run_queries.lineage(s, row) if row is not None else [run_id]
            runs.update(lines[run_id])
    return found


def live_holders(
    s: Session,
    now: float,
    *,
    worker_ids: Iterable[str] | None = None,
    other_than: str = "",
) -> dict[str, str]:
    """worker id -> the replica holding its stream, for workers online now (a live presence
    lease, not revoked); only `worker_ids` if given, only other replicas' if `other_than`."""
    query = (
        select(PresenceRow.worker_id, PresenceRow.replica)
        .join(WorkerRow, WorkerRow.id == PresenceRow.worker_id)
        # A presence lease is its replica's (store/workers.py).
        .join(ReplicaRow, ReplicaRow.name == PresenceRow.replica)
        .where(ReplicaRow.lease_expires_at > now, WorkerRow.state != "revoked")
    )
    if worker_ids is not None:
        ids = sorted(set(worker_ids))
        if not ids:
            return {}
        query = query.where(PresenceRow.worker_id.in_(ids))
    if other_than:
        query = query.where(PresenceRow.replica != other_than)
    return {w: r for w, r in s.execute(query)}


def ack_counts(s: Session, kill_ids: Sequence[str]) -> dict[tuple[str, bool], int]:
    """(kill id, engaged) -> how many workers acknowledged that change."""
    if not kill_ids:
        return {}
    rows = s.execute(
        select(KillAckRow.kill_id, KillAckRow.engaged, func.count())
        .where(KillAckRow.kill_id.in_(kill_ids))
        .group_by(KillAckRow.kill_id, KillAckRow.engaged)
    )
    return {(k, bool(e)): n for k, e, n in rows}


def acked_workers(
    s: Session, kill_ids: Sequence[str], limit: int
) -> dict[tuple[str, bool], list[str]]:
    """(kill id, engaged) -> the first `limit` workers (by id) that acknowledged it."""
    if not kill_ids:
        return {}
    rank = (
        func.row_number()
        .over(
            partition_by=(KillAckRow.kill_id, KillAckRow.engaged),
            order_by=KillAckRow.worker_id,
        )
        .label("rank")
    )
    ranked = (
        select(KillAckRow.kill_id, KillAckRow.engaged, KillAckRow.worker_id, rank)
        .where(KillAckRow.kill_id.in_(kill_ids))
        .subquery()
    )
    out: dict[tuple[str, bool], list[str]] = {}
    rows = s.execute(
        select(ranked.c.kill_id, ranked.c.engaged, ranked.c.worker_id)
        .where(ranked.c.rank <= limit)
        .order_by(ranked.c.kill_id, ranked.c.engaged, ranked.c.worker_id)
    )
    for kill_id, engaged, worker_id in rows:
        out.setdefault((kill_id, bool(engaged)), []).append(worker_id)
    return out


def acked_among(s: Session, kill_id: str, worker_ids: Iterable[str]) -> set[str]:
    """Which of these workers acknowledged the switch's engagement."""
    ids = sorted(set(worker_ids))
    if not ids:
        return set()
    return set(
        s.execute(
            select(KillAckRow.worker_id).where(
                KillAckRow.kill_id == kill_id,
                KillAckRow.engaged.is_(True),
                KillAckRow.worker_id.in_(ids),
            )
        ).scalars()
    )


def online_unacknowledged(
    s: Session, kill_id: str, now: float, limit: int
) -> tuple[int, list[str]]:
    """Workers online now that have not acknowledged the switch's engagement: how many, and
    the first `limit` of them by id (a fleet switch asks it of every online worker)."""
    missing = (
        select(PresenceRow.worker_id)
        .join(WorkerRow, WorkerRow.id == PresenceRow.worker_id)
        .join(ReplicaRow, ReplicaRow.name == PresenceRow.replica)
        .where(
            ReplicaRow.lease_expires_at > now,
            WorkerRow.state != "revoked",
            ~exists().where(
                KillAckRow.kill_id == kill_id,
                KillAckRow.worker_id == PresenceRow.worker_id,
                KillAckRow.engaged.is_(True),
            ),
        )
    )
    count = s.execute(select(func.count()).select_from(missing.subquery())).scalar_one()
    names = s.execute(missing.order_by(PresenceRow.worker_id).limit(limit)).scalars().all()
    return count, list(names)


def fresh_acks(
    rows: Iterable[tuple[str, str, bool, float]],
) -> list[dict[str, object]]:
    """One row per (switch, worker, change), the earliest reading of it kept."""
    fresh: dict[tuple[str, str, bool], float] = {}
    for kill_id, worker_id, engaged, at in rows:
        key = (kill_id, worker_id, engaged)
        fresh[key] = min(at, fresh.get(key, at))
    return [
        {"kill_id": k, "worker_id": w, "engaged": e, "acked_at": at}
        for (k, w, e), at in fresh.items()
    ]


def add_acks(s: Session, rows: Iterable[tuple[str, str, bool, float]]) -> None:
    """Record acknowledgements in one statement that skips those recorded already (insert or
    ignore: no read of the switch's other acknowledgements, whatever their number)."""
    values = fresh_acks(rows)
    if not values:
        return
    if s.get_bind().dialect.name == "postgresql":
        statement: Any = pg_insert(KillAckRow).on_conflict_do_nothing()
    else:
        statement = sqlite_insert(KillAckRow).on_conflict_do_nothing()
    s.execute(statement, values)


# --------------------------------------------------------------- leases, artifacts, secrets


def leases_of_runs(s: Session, run_ids: Sequence[str]) -> Sequence[InputLeaseRow]:
    """The desktops' input leases these runs hold, locked."""
    return (
        s.execute(select(InputLeaseRow).where(InputLeaseRow.run_id.in_(run_ids)).with_for_update())
        .scalars()
        .all()
    )


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


def active_takeover(s: Session, worker_id: str) -> TakeoverRow | None:
    """The person holding the worker's desktop in place of its agent, if any."""
    found: TakeoverRow | None = s.scalars(
        select(TakeoverRow)
        .where(TakeoverRow.worker_id == worker_id, TakeoverRow.status == "active")
        .limit(1)
    ).first()
    return found


def recording_frames(
    s: Session, run_id: str, after_seq: int, limit: int
) -> Sequence[RecordingFrameRow]:
    """Up to `limit` of a run's recorded frames after `after_seq`, in order (images deferred)."""
    return (
        s.execute(
            select(RecordingFrameRow)
            .where(RecordingFrameRow.run_id == run_id, RecordingFrameRow.seq > after_seq)
            .order_by(RecordingFrameRow.seq)
            .limit(limit)
        )
        .scalars()
        .all()
    )


def recording_count(s: Session, run_id: str) -> int:
    return int(s.scalar(select(func.count()).where(RecordingFrameRow.run_id == run_id)) or 0)


def recording_frame(s: Session, run_id: str, seq: int) -> RecordingFrameRow | None:
    return s.get(RecordingFrameRow, (run_id, seq))
