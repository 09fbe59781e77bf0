"""`--db` as the coordinator's programs take it: `serve` says which store it opened, and a
PostgreSQL role, database or server that is not there is named in one line by `init` and
`serve`. The URL mistakes that need no server are tests/unit/store/test_db_urls.py."""

from __future__ import annotations

import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor, TimeoutError as FutureTimeout
from pathlib import Path

import pytest

from tests.harness import BIN, CoordinatorProcess, base_env
from tests.harness.postgres import PG_ADMIN_URL, postgres_available

# slow: each case starts the coordinator program; CI runs it (the rules: tests/unit/store)
pytestmark = pytest.mark.slow


def run(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BIN / "deskfleet-coordinator", *argv],
        capture_output=True,
        text=True,
        env=base_env(tmp_path),
        cwd=tmp_path,
        timeout=60,
    )


def refused(tmp_path: Path, command: str, url: str) -> str:
    """`command --db url` refused: exit 1, no traceback, its one line of stderr."""
    extra = ["--admin-token-file", str(tmp_path / "t")] if command == "init" else []
    serve = ["--listen", "127.0.0.1:0"] if command == "serve" else []
    done = run(tmp_path, command, "--db", url, *extra, *serve)
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("deskfleet-coordinator: ")
    return lines[0].removeprefix("deskfleet-coordinator: ")


def test_serve_says_which_store_it_opened(coordinator: CoordinatorProcess) -> None:
    # Printed after the lines scripts read (listening, worker streams, metrics, console).
    # Read directly: the line may already sit in the pipe's buffer, where select() cannot see
    # it. A thread, so that a coordinator that never prints it fails the test, not hangs it.
    assert coordinator.proc is not None and coordinator.proc.stdout is not None
    with ThreadPoolExecutor(1) as pool:
        reading = pool.submit(coordinator.proc.stdout.readline)
        try:
            line = reading.result(timeout=10).strip()
        except FutureTimeout:
            coordinator.stop()  # ends the read at EOF
            raise AssertionError("serve printed nothing after its listening line") from None
    assert line == f"deskfleet-coordinator r1 store: sqlite at {coordinator.workdir}/fleet.db"


@pytest.mark.parametrize("command", ["init", "serve"])
def test_nothing_listening_at_the_postgresql_address(tmp_path: Path, command: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    said = refused(tmp_path, command, f"postgresql://deskfleet@127.0.0.1:{port}/deskfleet")
    assert said == f"nothing listening at 127.0.0.1:{port} (is PostgreSQL running?)"


def pg_server(name: str) -> str:
    """A URL on the local PostgreSQL server's address with another user or database."""
    if not postgres_available():
        pytest.skip("no PostgreSQL server answers on 127.0.0.1:5432")
    return PG_ADMIN_URL.rsplit("@", 1)[1].rsplit("/", 1)[0] + name


@pytest.mark.postgres
@pytest.mark.parametrize("command", ["init", "serve"])
def test_a_role_that_does_not_exist(tmp_path: Path, command: str) -> None:
    url = f"postgresql://no_such_role@{pg_server('/test')}"
    assert refused(tmp_path, command, url) == (
        'authentication failed for role "no_such_role" at 127.0.0.1:5432: PostgreSQL has no'
        " such role; create it (createuser no_such_role) or name another user in --db"
    )


@pytest.mark.postgres
@pytest.mark.parametrize("command", ["init", "serve"])
def test_a_database_that_does_not_exist(tmp_path: Path, command: str) -> None:
    user = PG_ADMIN_URL.split("//", 1)[1].split("@", 1)[0]
    url = f"postgresql://{user}@{pg_server('/no_such_db')}"
    assert refused(tmp_path, command, url) == (
        'PostgreSQL at 127.0.0.1:5432 has no database "no_such_db"; create it (createdb'
        " no_such_db), then run `deskfleet-coordinator init --db URL`"
    )


@pytest.mark.postgres
def test_serve_on_an_empty_postgresql_database_says_to_run_init(
    tmp_path: Path, pg_url: str
) -> None:
    assert refused(tmp_path, "serve", pg_url) == (
        f"the store (postgresql at 127.0.0.1:5432/{pg_url.rsplit('/', 1)[1]} as"
        f" {pg_url.split('//', 1)[1].split('@', 1)[0]}) has no deskfleet schema; run"
        f" `deskfleet-coordinator init --db {pg_url}` first"
    )
