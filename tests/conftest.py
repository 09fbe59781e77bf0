"""Fixtures that start real things: coordinators, workers, Xvfb, PostgreSQL databases."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.harness import (
    IN_CI,
    CoordinatorProcess,
    WorkerProcess,
    Xvfb,
    postgres_available,
)

PG_ADMIN_URL = "postgresql://root@127.0.0.1:5432/test"


def require(condition: bool, reason: str) -> None:
    """Skip (with the reason printed) where a dependency is missing; in CI, fail instead."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"CI must provide this: {reason}")
    pytest.skip(reason)


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[CoordinatorProcess]:
    """A fresh coordinator on its own SQLite store, per test."""
    proc = CoordinatorProcess(tmp_path / "coord").start()
    yield proc
    proc.stop()


@pytest.fixture
def workers(coordinator: CoordinatorProcess) -> Iterator[Callable[..., WorkerProcess]]:
    """Factory of enrolled, running workers of the test's coordinator."""
    started: list[WorkerProcess] = []

    def make(
        name: str,
        *,
        display_env: dict[str, str] | None = None,
        extra_args: tuple[str, ...] = (),
        start: bool = True,
    ) -> WorkerProcess:
        worker = WorkerProcess(coordinator, name, display_env=display_env, extra_args=extra_args)
        started.append(worker)
        return worker.start() if start else worker

    yield make
    for worker in started:
        worker.stop()


@pytest.fixture(scope="session")
def xvfb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Xvfb]:
    require(Xvfb.available(), "Xvfb and xauth are not installed (apt-get install xvfb xauth)")
    server = Xvfb(tmp_path_factory.mktemp("xvfb")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    """The project's local web site (scripts/local_site), served on loopback."""
    from scripts.local_site.server import start

    server, url = start()
    yield url
    server.shutdown()
    server.server_close()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A new, empty PostgreSQL database on the local server, dropped afterwards."""
    if not postgres_available():
        pytest.skip("no PostgreSQL server answers on 127.0.0.1:5432")
    import psycopg

    name = f"deskfleet_t_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield f"postgresql://root@127.0.0.1:5432/{name}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
