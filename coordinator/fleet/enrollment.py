"""Enrollment: expiring tokens that an admin hands out, exchanged once for a worker credential."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from sqlalchemy.orm import Session

from coordinator.model import capabilities
from coordinator.model.identity import Principal
from coordinator.security import audit
from coordinator.security.certificates import WorkerCertificates, row_for
from coordinator.store import Database, principals as principal_queries, workers as worker_queries
from coordinator.store.models import EnrollmentTokenRow, WorkerRow
from shared.advertisement import HelloLimits
from shared.credentials import SecretKind, kind_of, new_secret, secret_hash
from shared.errors import (
    AuthenticationError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)
from shared.ids import new_id
from shared.text import refuse_control
from shared.timestamps import iso

MAX_TTL = 30 * 24 * 3600.0
TOKEN_ID = re.compile(r"enr_[A-Za-z0-9]{1,60}")
MAX_USES = 10_000


@dataclass(frozen=True)
class EnrollmentToken:
    id: str
    secret: str
    capabilities: tuple[str, ...]
    uses: int
    expires_at: float


@dataclass(frozen=True)
class Enrolled:
    worker_id: str
    credential: str
    allowed_capabilities: tuple[str, ...]
    certificate_pem: str = ""  # signed when the worker sent a CSR and the coordinator has a CA


async def create_token(
    db: Database,
    creator: Principal,
    *,
    capability_names: list[str],
    ttl: float,
    uses: int,
) -> EnrollmentToken:
    unknown = sorted(set(capability_names) - set(capabilities.ALL))
    if unknown:
        raise InvalidArgumentError(
            f"capabilities: unknown {', '.join(unknown)} (known: {', '.join(capabilities.ALL)})"
        )
    if not 0 < ttl <= MAX_TTL:
        raise InvalidArgumentError(f"ttl: must be between 1 second and {int(MAX_TTL)} seconds")
    if not 1 <= uses <= MAX_USES:
        raise InvalidArgumentError(f"uses: must be between 1 and {MAX_USES}")
    token_id = new_id("enr")
    secret = new_secret(SecretKind.ENROLLMENT, token_id)
    now = time.time()
    caps = tuple(sorted(set(capability_names)))
    await db.write(
        principal_queries.add,
        EnrollmentTokenRow(
            id=token_id,
            secret_hash=secret_hash(secret),
            capabilities=list(caps),
            uses_total=uses,
            uses_left=uses,
            expires_at=now + ttl,
            created_at=now,
            created_by=creator.id,
        ),
    )
    return EnrollmentToken(token_id, secret, caps, uses, now + ttl)


@dataclass(frozen=True)
class TokenInfo:
    """An enrollment token as listed: never its secret (only its hash is stored anyway)."""

    id: str
    capabilities: tuple[str, ...]
    uses: int
    used: int
    expires_at: float
    revoked: bool
    created_at: float


def _info(row: EnrollmentTokenRow) -> TokenInfo:
    return TokenInfo(
        id=row.id,
        capabilities=tuple(row.capabilities),
        uses=row.uses_total,
        used=row.uses_total - row.uses_left,
        expires_at=row.expires_at,
        revoked=row.revoked_at is not None,
        created_at=row.created_at,
    )


async def list_tokens(db: Database) -> list[TokenInfo]:
    """Every enrollment token, newest first: expired, used up and revoked ones too."""

    def read(s: Session) -> list[TokenInfo]:
        return [_info(row) for row in principal_queries.enrollment_tokens(s)]

    return await db.read(read)


async def revoke_token(db: Database, by: audit.Actor, token_id: str) -> TokenInfo:
    """From now on the token enrolls no worker. Revoking a revoked token changes nothing and
    says so with the same answer; workers it already enrolled keep their credentials."""
    if not TOKEN_ID.fullmatch(token_id):
        raise InvalidArgumentError(
            f"id: an enrollment token's id (enr_..., see `deskfleet tokens list`), not"
            f" {token_id[:40]!r}"
        )

    def unit(s: Session) -> TokenInfo:
        row = principal_queries.enrollment_token(s, token_id)
        if row is None:
            raise NotFoundError(f"no enrollment token {token_id!r} (see `deskfleet tokens list`)")
        if row.revoked_at is None:
            row.revoked_at = time.time()
            s.flush()
            audit.record(s, by, "token.revoke", row.id, used=row.uses_total - row.uses_left)
        return _info(row)

    return await db.write(unit)


def _check_labels(labels: dict[str, str], limits: HelloLimits) -> None:
    """The hello's rule for labels (`HelloLimits.labels_refusal`, counted in UTF-8 bytes): a
    worker enrolled with labels every hello refuses would retry its connection forever."""
    refusal = limits.labels_refusal(labels, where="")
    if refusal:
        raise InvalidArgumentError(
            f"{refusal} (a worker's labels travel in every hello; the operator sets the limit:"
            " serve --hello-limit)"
        )
    for key, value in labels.items():
        if not key:
            raise InvalidArgumentError("labels: a key must not be empty")
        refuse_control("labels key", key)
        refuse_control(f"labels[{key!r}]", value)


async def enroll(
    db: Database,
    secret: str,
    name: str,
    labels: dict[str, str],
    *,
    csr_pem: str = "",
    certificates: WorkerCertificates | None = None,
    limits: HelloLimits,
) -> Enrolled:
    """Exchange an enrollment token for a new worker's credential (one use of the token), and
    sign its certificate request when this coordinator has a CA. The labels are held to the
    bounds `limits` sets for every hello (the coordinator's `serve --hello-limit`)."""
    if kind_of(secret) is not SecretKind.ENROLLMENT:
        raise AuthenticationError(
            "not an enrollment token (they start with dfe_): create one with"
            " `deskfleet tokens create`"
        )
    name = name.strip()
    if not name or len(name) > 200:
        raise InvalidArgumentError("name: must be 1-200 characters")
    refuse_control("name", name)
    _check_labels(labels, limits)
    now = time.time()
    worker_id = new_id("wkr")
    credential = new_secret(SecretKind.WORKER, worker_id)
    # Signed before the transaction: a malformed request costs no use of the token.
    issued = certificates.sign(worker_id, csr_pem) if certificates is not None and csr_pem else None

    def exchange(s: Session) -> tuple[str, ...]:
        token = principal_queries.enrollment_token_by_hash(s, secret_hash(secret))
        if token is None:
            raise AuthenticationError("unknown enrollment token")
        if token.revoked_at is not None:
            raise PermissionDeniedError(
                f"enrollment token {token.id} was revoked at {iso(token.revoked_at)}; ask an"
                " admin for a new one"
            )
        if token.expires_at <= now:
            raise AuthenticationError(
                f"enrollment token {token.id} expired at {iso(token.expires_at)}; ask an admin"
                " for a new one"
            )
        if not principal_queries.consume_enrollment_use(s, token.id):
            s.refresh(token)  # a revocation may have committed since the read above
            if token.revoked_at is not None:
                raise PermissionDeniedError(
                    f"enrollment token {token.id} was revoked at {iso(token.revoked_at)}; ask"
                    " an admin for a new one"
                )
            raise PermissionDeniedError(
                f"enrollment token {token.id} has been used up ({token.uses_total} of"
                f" {token.uses_total} uses); ask an admin for a new one"
            )
        worker_queries.add_worker(
            s,
            WorkerRow(
                id=worker_id,
                name=name,
                secret_hash=secret_hash(credential),
                state="active",
                labels=dict(labels),
                allowed_capabilities=list(token.capabilities),
                advertisement={},
                enrolled_at=now,
                revoked_at=None,
                enrollment_token_id=token.id,
            ),
        )
        if issued is not None:
            worker_queries.record_certificate(s, row_for(worker_id, issued, now))
        return tuple(token.capabilities)

    allowed = await db.write(exchange)
    return Enrolled(worker_id, credential, allowed, issued.pem if issued is not None else "")
