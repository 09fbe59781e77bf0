"""Per-owner usage notes and the queries that settle them (see `coordinator/runs/quota.py`).

A unit of work only notes, in its session, what it adds for an owner: bytes stored (`charge`,
`charge_text`), runs that become active (`admit`), other writes that the byte limit refuses
(`check_stored`) and new secrets (`add_secret`). The notes are settled once, just before the commit,
with one row update per owner in owner order: an owner's row is locked last and briefly, and
two transactions never take owner rows in opposite orders.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, bindparam, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from coordinator.store.models import OwnerQuotaRow, RunRow, SecretRow

NOTES_KEY = "deskfleet.owner_usage"


@dataclass
class Notes:
    """What one transaction adds for one owner."""

    stored_bytes: int = 0
    admitted: int = 0  # runs that became active: the owner's limits are checked at commit
    checked: bool = False  # a write refused past the byte limit, though it starts no run
    secrets: int = 0  # secrets added (not replaced): the count limit is checked at commit


def notes(s: Session) -> dict[str, Notes]:
    found: dict[str, Notes] = s.info.setdefault(NOTES_KEY, {})
    return found


def charge(s: Session, owner_id: str, nbytes: int) -> None:
    """The owner's runs store `nbytes` more (journal events, receipts, plan arguments)."""
    notes(s).setdefault(owner_id, Notes()).stored_bytes += nbytes


def charge_text(s: Session, owner_id: str, *texts: str) -> None:
    """The owner stores these texts (UTF-8 bytes), in rows of their own or of their runs."""
    charge(s, owner_id, sum(len(text.encode("utf-8", "surrogatepass")) for text in texts))


def check_stored(s: Session, owner_id: str) -> None:
    """Refuse this transaction at commit if the owner's stored bytes pass their limit."""
    notes(s).setdefault(owner_id, Notes()).checked = True


def add_secret(s: Session, owner_id: str) -> None:
    """The owner has one secret more: the count limit and the byte limit are checked."""
    noted = notes(s).setdefault(owner_id, Notes())
    noted.secrets += 1
    noted.checked = True


def admit(s: Session, owner_id: str) -> None:
    """A run of the owner becomes active in this transaction: check the limits at commit."""
    notes(s).setdefault(owner_id, Notes()).admitted += 1


def take_notes(s: Session) -> dict[str, Notes]:
    taken: dict[str, Notes] = s.info.pop(NOTES_KEY, {})
    return taken


@dataclass(frozen=True)
class Row:
    stored_bytes: int
    max_active_runs: int | None
    max_stored_bytes: int | None


# Built once, on the tables rather than the mapped classes, and run on the session's
# connection: every ledger transaction that stores anything runs them, and the ORM's handling
# of an UPDATE ... RETURNING cost 116 us against 32 us for the statement itself (measured in
# process on SQLite). Neither statement needs the ORM: they read and write no mapped object.
_QUOTAS = cast(Table, OwnerQuotaRow.__table__)
_RUNS = cast(Table, RunRow.__table__)
_ADD_STORED = (
    update(_QUOTAS)
    .where(_QUOTAS.c.owner_id == bindparam("owner"))
    .values(stored_bytes=_QUOTAS.c.stored_bytes + bindparam("nbytes"))
    .returning(_QUOTAS.c.stored_bytes, _QUOTAS.c.max_active_runs, _QUOTAS.c.max_stored_bytes)
)


def add_stored(s: Session, owner_id: str, nbytes: int) -> Row:
    """Add to the owner's stored bytes (creating the owner's row) and lock it; the row after."""
    values = {"owner": owner_id, "nbytes": nbytes}
    conn = s.connection()
    found = conn.execute(_ADD_STORED, values).one_or_none()
    if found is None:
        s.execute(_insert_missing(s, owner_id))
        found = conn.execute(_ADD_STORED, values).one()
    return Row(int(found[0]), found[1], found[2])


def _insert_missing(s: Session, owner_id: str) -> Any:
    insert = pg_insert if s.get_bind().dialect.name == "postgresql" else sqlite_insert
    return (
        insert(OwnerQuotaRow)
        .values(owner_id=owner_id, stored_bytes=0)
        .on_conflict_do_nothing(index_elements=["owner_id"])
    )


_ACTIVE_RUNS = select(func.count()).select_from(
    select(_RUNS.c.id)
    .where(
        _RUNS.c.owner_id == bindparam("owner"),
        _RUNS.c.status.in_(bindparam("statuses", expanding=True)),
    )
    .limit(bindparam("cap"))
    .subquery()
)


def active_runs(s: Session, owner_id: str, statuses: Sequence[str], cap: int) -> int:
    """The owner's runs in `statuses`, counted through the (owner, status) index up to `cap`.
    Runs this transaction changed count only once flushed (`Quotas.settle` flushes first)."""
    values = {"owner": owner_id, "statuses": list(statuses), "cap": cap}
    return int(s.connection().scalar(_ACTIVE_RUNS, values) or 0)


_SECRETS = cast(Table, SecretRow.__table__)
_SECRET_COUNT = select(func.count()).select_from(
    select(_SECRETS.c.name)
    .where(_SECRETS.c.owner_id == bindparam("owner"))
    .limit(bindparam("cap"))
    .subquery()
)


def secrets_of(s: Session, owner_id: str, cap: int) -> int:
    """The owner's secrets, counted through the primary key (owner, name) up to `cap`."""
    values = {"owner": owner_id, "cap": cap}
    return int(s.connection().scalar(_SECRET_COUNT, values) or 0)


def quota_row(s: Session, owner_id: str) -> OwnerQuotaRow | None:
    return s.get(OwnerQuotaRow, owner_id)


def set_limits(
    s: Session, owner_id: str, max_active_runs: int | None, max_stored_bytes: int | None
) -> None:
    """Set both overrides of the owner (None: the coordinator's default)."""
    s.execute(_insert_missing(s, owner_id))
    s.execute(
        update(OwnerQuotaRow)
        .where(OwnerQuotaRow.owner_id == owner_id)
        .values(max_active_runs=max_active_runs, max_stored_bytes=max_stored_bytes)
        .execution_options(synchronize_session=False)
    )
