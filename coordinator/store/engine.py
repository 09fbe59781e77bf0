"""Database URLs, engines and units of work; the store's errors become StoreUnavailableError."""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from shared.errors import InvalidArgumentError, StoreUnavailableError


class Dialect(enum.Enum):
    SQLITE = "sqlite"
    POSTGRESQL = "postgresql"


class SchemaError(Exception):
    """The store's schema is missing or not the version this coordinator needs."""


def parse_db_url(url: str, *, asynchronous: bool) -> tuple[Dialect, str]:
    """Map a user's `sqlite:///PATH` or `postgresql://...` URL to SQLAlchemy's, with our driver."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise InvalidArgumentError(f"--db: not a database URL: {url!r}") from exc
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if not parsed.database:
            raise InvalidArgumentError(
                "--db: sqlite URLs need a file path, e.g. sqlite:///fleet.db"
            )
        driver = "aiosqlite" if asynchronous else "pysqlite"
        return Dialect.SQLITE, parsed.set(drivername=f"sqlite+{driver}").render_as_string(False)
    if backend in ("postgresql", "postgres"):
        return Dialect.POSTGRESQL, parsed.set(drivername="postgresql+psycopg").render_as_string(
            False
        )
    raise InvalidArgumentError(
        f"--db: unsupported database {backend!r}; use sqlite:///PATH or postgresql://USER@HOST/DB"
    )


def sqlite_path(url: str) -> Path | None:
    parsed = make_url(url)
    return (
        Path(parsed.database) if parsed.get_backend_name() == "sqlite" and parsed.database else None
    )


def _tune_sqlite(engine: AsyncEngine, *, immediate: bool) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Take over transaction control from the driver so that writers can BEGIN IMMEDIATE:
        # a deferred transaction that upgrades to a write fails at once with SQLITE_BUSY in WAL.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=5000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


class Database:
    """The coordinator's connection to its store.

    SQLite gets one writer connection (writes are serialized in-process instead of fighting
    over the file lock) and a small pool of readers; PostgreSQL uses one pool for both.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.dialect, async_url = parse_db_url(url, asynchronous=True)
        if self.dialect is Dialect.SQLITE:
            self._writer = create_async_engine(async_url, pool_size=1, max_overflow=0)
            self._reader = create_async_engine(async_url, pool_size=4, max_overflow=4)
            _tune_sqlite(self._writer, immediate=True)
            _tune_sqlite(self._reader, immediate=False)
        else:
            self._writer = create_async_engine(
                async_url, pool_size=10, max_overflow=10, pool_pre_ping=True, pool_timeout=5
            )
            self._reader = self._writer
        self._write_sessions = async_sessionmaker(self._writer, expire_on_commit=False)
        self._read_sessions = async_sessionmaker(self._reader, expire_on_commit=False)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncSession]:
        """One read-write unit of work: committed on exit, rolled back on error."""
        async with _store_errors(), self._write_sessions() as session, session.begin():
            yield session

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncSession]:
        """One read-only unit of work (a consistent snapshot)."""
        async with _store_errors(), self._read_sessions() as session, session.begin():
            yield session

    async def check_schema(self, expected_revision: str) -> None:
        """Fail with SchemaError unless the store was initialised at `expected_revision`."""
        try:
            async with self.read() as s:
                found = (await s.execute(text("SELECT version_num FROM alembic_version"))).scalar()
        except StoreUnavailableError as exc:
            raise SchemaError(
                "the store has no deskfleet schema; run `deskfleet-coordinator init` first"
                f" ({exc.message})"
            ) from exc
        if found != expected_revision:
            raise SchemaError(
                f"the store's schema is at revision {found}, this coordinator needs "
                f"{expected_revision}; run `deskfleet-coordinator init` to upgrade it"
            )

    async def close(self) -> None:
        await self._writer.dispose()
        if self._reader is not self._writer:
            await self._reader.dispose()


@asynccontextmanager
async def _store_errors() -> AsyncIterator[None]:
    try:
        yield
    except IntegrityError:
        raise
    except (DBAPIError, PoolTimeoutError, OSError) as exc:
        raise StoreUnavailableError(
            f"the coordinator's store is unavailable: {_reason(exc)}"
        ) from exc


def _reason(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    return str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
