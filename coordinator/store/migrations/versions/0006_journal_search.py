"""A substring index on journal text, so that a search reads the events that can match
instead of the whole journal: trigram GIN on PostgreSQL, an FTS5 trigram table on SQLite."""

from __future__ import annotations

from alembic import op

revision = "0006_journal_search"
down_revision = "0005_replicas"

SQLITE = [
    "CREATE VIRTUAL TABLE journal_fts USING fts5("
    "data, content='journal', content_rowid='rowid', tokenize='trigram')",
    "CREATE TRIGGER journal_fts_insert AFTER INSERT ON journal BEGIN"
    " INSERT INTO journal_fts(rowid, data) VALUES (new.rowid, new.data); END",
    "CREATE TRIGGER journal_fts_delete AFTER DELETE ON journal BEGIN"
    " INSERT INTO journal_fts(journal_fts, rowid, data) VALUES ('delete', old.rowid, old.data);"
    " END",
    "CREATE TRIGGER journal_fts_update AFTER UPDATE OF data ON journal BEGIN"
    " INSERT INTO journal_fts(journal_fts, rowid, data) VALUES ('delete', old.rowid, old.data);"
    " INSERT INTO journal_fts(rowid, data) VALUES (new.rowid, new.data); END",
    "INSERT INTO journal_fts(journal_fts) VALUES ('rebuild')",
]


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in SQLITE:
            op.execute(statement)
        return
    op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    op.execute("CREATE INDEX journal_data_trgm ON journal USING gin (lower(data) gin_trgm_ops)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name in ("journal_fts_insert", "journal_fts_delete", "journal_fts_update"):
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        op.execute("DROP TABLE IF EXISTS journal_fts")
        return
    op.execute("DROP INDEX IF EXISTS journal_data_trgm")
