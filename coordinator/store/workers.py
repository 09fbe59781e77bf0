"""Queries on enrolled workers and their presence leases."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import (
    Select,
    String,
    Table,
    and_,
    bindparam,
    cast as sql_cast,
    delete,
    exists,
    func,
    insert,
    not_,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from coordinator.store.models import (
    ApprovalRow,
    PresenceRow,
    ReplicaRow,
    WorkerCertificateRow,
    WorkerRow,
)
from shared.errors import InvalidArgumentError, NotFoundError
from shared.local_kill import LocalKill
from shared.text import refuse_control
from shared.timestamps import iso


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


def workers_by_hash(s: Session, secret_hashes: Collection[str]) -> dict[str, WorkerRow]:
    """`worker_by_hash` for several credential hashes in one query, by hash."""
    hashes = sorted(set(secret_hashes) - {""})
    found: dict[str, WorkerRow] = {}
    if not hashes:
        return found
    rows = s.execute(
        select(WorkerRow).where(
            or_(WorkerRow.secret_hash.in_(hashes), WorkerRow.previous_secret_hash.in_(hashes))
        )
    ).scalars()
    wanted = set(hashes)
    for row in rows:
        for digest in (row.secret_hash, row.previous_secret_hash):
            if digest in wanted:
                found[digest] = row
    return found


def confirm_rotation(s: Session, worker_id: str) -> None:
    """The new credential was used: the previous one stops working."""
    s.execute(update(WorkerRow).where(WorkerRow.id == worker_id).values(previous_secret_hash=""))


def worker_by_id(s: Session, worker_id: str) -> WorkerRow | None:
    return s.get(WorkerRow, worker_id)


MAX_NAMED = 5  # candidates an ambiguous name lists


def resolve(s: Session, ref: str, now: float, *, revoked_names: bool = True) -> WorkerRow:
    """The worker a person names: by its id, or by a name one worker has.

    Every RPC that takes a worker resolves it here, in its own transaction, so that names work
    the same in the CLI, the console, MCP and the client library, and for owners, who may not
    list workers (one indexed lookup, no page of the fleet read). A name of revoked workers
    only counts when no enrolled worker has it, so that re-enrolling a machine under its old
    name keeps the name usable. An ambiguous name is refused with its candidates.

    `revoked_names=False` (a caller who is not an admin): a name counts only enrolled workers,
    as the fleet such a caller may list does, so that neither a refusal's candidates nor
    "worker X is revoked" tells them revoked workers' ids; an id is taken as it is."""
    ref = ref.strip()
    # A NUL is a store error on PostgreSQL, not "not found"; no worker name holds a control.
    refuse_control("worker", ref)
    if len(ref) > 200:
        raise InvalidArgumentError("worker: a worker's id or name is at most 200 characters")
    row = s.get(WorkerRow, ref) if ref else None
    if row is not None:
        return row
    rows = s.execute(
        _with_presence().where(WorkerRow.name == ref).order_by(WorkerRow.enrolled_at, WorkerRow.id)
    ).all()
    enrolled = [r for r in rows if r[0].state != "revoked"]
    found = enrolled or (rows if revoked_names else [])
    if not found:
        raise NotFoundError(
            f"no worker with id or name {ref[:200]!r} (see `deskfleet workers list`)"
        )
    if len(found) > 1:
        named = "; ".join(
            _candidate(w, _effective(p, lease, seen), now)
            for w, p, lease, seen in found[:MAX_NAMED]
        )
        more = f"; and {len(found) - MAX_NAMED} more" if len(found) > MAX_NAMED else ""
        raise InvalidArgumentError(
            f"{len(found)} workers are named {ref!r}: {named}{more}; pass the id"
        )
    return found[0][0]


def _candidate(worker: WorkerRow, presence: PresenceRow | None, now: float) -> str:
    if presence is not None and presence.lease_expires_at > now and worker.state != "revoked":
        seen = f"online, last seen {iso(presence.last_heartbeat_at)}"
    else:
        seen = f"not connected, enrolled {iso(worker.enrolled_at)}"
    state = "" if worker.state == "active" else f", {worker.state}"
    return f"{worker.id} ({seen}{state})"


def worker_for_update(s: Session, worker_id: str) -> WorkerRow | None:
    """The worker row, locked for this transaction: its certificates are about to change."""
    return s.execute(
        select(WorkerRow).where(WorkerRow.id == worker_id).with_for_update()
    ).scalar_one_or_none()


