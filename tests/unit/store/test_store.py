"""The schema in process: the migrations build exactly the models, and the head revision serve
checks is Alembic's. Init and the store's outages: tests/integration/store/test_store.py."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from coordinator.store.models import Base
from coordinator.store.schema import head_revision, sync_engine, upgrade


def test_migrations_build_exactly_the_models(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    assert upgrade(url) == (None, head_revision())
    engine = sync_engine(url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    # The journal's search index (an FTS5 table, its shadow tables and the indexer's mark)
    # lives outside the models.
    outside = ("journal_fts", "journal_search")
    diff = [d for d in diff if not (d[0] == "remove_table" and d[1].name.startswith(outside))]
    assert diff == []


def test_the_head_revision_serve_checks_is_alembics_head() -> None:
    """`serve` reads the head from the migration files without importing Alembic: it must
    name the revision Alembic's own script directory calls the head."""
    from alembic.script import ScriptDirectory

    from coordinator.store.schema import _config

    assert head_revision() == ScriptDirectory.from_config(_config()).get_current_head()
