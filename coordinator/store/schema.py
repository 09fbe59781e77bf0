"""Create or upgrade the store's schema with the Alembic migrations shipped in this package.

Alembic (with Mako, which it pulls in) is imported only by `init`'s upgrade: `serve` needs
no more than the head revision's name to check the store against, and reads it from the
migration files themselves, which keeps a third of a second of imports off every start.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from coordinator.store.engine import create_store_engine, store_problem
from shared.errors import StoreUnavailableError

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"


def _config() -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


# A migration's `revision = "..."` / `down_revision = ...` lines (optionally annotated), as
# the migration template writes them at the start of a line.
_REVISION_LINE = re.compile(r"^(revision|down_revision)\s*(?::[^=]*)?=\s*(.+?)\s*$", re.MULTILINE)


def _revisions(source: str) -> tuple[str | None, str | tuple[str, ...] | None]:
    """A migration file's module-level `revision` and `down_revision` (plain literals)."""
    found = {m[1]: ast.literal_eval(m[2]) for m in _REVISION_LINE.finditer(source)}
    revision, down = found.get("revision"), found.get("down_revision")
    assert revision is None or isinstance(revision, str)
    if isinstance(down, list):
        down = tuple(down)
    assert down is None or isinstance(down, str | tuple)
    return revision, down


def head_revision() -> str:
    """The one revision no shipped migration revises: what Alembic's script directory calls
    the current head (tests/integration/store/test_store.py holds the two to the same answer)."""
    revisions: set[str] = set()
    revised: set[str] = set()
    for path in sorted((MIGRATIONS / "versions").glob("*.py")):
        revision, down = _revisions(path.read_text())
        if revision is None:
            continue  # __init__.py
        revisions.add(revision)
        revised.update((down,) if isinstance(down, str) else down or ())
    heads = revisions - revised
    assert len(heads) == 1, f"the shipped migrations have {len(heads)} heads: {sorted(heads)}"
    return heads.pop()


def sync_engine(url: str) -> Engine:
    return create_store_engine(url, pool_size=1)


def upgrade(url: str) -> tuple[str | None, str]:
    """Bring the store to the head revision; returns (revision before, revision after)."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    engine = sync_engine(url)
    try:
        with engine.begin() as conn:
            before = MigrationContext.configure(conn).get_current_revision()
            cfg = _config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
        return before, head_revision()
    except DBAPIError as exc:
        # A role, a password, a database or a server missing: said in one line, not a traceback.
        problem = store_problem(url, exc)
        if problem is None:
            raw = str(exc.orig).strip().splitlines()
            problem = f"the schema upgrade failed: {raw[0] if raw else type(exc.orig).__name__}"
        raise StoreUnavailableError(problem) from exc
    finally:
        engine.dispose()
