"""Queries on replicas and on the orders waiting for another replica to send them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import delete, select, text, update
from sqlalchemy.orm import Session

from coordinator.store.models import ActionRow, DeliveryRow, PresenceRow, ReplicaRow
from shared.states import IN_FLIGHT

# PostgreSQL refuses NOTIFY payloads from 8000 bytes on.
MAX_PAYLOAD = 7000
# Workers whose routing state changed (connect, disconnect, drain, revoke): ids, space-joined.
WORKERS = "deskfleet_workers"


def beat(
    s: Session, name: str, address: str, started_at: float, now: float, ttl: float = 0.0
) -> None:
    """Say this replica is alive (insert its row or move its `seen_at`), and renew its lease:
    the presence lease of every worker streaming to it, in one row."""
    row = s.get(ReplicaRow, name)
    if row is None:
        s.add(
            ReplicaRow(
                name=name,
                address=address,
                started_at=started_at,
                seen_at=now,
                lease_expires_at=now + ttl,
            )
        )
    else:
        row.address, row.started_at, row.seen_at = address, started_at, now
        row.lease_expires_at = now + ttl


def clear_presence(s: Session, name: str) -> int:
    """Forget the streams a previous process of this replica held: they died with it, and the
    lease this process renews must not bring them back online."""
    return int(
        s.execute(delete(PresenceRow).where(PresenceRow.replica == name)).rowcount  # type: ignore[attr-defined]
        or 0
    )


def renew_held_action_leases(s: Session, name: str, until: float) -> None:
    """Renew, in one statement, the leases of the attempts held by workers streaming to this
    replica (its in-flight actions, not its whole fleet)."""
    workers = select(PresenceRow.worker_id).where(PresenceRow.replica == name)
    held = (ActionRow.status.in_(IN_FLIGHT), ActionRow.worker_id.in_(workers))
    target = select(ActionRow.id).where(*held)
    if s.get_bind().dialect.name == "postgresql":
        # Rows a receipt or a claim is changing right now are skipped, not waited for: those
        # transactions settle the lease themselves, and the next renewal takes the rest.
        # Waiting would lock actions in another order than the ledger does.
        target = target.with_for_update(skip_locked=True)
    s.execute(
        update(ActionRow)
        .where(ActionRow.id.in_(target.scalar_subquery()))
        .values(lease_expires_at=until)
        .execution_options(synchronize_session=False)
    )


def forget(s: Session, name: str) -> None:
    s.execute(delete(ReplicaRow).where(ReplicaRow.name == name))


def replicas(s: Session) -> Sequence[ReplicaRow]:
    return s.execute(select(ReplicaRow).order_by(ReplicaRow.name)).scalars().all()


def live(s: Session, now: float, ttl: float) -> set[str]:
    rows = s.execute(select(ReplicaRow.name).where(ReplicaRow.seen_at > now - ttl))
    return set(rows.scalars())


def holders(s: Session, worker_ids: Iterable[str]) -> dict[str, str]:
    """worker id -> the replica whose session holds its presence lease."""
    ids = sorted(set(worker_ids))
    if not ids:
        return {}
    rows = s.execute(
        select(PresenceRow.worker_id, PresenceRow.replica).where(PresenceRow.worker_id.in_(ids))
    )
    return {w: r for w, r in rows}


def add_deliveries(s: Session, rows: Sequence[DeliveryRow]) -> None:
    s.add_all(rows)


def take_deliveries(s: Session, replica: str) -> list[DeliveryRow]:
    """Remove and return this replica's waiting orders, oldest first."""
    rows = s.execute(
        delete(DeliveryRow)
        .where(DeliveryRow.replica == replica)
        .returning(
            DeliveryRow.id,
            DeliveryRow.replica,
            DeliveryRow.worker_id,
            DeliveryRow.body,
            DeliveryRow.created_at,
        )
    ).all()
    return [
        DeliveryRow(id=i, replica=r, worker_id=w, body=b, created_at=c)
        for i, r, w, b, c in sorted(rows)
    ]


def drop_undeliverable(s: Session, live_replicas: set[str], older_than: float) -> int:
    """Orders for replicas that died: their workers reconcile with whichever replica they
    reach next, so these would only be stale."""
    query = delete(DeliveryRow).where(DeliveryRow.created_at < older_than)
    if live_replicas:
        query = query.where(DeliveryRow.replica.not_in(sorted(live_replicas)))
    return int(s.execute(query).rowcount or 0)  # type: ignore[attr-defined]


def notify(s: Session, channel: str, payloads: Iterable[str]) -> None:
    """PostgreSQL NOTIFY, sent by the server only when the transaction commits."""
    for payload in payloads:
        s.execute(
            text("SELECT pg_notify(:channel, :payload)"), {"channel": channel, "payload": payload}
        )


def announce_workers(s: Session, worker_ids: Iterable[str]) -> None:
    """Tell every replica's worker index, at commit, to read these workers again (PostgreSQL;
    on SQLite one replica holds the store and reads its own changes back)."""
    if s.get_bind().dialect.name == "postgresql":
        notify(s, WORKERS, chunks(sorted(set(worker_ids))))


def chunks(words: Iterable[str]) -> list[str]:
    """Space-joined payloads each under PostgreSQL's NOTIFY limit."""
    out: list[str] = []
    current: list[str] = []
    size = 0
    for word in words:
        if current and size + len(word) + 1 > MAX_PAYLOAD:
            out.append(" ".join(current))
            current, size = [], 0
        current.append(word)
        size += len(word) + 1
    if current:
        out.append(" ".join(current))
    return out
