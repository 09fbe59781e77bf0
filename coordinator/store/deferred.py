"""Rows a write transaction only inserts (journal events, receipts), written as plain Core
statements, one `executemany` per table, instead of as ORM objects.

The ledger's hot path adds several journal events and a receipt per action and never reads or
changes them again in the same transaction: as ORM objects, each paid the unit of work's
bookkeeping (instance state, attribute events, flush planning), about as much as the
statement that writes it. Here each is a dict queued in the session and inserted at commit,
after the ORM's own flush (their foreign keys name runs and actions that flush may insert).

A statement run through the session that may read a table with rows queued writes them first
(`_before_orm_execute`), so that a read inside the transaction still sees the transaction's own
rows, as the ORM's autoflush did. Statements run on the connection directly (`conn.execute`)
bypass that check: none of them reads the tables queued here.
"""

from __future__ import annotations

import weakref
from typing import Any, cast

from sqlalchemy import Table, TextClause, event, insert
from sqlalchemy.orm import ORMExecuteState, Session
from sqlalchemy.sql.util import find_tables

from coordinator.store.models import JournalRow, ReceiptRow

KEY = "deskfleet.deferred_rows"
JOURNAL = cast(Table, JournalRow.__table__)
RECEIPTS = cast(Table, ReceiptRow.__table__)
# Built once: an insert of a table's every column, run with a list of rows (executemany, which
# SQLAlchemy sends as multi-row VALUES on SQLite and PostgreSQL).
_INSERTS = {table: insert(table) for table in (JOURNAL, RECEIPTS)}


def add(s: Session, table: Table, row: dict[str, Any]) -> None:
    """Queue `row` (every column of `table`) for insertion before the transaction commits."""
    queued: dict[Table, list[dict[str, Any]]] = s.info.setdefault(KEY, {})
    queued.setdefault(table, []).append(row)


def queued(s: Session, table: Table) -> list[dict[str, Any]]:
    """The rows of `table` this transaction has queued and not written yet."""
    found: dict[Table, list[dict[str, Any]]] = s.info.get(KEY) or {}
    return found.get(table, [])


def write(s: Session) -> None:
    """Write the queued rows now: the ORM's pending changes first (the rows' foreign keys may
    name what they insert), then one statement per table, receipts before the journal."""
    rows: dict[Table, list[dict[str, Any]]] | None = s.info.pop(KEY, None)
    if not rows:
        return
    s.flush()
    conn = s.connection()
    for table in (RECEIPTS, JOURNAL):
        batch = rows.get(table)
        if batch:
            conn.execute(_INSERTS[table], batch)


# The tables each statement reads, found once per statement object: the hot path's statements
# are built once, at import, and finding them costs about 70 us.
_READS: weakref.WeakKeyDictionary[Any, frozenset[Any]] = weakref.WeakKeyDictionary()


def _reads(statement: Any) -> frozenset[Any]:
    """The tables `statement` names anywhere (subqueries included); empty when it cannot be
    told (a text statement)."""
    found = _READS.get(statement)
    if found is None:
        found = (
            frozenset()
            if isinstance(statement, TextClause)
            else frozenset(find_tables(statement, include_crud=True, include_joins=True))
        )
        _READS[statement] = found
    return found


def _before_orm_execute(state: ORMExecuteState) -> None:
    rows: dict[Table, list[dict[str, Any]]] | None = state.session.info.get(KEY)
    if not rows:
        return
    # The entities a statement selects name its main tables; the ones it joins or nests
    # (`all_mappers` lists only the selected ones) come from the statement itself, found once
    # per statement object. One that names no table (text) may read anything.
    if any(m.local_table in rows for m in state.all_mappers):
        write(state.session)
        return
    tables = _reads(state.statement)
    if not tables or not tables.isdisjoint(rows):
        write(state.session)


@event.listens_for(Session, "before_commit")
def _before_commit(s: Session) -> None:
    write(s)


# On every session, not only the store's: a session made elsewhere (a test's, a tool's) that
# queued rows must not drop them. Registered when the store is imported, so before any hook a
# running coordinator adds (the owner limits' settlement, `runs/quota.py`, flushes last).
event.listen(Session, "do_orm_execute", _before_orm_execute)
