"""Journal search indexing off the write path on SQLite: no trigger indexes a new event any
more; the coordinator's indexer adds events to `journal_fts` in batches, in rowid order, and
`journal_search.indexed_to` marks how far (searches read the events past it directly).

Every event already in the store was indexed by the insert trigger, so the mark starts at
the last one. Deletes and updates keep their triggers (they are not on the write path), for
indexed events only: removing from the index an event it never held would corrupt it. A
delete also keeps the mark at or below the last rowid, so that a rowid SQLite gives out again
is indexed. PostgreSQL keeps its trigram GIN index: with fastupdate (the default) an insert
only appends to the index's pending list.
"""

from __future__ import annotations

from alembic import op

revision = "0015_search_indexer"
down_revision = "0014_replica_presence"

MARK = "(SELECT indexed_to FROM journal_search)"
LAST = "(SELECT coalesce(max(rowid), 0) FROM journal)"

UPGRADE = [
    "DROP TRIGGER journal_fts_insert",
    "DROP TRIGGER journal_fts_delete",
    "DROP TRIGGER journal_fts_update",
    "CREATE TABLE journal_search ("
    "id INTEGER PRIMARY KEY CHECK (id = 1), indexed_to INTEGER NOT NULL)",
    f"INSERT INTO journal_search (id, indexed_to) VALUES (1, {LAST})",
    "CREATE TRIGGER journal_fts_delete AFTER DELETE ON journal BEGIN"
    " INSERT INTO journal_fts(journal_fts, rowid, data)"
    f" SELECT 'delete', old.rowid, old.data WHERE old.rowid <= {MARK};"
    f" UPDATE journal_search SET indexed_to = {LAST} WHERE indexed_to > {LAST};"
    " END",
    f"CREATE TRIGGER journal_fts_update AFTER UPDATE OF data ON journal WHEN old.rowid <= {MARK}"
    " BEGIN"
    " INSERT INTO journal_fts(journal_fts, rowid, data) VALUES ('delete', old.rowid, old.data);"
    " INSERT INTO journal_fts(rowid, data) VALUES (new.rowid, new.data); END",
]

DOWNGRADE = [
    "DROP TRIGGER journal_fts_delete",
    "DROP TRIGGER journal_fts_update",
    "DROP TABLE journal_search",
    "CREATE TRIGGER journal_fts_insert AFTER INSERT ON journal BEGIN"
    " INSERT INTO journal_fts(rowid, data) VALUES (new.rowid, new.data); END",
    "CREATE TRIGGER journal_fts_delete AFTER DELETE ON journal BEGIN"
    " INSERT INTO journal_fts(journal_fts, rowid, data) VALUES ('delete', old.rowid, old.data);"
    " END",
    "CREATE TRIGGER journal_fts_update AFTER UPDATE OF data ON journal BEGIN"
    " INSERT INTO journal_fts(journal_fts, rowid, data) VALUES ('delete', old.rowid, old.data);"
    " INSERT INTO journal_fts(rowid, data) VALUES (new.rowid, new.data); END",
    # Events past the mark were never indexed.
    "INSERT INTO journal_fts(journal_fts) VALUES ('rebuild')",
]


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in UPGRADE:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in DOWNGRADE:
            op.execute(statement)
