"""Per-owner limits: runs in flight, bytes stored and secrets, checked when an owner adds.

Every write transaction notes what it adds for an owner (`store/quotas.py`): the journal
charges each event, receipts their body, a submission its plan's arguments and the run's
spec, and every other row an owner writes its text (secrets, kill switch reasons, guidance,
desktop requests and acts, approvals' answers); a run that becomes active (submit, goal,
desktop request, retry); a write refused past the byte limit though it starts no run (a
secret); a new secret. Just before the commit the notes are settled: one row update per owner
adds the bytes, and when a run became active, the owner's runs in flight are counted through
the (owner, status) index, at most limit + 1 of them (secrets likewise, through their primary
key). A transaction past a limit is refused whole with RESOURCE_EXHAUSTED naming the limit,
and nothing of it is written. The cost of the check does not grow with the owner's history.

Bytes already stored are never refused (a receipt is work done), nor is a kill switch, a
cancel or guidance to a run in flight: they count against the next run. Limits come from
`serve --owner-max-active-runs / --owner-max-stored-bytes / --owner-max-secrets`; an admin
overrides the first two per owner (`deskfleet users limits NAME ...`). 0 means no limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from coordinator.model.identity import Principal, Role
from coordinator.model.settings import (
    DEFAULT_OWNER_MAX_ACTIVE_RUNS,
    DEFAULT_OWNER_MAX_SECRETS,
    DEFAULT_OWNER_MAX_STORED_BYTES,
)
from coordinator.security import audit
from coordinator.store import Database, principals as principal_queries, quotas as queries
from coordinator.store.models import PrincipalRow
from shared.errors import InvalidArgumentError, NotFoundError, ResourceExhaustedError
from shared.states import ACTIVE

MAX_LIMIT = 2**62  # a limit the store's BIGINT holds with room for the usage past it
USE_DEFAULT = -1  # in a request: the override goes, the coordinator's default applies
VIEW_COUNT_CAP = 1_000_000  # reading the usage counts past the limit (a lowered one), this far


@dataclass(frozen=True)
class OwnerLimits:
    """Limits of one owner; 0: no limit."""

    max_active_runs: int = DEFAULT_OWNER_MAX_ACTIVE_RUNS
    max_stored_bytes: int = DEFAULT_OWNER_MAX_STORED_BYTES


@dataclass(frozen=True)
class QuotaView:
    owner_id: str
    name: str
    active_runs: int
    stored_bytes: int
    limits: OwnerLimits
    overridden: tuple[bool, bool]  # (max_active_runs, max_stored_bytes) set by an admin


class Quotas:
    """The owner limits of this coordinator: settled on every commit of `db`'s writers."""

    def __init__(
        self,
        db: Database,
        defaults: OwnerLimits | None = None,
        max_secrets: int = DEFAULT_OWNER_MAX_SECRETS,
    ) -> None:
        self._db = db
        self.defaults = defaults or OwnerLimits()
        self.max_secrets = max_secrets  # per owner, whoever stores them; 0: no limit
        db.before_commit(self.settle)

    def settle(self, s: Session) -> None:
        """Apply the transaction's notes, owner by owner; refuse it past an owner's limit."""
        pending = queries.take_notes(s)
        if not pending:
            return
        s.flush()  # the runs this transaction made active must be counted
        for owner_id in sorted(pending):
            noted = pending[owner_id]
            before = queries.add_stored(s, owner_id, noted.stored_bytes)
            if noted.secrets and self.max_secrets:
                self._check_secrets(s, owner_id)
            if noted.admitted or noted.checked:
                self._check(s, owner_id, before, noted.stored_bytes, runs=bool(noted.admitted))

    def _check_secrets(self, s: Session, owner_id: str) -> None:
        # Counted after the owner's row is locked (add_stored): two secrets of one owner
        # stored at once are counted one after the other, never both against the last place.
        if queries.secrets_of(s, owner_id, self.max_secrets + 1) > self.max_secrets:
            raise ResourceExhaustedError(
                f"owner limit max_secrets={self.max_secrets}: this owner stores that many"
                " secrets already; replace one's value (same name) instead (the operator sets"
                " it: serve --owner-max-secrets)"
            )

    def _check(
        self, s: Session, owner_id: str, row: queries.Row, added: int, *, runs: bool
    ) -> None:
        limits = self._effective(row)
        if runs and limits.max_active_runs:
            active = queries.active_runs(s, owner_id, ACTIVE, limits.max_active_runs + 1)
            if active > limits.max_active_runs:
                raise ResourceExhaustedError(
                    f"owner limit max_active_runs={limits.max_active_runs}: that many runs are"
                    " in flight already; wait for one to finish or cancel one (an admin can"
                    " raise it: deskfleet users limits)"
                )
        if limits.max_stored_bytes and row.stored_bytes > limits.max_stored_bytes:
            raise ResourceExhaustedError(
                f"owner limit max_stored_bytes={limits.max_stored_bytes}: this owner stores"
                f" {row.stored_bytes - added} bytes and this would add {added} (an admin can"
                " raise it: deskfleet users limits)"
            )

    def _effective(self, row: queries.Row | None) -> OwnerLimits:
        runs = row.max_active_runs if row is not None else None
        stored = row.max_stored_bytes if row is not None else None
        return OwnerLimits(
            self.defaults.max_active_runs if runs is None else runs,
            self.defaults.max_stored_bytes if stored is None else stored,
        )

    async def view(self, who: Principal, name: str) -> QuotaView:
        """An owner's usage and limits: admins see anyone's, owners their own."""

        def unit(s: Session) -> QuotaView:
            user = _user(s, who, name)
            found = queries.quota_row(s, user.id)
            row = (
                queries.Row(found.stored_bytes, found.max_active_runs, found.max_stored_bytes)
                if found is not None
                else None
            )
            limits = self._effective(row)
            return QuotaView(
                user.id,
                user.name,
                queries.active_runs(s, user.id, ACTIVE, VIEW_COUNT_CAP),
                row.stored_bytes if row is not None else 0,
                limits,
                (
                    row is not None and row.max_active_runs is not None,
                    row is not None and row.max_stored_bytes is not None,
                ),
            )

        return await self._db.read(unit)

    async def set(
        self,
        by: audit.Actor,
        name: str,
        max_active_runs: int | None,
        max_stored_bytes: int | None,
    ) -> QuotaView:
        """Set an owner's overrides (admins only): None keeps one, USE_DEFAULT removes it."""
        for field, value in (
            ("max_active_runs", max_active_runs),
            ("max_stored_bytes", max_stored_bytes),
        ):
            if value is not None and value != USE_DEFAULT and not 0 <= value <= MAX_LIMIT:
                raise InvalidArgumentError(
                    f"{field}: 0 (no limit) to {MAX_LIMIT}, or {USE_DEFAULT} for the default"
                )
        if not name:
            raise InvalidArgumentError("name: whose limits (a user's name or id)")

        def unit(s: Session) -> None:
            user = _user(s, by.principal, name)
            found = queries.quota_row(s, user.id)
            runs = found.max_active_runs if found is not None else None
            stored = found.max_stored_bytes if found is not None else None
            if max_active_runs is not None:
                runs = None if max_active_runs == USE_DEFAULT else max_active_runs
            if max_stored_bytes is not None:
                stored = None if max_stored_bytes == USE_DEFAULT else max_stored_bytes
            queries.set_limits(s, user.id, runs, stored)
            audit.record(
                s,
                by,
                "user.limits",
                user.id,
                name=user.name,
                max_active_runs="default" if runs is None else runs,
                max_stored_bytes="default" if stored is None else stored,
            )

        await self._db.write(unit)
        return await self.view(by.principal, name)


def _user(s: Session, who: Principal, name: str) -> PrincipalRow:
    """The named user (the caller when `name` is empty); NOT_FOUND for an owner asking about
    anyone else, as if that user did not exist."""
    row = (
        s.get(PrincipalRow, who.id)
        if not name
        else s.get(PrincipalRow, name) or principal_queries.principal_by_name(s, name)
    )
    if row is None or (row.id != who.id and who.role is not Role.ADMIN):
        raise NotFoundError(f"no user {name!r}")
    return row
