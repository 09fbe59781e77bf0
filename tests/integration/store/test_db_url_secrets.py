"""A PostgreSQL password given in `--db` (as `user:PASSWORD@` or libpq's `?password=`) is never
printed by `serve`: the store with no schema was named with the command to run next, and
that command showed a `?password=` in full. A real, empty database on the local server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.store.test_db_urls import refused

pytestmark = pytest.mark.postgres

SECRET = "S3cretQueryPw"


@pytest.mark.parametrize(
    "secret_at", ["?password={s}", "?sslmode=prefer&password={s}", "?sslpassword={s}"]
)
def test_a_password_in_the_query_is_masked_in_the_command_to_run(
    tmp_path: Path, pg_url: str, secret_at: str
) -> None:
    said = refused(tmp_path, "serve", pg_url + secret_at.format(s=SECRET))
    assert SECRET not in said
    assert "has no deskfleet schema; run `deskfleet-coordinator init --db postgresql://" in said
    assert "password=***" in said, said


def test_a_password_before_the_host_is_masked_too(tmp_path: Path, pg_url: str) -> None:
    said = refused(tmp_path, "serve", pg_url.replace("://root@", f"://root:{SECRET}@"))
    assert SECRET not in said
    assert "root:***@127.0.0.1" in said, said