def _effective(
    presence: PresenceRow | None, lease: float | None, seen: float | None
) -> PresenceRow | None:
    """The presence row with the lease that decides it: its replica's (0 when the replica is
    gone). Set as committed values, so nothing is written back."""
    if presence is not None:
        set_committed_value(presence, "lease_expires_at", lease or 0.0)
        if seen is not None:
            set_committed_value(presence, "last_heartbeat_at", max(seen, presence.connected_at))
    return presence


def _with_presence() -> Select[WorkerRow, PresenceRow, float, float]:
    return (
        select(WorkerRow, PresenceRow, ReplicaRow.lease_expires_at, ReplicaRow.seen_at)
        .outerjoin(PresenceRow, PresenceRow.worker_id == WorkerRow.id)
        .outerjoin(ReplicaRow, ReplicaRow.name == PresenceRow.replica)
    )


def workers_with_presence(
    s: Session, *, include_revoked: bool, worker_id: str | None = None
) -> Sequence[tuple[WorkerRow, PresenceRow | None]]:
    """Every worker (or one) with its presence, whose lease is its replica's."""
    query = _with_presence()
    if not include_revoked:
        query = query.where(WorkerRow.state != "revoked")
    if worker_id is not None:
        query = query.where(WorkerRow.id == worker_id)
    rows = s.execute(query.order_by(WorkerRow.enrolled_at)).all()
    return [(w, _effective(p, lease, seen)) for w, p, lease, seen in rows]


@dataclass(frozen=True)
class RoutingRow:
    """What routing needs of a worker, without its advertisement (read only when it changed)."""

    id: str
    name: str
    labels: dict[str, str]
    state: str
    allowed_capabilities: list[str]
    enrolled_at: float
    replica: str  # holding its stream; "" when no presence row names one
    session_id: str
    connected_at: float
    # The worker's own switch, as its stream reports it.
    local_kill: LocalKill = field(default_factory=LocalKill)


def local_kill_of(presence: PresenceRow | None) -> LocalKill:
    """The worker's own kill switch as its presence row holds it."""
    if presence is None or presence.local_kill_since is None:
        return LocalKill()
    return LocalKill(
        True, presence.local_kill_since, presence.local_kill_means, presence.local_kill_reason
    )


def routing_rows(s: Session, worker_ids: Sequence[str] | None) -> list[RoutingRow]:
    """These workers (None: every one) as routing sees them."""
    query = select(
        WorkerRow.id,
        WorkerRow.name,
        WorkerRow.labels,
        WorkerRow.state,
        WorkerRow.allowed_capabilities,
        WorkerRow.enrolled_at,
        PresenceRow.replica,
        PresenceRow.session_id,
        PresenceRow.connected_at,
        PresenceRow.local_kill_since,
        PresenceRow.local_kill_means,
        PresenceRow.local_kill_reason,
    ).outerjoin(PresenceRow, PresenceRow.worker_id == WorkerRow.id)
    if worker_ids is not None:
        query = query.where(WorkerRow.id.in_(worker_ids))
    return [
        RoutingRow(
            w,
            n,
            dict(lab or {}),
            st,
            list(al or ()),
            e,
            r or "",
            sid or "",
            c or 0.0,
            LocalKill() if since is None else LocalKill(True, since, means or "", why or ""),
        )
        for w, n, lab, st, al, e, r, sid, c, since, means, why in s.execute(query)
    ]


