"""The audit log: administrative acts (tokens, users, workers, approvals, kill switches,
secrets), each with who, when and from where.

An entry is written in the same transaction as the act it records, so the log never claims an
act that did not happen, nor misses one that did. It never holds a secret: only names and ids.
"""

from __future__ import annotations

import contextvars
import ipaddress
import json
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from coordinator.store import Database
from coordinator.store.models import AuditRow
from shared.errors import InvalidArgumentError

if TYPE_CHECKING:  # principals records its own acts here: no import at run time
    from coordinator.model.identity import Principal

MAX_LIMIT = 10_000
PEER_CHARS = 200  # the stored column's width
ZONE = re.compile(r"[A-Za-z0-9_.-]{1,15}")  # an IPv6 zone as interfaces are named
DEFAULT_LIMIT = 1000

# The caller's address, set by the guard for each RPC. Read it on the event loop (units of
# work run on store threads, which do not see it) and pass it into the unit.
_peer: contextvars.ContextVar[str] = contextvars.ContextVar("peer", default="")


def set_peer(peer: str, console_client: str = "") -> None:
    """`console_client`: the browser's address as the web console reports it. It is recorded
    beside the peer, marked as reported (anyone can send it), and decides nothing."""
    shown = f"{peer} via console, reported {_address(console_client)}" if console_client else peer
    _peer.set(shown[:PEER_CHARS])


def peer() -> str:
    """The caller's address as recorded (see `set_peer`), on the event loop."""
    return _peer.get()


def _address(text: str) -> str:
    """The address as recorded: an IP address, its IPv6 zone (`%eth0`) kept only when it looks
    like an interface name (Python accepts any text there)."""
    try:
        address = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return "an invalid address"
    zone = getattr(address, "scope_id", None)
    if zone is not None and not ZONE.fullmatch(zone):
        return "an invalid address"
    return str(address)


@dataclass(frozen=True)
class Actor:
    """Who acts, and from where: captured on the event loop before the unit of work."""

    principal: Principal
    peer: str


def actor(who: Principal) -> Actor:
    return Actor(who, _peer.get())


def record(s: Session, by: Actor, action: str, subject: str, **detail: Any) -> None:
    s.add(
        AuditRow(
            at=time.time(),
            actor_id=by.principal.id,
            actor_name=by.principal.name,
            actor_role=by.principal.role.value,
            peer=by.peer[:PEER_CHARS],
            action=action,
            target=subject[:200],
            detail=json.dumps(detail, sort_keys=True, ensure_ascii=True),
        )
    )


async def write(db: Database, by: Actor, action: str, subject: str, **detail: Any) -> None:
    """Record an act whose own transaction lies outside this module's reach."""
    await db.write(lambda s: record(s, by, action, subject, **detail))


async def entries(db: Database, since: float, limit: int) -> tuple[Sequence[AuditRow], bool]:
    """Entries at or after `since`, oldest first; True when `limit` cut the list."""
    limit = limit or DEFAULT_LIMIT
    if not 0 < limit <= MAX_LIMIT:
        raise InvalidArgumentError(f"limit: between 1 and {MAX_LIMIT}")
    if not math.isfinite(since) or since < 0:
        raise InvalidArgumentError("since: epoch seconds, not negative")

    def unit(s: Session) -> Sequence[AuditRow]:
        query = select(AuditRow).where(AuditRow.at >= since).order_by(AuditRow.seq)
        return s.execute(query.limit(limit + 1)).scalars().all()

    rows = await db.read(unit)
    return rows[:limit], len(rows) > limit
