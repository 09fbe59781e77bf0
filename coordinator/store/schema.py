"""Create or upgrade the store's schema with the Alembic migrations shipped in this package."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

from coordinator.store.engine import create_store_engine

MIGRATIONS = Path(__file__).parent / "migrations"


def _config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None, "no migrations shipped"
    return head


def sync_engine(url: str) -> Engine:
    return create_store_engine(url, pool_size=1)


def upgrade(url: str) -> tuple[str | None, str]:
    """Bring the store to the head revision; returns (revision before, revision after)."""
    engine = sync_engine(url)
    try:
        with engine.begin() as conn:
            before = MigrationContext.configure(conn).get_current_revision()
            cfg = _config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
        return before, head_revision()
    finally:
        engine.dispose()
