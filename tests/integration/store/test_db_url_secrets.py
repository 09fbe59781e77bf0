"""A PostgreSQL password given in `--db` (as `user:PASSWORD@` or libpq's `?password=`) is never
printed by `serve`: the store with no schema was named with the command to run next, and
that command showed a `?password=` in full. A real, empty database on the local server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.postgres import postgres_available, scratch_database
from tests.integration.store.test_db_urls import refused

pytestmark = [pytest.mark.postgres, pytest.mark.slow]  # slow: CI runs it


@pytest.fixture(scope="module")
def empty_db() -> Iterator[str]:
    """One empty database for the module: every test only reads that it has no schema."""
    if not postgres_available():
        pytest.skip("no PostgreSQL server answers on 127.0.0.1:5432")
    with scratch_database() as url:
        yield url


SECRET = "S3cretQueryPw"


@pytest.mark.parametrize(
    "secret_at", ["?password={s}", "?sslmode=prefer&password={s}", "?sslpassword={s}"]
)
def test_a_password_in_the_query_is_masked_in_the_command_to_run(
    tmp_path: Path, empty_db: str, secret_at: str
) -> None:
    said = refused(tmp_path, "serve", empty_db + secret_at.format(s=SECRET))
    assert SECRET not in said
    assert "has no deskfleet schema; run `deskfleet-coordinator init --db postgresql://" in said
    assert "password=***" in said, said


def test_a_password_before_the_host_is_masked_too(tmp_path: Path, empty_db: str) -> None:
    said = refused(tmp_path, "serve", empty_db.replace("://root@", f"://root:{SECRET}@"))
    assert SECRET not in said
    assert "root:***@127.0.0.1" in said, said
