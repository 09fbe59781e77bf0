"""Who is calling: admin and owner principals, workers, and how a secret is resolved to one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from coordinator.model.identity import Principal, Role
from coordinator.security import audit
from coordinator.store import Database, principals as principal_queries, workers as worker_queries
from coordinator.store.models import PrincipalRow, WorkerRow
from shared.credentials import SecretKind, kind_of, new_secret, secret_hash
from shared.errors import (
    AlreadyExistsError,
    AuthenticationError,
    InvalidArgumentError,
    MissingCredentialError,
    NotFoundError,
    RevokedError,
)
from shared.ids import new_id
from shared.text import refuse_control


@dataclass(frozen=True)
class NewUser:
    principal: Principal
    secret: str
    created_at: float


MAX_NAME = 200


class Authenticator:
    """Resolves secrets to principals, remembering each answer for `ttl` seconds.

    Every RPC authenticates, and a store read per call would cost more than the call itself.
    Only successes are remembered; a revocation on this replica is forgotten at once (`forget`),
    one made on another replica takes effect here within `ttl`.
    """

    def __init__(self, db: Database, ttl: float = 2.0, max_entries: int = 50_000) -> None:
        self._db = db
        self._ttl = ttl
        self._max = max_entries
        self._known: dict[str, tuple[Principal, float]] = {}
        self._lookups: list[tuple[str, asyncio.Future[WorkerRow | None]]] = []
        self._reads: asyncio.Task[None] | None = None

    async def authenticate(self, secret: str | None) -> Principal:
        key = secret_hash(secret) if secret else ""
        hit = self._known.get(key)
        now = time.monotonic()
        if hit is not None and hit[1] > now:
            return hit[0]
        principal = await authenticate(self._db, secret, self._worker)
        if len(self._known) >= self._max:
            self._known.clear()  # crude, and rare: entries live two seconds
        self._known[key] = (principal, now + self._ttl)
        return principal

    async def _worker(self, digest: str) -> WorkerRow | None:
        """The worker with this credential hash. The lookups that wait together share one
        read: a fleet reconnecting to a restarted coordinator, where nothing is remembered
        yet, costs a few reads instead of one per worker. Each read starts after the lookup
        was queued, so it sees a revocation committed before the caller asked."""
        found: asyncio.Future[WorkerRow | None] = asyncio.get_running_loop().create_future()
        self._lookups.append((digest, found))
        if self._reads is None or self._reads.done():
            self._reads = asyncio.create_task(self._read_workers())
        return await found

    async def _read_workers(self) -> None:
        while self._lookups:
            batch, self._lookups = self._lookups, []
            try:
                rows = await self._db.read(worker_queries.workers_by_hash, {d for d, _ in batch})
            except Exception as exc:
                for _, found in batch:
                    if not found.done():
                        found.set_exception(exc)
                continue
            for digest, found in batch:
                if not found.done():
                    found.set_result(rows.get(digest))

    def forget(self, principal_id: str) -> None:
        for key in [k for k, (p, _) in self._known.items() if p.id == principal_id]:
            del self._known[key]


async def authenticate(
    db: Database,
    secret: str | None,
    find_worker: Callable[[str], Awaitable[WorkerRow | None]] | None = None,
) -> Principal:
    """Resolve a bearer secret to its principal, or raise Authentication/RevokedError;
    `find_worker` looks a worker up by credential hash (one store read when None)."""
    if not secret:
        raise MissingCredentialError("no credential: pass --token-file or set DESKFLEET_TOKEN_FILE")
    kind = kind_of(secret)
    digest = secret_hash(secret)
    if kind is SecretKind.WORKER:
        worker = await (
            db.read(worker_queries.worker_by_hash, digest)
            if find_worker is None
            else find_worker(digest)
        )
        if worker is None:
            raise AuthenticationError("unknown worker credential")
        if worker.state == "revoked":
            raise RevokedError(f"worker {worker.id} has been revoked")
        if worker.previous_secret_hash and worker.secret_hash == digest:
            await db.write(worker_queries.confirm_rotation, worker.id)
        return Principal(worker.id, worker.name, Role.WORKER)
    if kind is SecretKind.USER:
        row = await db.read(principal_queries.principal_by_hash, digest)
        if row is None:
            raise AuthenticationError("unknown credential")
        if row.revoked_at is not None:
            raise RevokedError(f"the credential of {row.name} has been revoked")
        return Principal(row.id, row.name, Role(row.role))
    if kind is SecretKind.ENROLLMENT:
        raise AuthenticationError(
            "an enrollment token is not a credential: use it with `deskfleet-worker enroll`"
        )
    raise AuthenticationError("malformed credential")


async def create_user(
    db: Database, name: str, role: Role, by: audit.Actor | None = None
) -> NewUser:
    name = name.strip()
    if not name or len(name) > MAX_NAME:
        raise InvalidArgumentError(f"name: must be 1-{MAX_NAME} characters")
    refuse_control("name", name)
    if role is Role.WORKER:
        raise InvalidArgumentError("role: must be owner or admin (workers enroll with a token)")
    user_id = new_id("usr")
    secret = new_secret(SecretKind.USER, user_id)
    now = time.time()
    row = PrincipalRow(
        id=user_id, name=name, role=role.value, secret_hash=secret_hash(secret), created_at=now
    )

    def unit(s: Session) -> None:
        principal_queries.add(s, row)
        if by is not None:  # `init` creates the first admin with no one to name
            audit.record(s, by, "user.create", user_id, name=name, role=role.value)

    try:
        await db.write(unit)
    except IntegrityError as exc:
        raise AlreadyExistsError(f"a user named {name!r} already exists") from exc
    return NewUser(Principal(user_id, name, role), secret, now)


@dataclass(frozen=True)
class UserInfo:
    """A user as listed: never a token (only its hash is stored anyway)."""

    id: str
    name: str
    role: Role
    created_at: float


async def list_users(db: Database) -> list[UserInfo]:
    """The admins and owners whose tokens work, oldest first."""

    def read(s: Session) -> list[UserInfo]:
        return [
            UserInfo(row.id, row.name, Role(row.role), row.created_at)
            for row in principal_queries.users(s)
        ]

    return await db.read(read)


async def rotate_user(db: Database, by: audit.Actor, name: str) -> NewUser:
    """A new secret for a user (the caller when `name` is empty); the old one stops working."""
    who = by.principal
    if len(name) > MAX_NAME:
        raise InvalidArgumentError(f"name: at most {MAX_NAME} characters")
    refuse_control("name", name)
    rotated: list[NewUser] = []

    def unit(s: Session) -> None:
        rotated.clear()
        row = (
            s.get(PrincipalRow, who.id)
            if not name
            else s.get(PrincipalRow, name) or principal_queries.principal_by_name(s, name)
        )
        if row is None or row.revoked_at is not None:
            raise NotFoundError(f"no user {name!r}")
        if row.id != who.id and who.role is not Role.ADMIN:
            # An owner learns nothing about other users, not even that they exist.
            raise NotFoundError(f"no user {name!r}")
        secret = new_secret(SecretKind.USER, row.id)
        row.secret_hash = secret_hash(secret)
        audit.record(s, by, "user.rotate", row.id, name=row.name)
        rotated.append(NewUser(Principal(row.id, row.name, Role(row.role)), secret, row.created_at))

    await db.write(unit)
    return rotated[0]


async def rotate_worker_credential(db: Database, worker: Principal) -> str:
    """A new credential for the calling worker. Its current one keeps working until the new
    one is first used, so a worker that dies before saving the new one is not locked out."""
    secret = new_secret(SecretKind.WORKER, worker.id)

    def unit(s: Session) -> None:
        row = worker_queries.worker_by_id(s, worker.id)
        if row is None or row.state == "revoked":
            raise RevokedError(f"worker {worker.id} has been revoked")
        # A previous credential still set means the last new one was never used: the worker
        # is calling with that previous one, which must stay valid.
        if not row.previous_secret_hash:
            row.previous_secret_hash = row.secret_hash
        row.secret_hash = secret_hash(secret)
        row.rotation_requested = False
        audit.record(s, audit.actor(worker), "worker.credential_rotated", worker.id)

    await db.write(unit)
    return secret


async def has_admin_secret(db: Database, secret: str) -> bool:
    row = await db.read(principal_queries.principal_by_hash, secret_hash(secret))
    return row is not None and row.role == Role.ADMIN.value and row.revoked_at is None