def advertisements(s: Session, worker_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The last advertisement of each of these workers."""
    rows = s.execute(
        select(WorkerRow.id, WorkerRow.advertisement).where(WorkerRow.id.in_(worker_ids))
    )
    return {w: dict(a or {}) for w, a in rows}


def replica_leases(s: Session) -> list[tuple[str, float, float]]:
    """(name, lease expiry, process start) of every replica."""
    rows = s.execute(select(ReplicaRow.name, ReplicaRow.lease_expires_at, ReplicaRow.started_at))
    return [(n, float(e), float(st)) for n, e, st in rows]


def is_online(s: Session, worker_id: str, now: float) -> bool:
    """Whether the worker streams to a replica whose lease runs, and is not revoked."""
    row = s.execute(
        select(WorkerRow.id)
        .join(PresenceRow, PresenceRow.worker_id == WorkerRow.id)
        .join(ReplicaRow, ReplicaRow.name == PresenceRow.replica)
        .where(
            WorkerRow.id == worker_id,
            WorkerRow.state != "revoked",
            ReplicaRow.lease_expires_at > now,
        )
    ).first()
    return row is not None


@dataclass(frozen=True)
class WorkerFilter:
    """Which workers a page lists. `capability`: offering it now (online, active, granted)."""

    include_revoked: bool = False
    state: str = ""
    capability: str = ""
    replica: str = ""
    online: bool | None = None
    text: str = ""  # in the id, name, replica or a label, ignoring case


def workers_page(
    s: Session,
    where: WorkerFilter,
    after: tuple[float, str] | None,
    limit: int,
    now: float,
) -> tuple[list[tuple[WorkerRow, PresenceRow | None]], bool]:
    """Up to `limit` workers after the position `after` (enrolled_at, id), in that order, and
    whether more follow. Keyset paging: a page costs the same wherever it is."""
    live = and_(PresenceRow.worker_id.is_not(None), ReplicaRow.lease_expires_at > now)
    online = and_(live, WorkerRow.state != "revoked")
    query = _with_presence()
    if not where.include_revoked and where.state != "revoked":
        query = query.where(WorkerRow.state != "revoked")
    if where.state:
        query = query.where(WorkerRow.state == where.state)
    if where.online is True:
        query = query.where(online)
    elif where.online is False:
        query = query.where(not_(online))
    if where.replica:
        query = query.where(online, PresenceRow.replica == where.replica)
    if where.capability:
        column = {"headless": PresenceRow.headless, "computer_use": PresenceRow.computer_use}[
            where.capability
        ]
        query = query.where(online, WorkerRow.state == "active", column.is_(True))
    if where.text:
        query = query.where(_matching(where.text))
    if after is not None:
        enrolled_at, worker_id = after
        query = query.where(
            or_(
                WorkerRow.enrolled_at > enrolled_at,
                and_(WorkerRow.enrolled_at == enrolled_at, WorkerRow.id > worker_id),
            )
        )
    query = query.order_by(WorkerRow.enrolled_at, WorkerRow.id).limit(limit + 1)
    rows = s.execute(query).all()
    page = [(w, _effective(p, lease, seen)) for w, p, lease, seen in rows[:limit]]
    return page, len(rows) > limit


def _matching(text: str) -> Any:
    """Rows with `text` in the id, name, replica or labels (their JSON text: "key=value" is
    looked for as the JSON pair), ignoring case, on SQLite and PostgreSQL alike."""
    needle = text.lower()
    labels = func.lower(sql_cast(WorkerRow.labels, String))
    found = [
        func.lower(WorkerRow.id).contains(needle, autoescape=True),
        func.lower(WorkerRow.name).contains(needle, autoescape=True),
        func.lower(func.coalesce(PresenceRow.replica, "")).contains(needle, autoescape=True),
        labels.contains(needle, autoescape=True),
    ]
    if "=" in needle:
        key, value = needle.split("=", 1)
        pair = json.dumps({key: value})[1:-1]  # as the store wrote it
        found.append(labels.contains(pair, autoescape=True))
    return or_(*found)


def set_state(s: Session, worker_id: str, state: str, **values: Any) -> None:
    s.execute(update(WorkerRow).where(WorkerRow.id == worker_id).values(state=state, **values))


def set_advertisement(s: Session, worker_id: str, advertisement: dict[str, Any]) -> None:
    s.execute(
        update(WorkerRow).where(WorkerRow.id == worker_id).values(advertisement=advertisement)
    )


@dataclass(frozen=True)
class PresenceClaim:
    """A new stream of a worker: what it advertised, and the capabilities it measured usable."""

    worker_id: str
    session_id: str
    advertisement: dict[str, Any]
    available: frozenset[str]
    local_kill: LocalKill = field(default_factory=LocalKill)  # as the hello reported it


def claim_presences(
    s: Session, claims: Sequence[PresenceClaim], replica: str, now: float, lease_ttl: float
) -> dict[str, bool]:
    """Record many connects at once: advertisements, and presence rows naming `replica` that
    replace any older ones, with what each worker offers (measured and granted by its token).
    Returns worker id -> whether an admin asked it to rotate its credential (the welcome says
    so). A fixed number of statements, whatever the batch size."""
    latest = {c.worker_id: c for c in claims}  # a worker that connected twice: its last stream
    if not latest:
        return {}
    ids = sorted(latest)
    workers = cast(Table, WorkerRow.__table__)
    presence = cast(Table, PresenceRow.__table__)
    known = {
        w: (bool(rotate), list(allowed or ()))
        for w, rotate, allowed in s.execute(
            select(
                workers.c.id, workers.c.rotation_requested, workers.c.allowed_capabilities
            ).where(workers.c.id.in_(ids))
        )
    }
    claimed = [c for c in latest.values() if c.worker_id in known]
    if not claimed:
        return {}

    def offers(c: PresenceClaim, name: str) -> bool:
        allowed = known[c.worker_id][1]
        return name in c.available and (not allowed or name in allowed)

    s.execute(
        update(workers).where(workers.c.id == bindparam("w")).values(advertisement=bindparam("a")),
        [{"w": c.worker_id, "a": c.advertisement} for c in claimed],
    )
    s.execute(delete(presence).where(presence.c.worker_id.in_(ids)))
    s.execute(
        insert(presence),
        [
            {
                "worker_id": c.worker_id,
                "replica": replica,
                "session_id": c.session_id,
                "connected_at": now,
                "last_heartbeat_at": now,
                "lease_expires_at": now + lease_ttl,
                "headless": offers(c, "headless"),
                "computer_use": offers(c, "computer_use"),
                **_local_kill_values(c.local_kill),
            }
            for c in claimed
        ],
    )
    return {w: rotate for w, (rotate, _) in known.items()}


def _local_kill_values(state: LocalKill) -> dict[str, Any]:
    return {
        "local_kill_since": state.since if state.engaged else None,
        "local_kill_means": state.means if state.engaged else "",
        "local_kill_reason": state.reason if state.engaged else "",
    }


def set_local_kills(s: Session, reports: Sequence[tuple[str, str, LocalKill]]) -> None:
    """Record what workers reported of their own kill switch (worker id, session id, state):
    on the presence row of that stream only (a newer stream's row has its own hello's)."""
    if not reports:
        return
    table = cast(Table, PresenceRow.__table__)
    columns = ("local_kill_since", "local_kill_means", "local_kill_reason")
    s.execute(
        update(table)
        .where(table.c.worker_id == bindparam("w"), table.c.session_id == bindparam("sid"))
        .values({c: bindparam(f"v_{c}") for c in columns}),
        [
            {"w": w, "sid": sid, **{f"v_{c}": v for c, v in _local_kill_values(state).items()}}
            for w, sid, state in reports
        ],
    )


@dataclass(frozen=True)
class LocalKillRow:
    worker_id: str
    worker_name: str
    state: LocalKill


def local_kills(
    s: Session, now: float, limit: int, *, owner_id: str = ""
) -> tuple[int, list[LocalKillRow]]:
    """Online workers reporting their own kill switch engaged: how many, and the `limit` most
    recently engaged. With `owner_id`: only workers that owner's runs asked to control."""
    query = (
        select(
            PresenceRow.worker_id,
            WorkerRow.name,
            PresenceRow.local_kill_since,
            PresenceRow.local_kill_means,
            PresenceRow.local_kill_reason,
        )
        .join(WorkerRow, WorkerRow.id == PresenceRow.worker_id)
        .join(ReplicaRow, ReplicaRow.name == PresenceRow.replica)
        .where(
            PresenceRow.local_kill_since.is_not(None),
            ReplicaRow.lease_expires_at > now,
            WorkerRow.state != "revoked",
        )
    )
    if owner_id:
        query = query.where(
            exists().where(
                ApprovalRow.owner_id == owner_id, ApprovalRow.worker_id == PresenceRow.worker_id
            )
        )
    count = s.execute(select(func.count()).select_from(query.subquery())).scalar_one()
    rows = s.execute(
        query.order_by(PresenceRow.local_kill_since.desc(), PresenceRow.worker_id).limit(limit)
    ).all()
    return count, [
        LocalKillRow(w, name, LocalKill(True, float(since or 0.0), means, why))
        for w, name, since, means, why in rows
    ]


def release_presences(s: Session, sessions: Sequence[tuple[str, str]]) -> None:
    """Remove the presence rows of streams that ended (worker id, session id); a row a newer
    stream of the worker has replaced stays."""
    if not sessions:
        return
    table = cast(Table, PresenceRow.__table__)
    s.execute(
        delete(table).where(
            table.c.worker_id == bindparam("w"), table.c.session_id == bindparam("sid")
        ),
        [{"w": w, "sid": sid} for w, sid in sessions],
    )


def revoked_since(s: Session, since: float) -> list[str]:
    """Workers revoked at or after `since`: the change feed replicas cut streams from."""
    rows = s.execute(
        select(WorkerRow.id).where(WorkerRow.state == "revoked", WorkerRow.revoked_at >= since)
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
