"""Database URLs, engines and units of work; the store's errors become StoreUnavailableError.

Units of work are plain synchronous SQLAlchemy sessions run on worker threads: a whole
transaction costs one hop off the event loop, where an async driver pays a hop per statement
(measured here: 0.5 ms against 2 ms for the fleet query on SQLite).
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    ArgumentError,
    DataError,
    DBAPIError,
    IntegrityError,
    TimeoutError as PoolTimeoutError,
)
from sqlalchemy.orm import Session, sessionmaker

from coordinator.store import deferred  # noqa: F401  (its session hooks, before ours)
from shared.errors import (
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    StoreUnavailableError,
)
from shared.ids import new_id

log = logging.getLogger(__name__)

# deadlock_detected, serialization_failure: the transaction lost a race and may simply run again.
RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})
RETRIES = 5
# SQLite: the WAL is copied into the database file (a checkpoint) off the writer, after this
# many write transactions. Left to SQLite, the commit that takes the WAL past 1,000 pages runs
# the checkpoint itself (page copies and an fsync of the database file) before it returns, and
# every transaction queued behind it on the one writer waits: a few percent of receipts paid
# for it in their latency.
CHECKPOINT_EVERY = 100

P = ParamSpec("P")
T = TypeVar("T")


class Dialect(enum.Enum):
    SQLITE = "sqlite"
    POSTGRESQL = "postgresql"


class SchemaError(Exception):
    """The store's schema is missing or not the version this coordinator needs."""


# What a --db error offers as a good URL: four slashes make a SQLite path absolute.
GOOD_URLS = "sqlite:////abs/path/fleet.db or postgresql://user@host/db"


def parse_db_url(url: str) -> tuple[Dialect, str]:
    """Map a user's `sqlite:///PATH` or `postgresql://...` URL to SQLAlchemy's, with our driver."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        if "://" not in url and url.strip():
            # A plain file path, the commonest slip: offer it back as the URL that means it.
            raise InvalidArgumentError(
                f"--db: {url!r} is not a database URL; for that file give"
                f" sqlite:///{os.path.abspath(url)} (or postgresql://user@host/db)"
            ) from exc
        raise InvalidArgumentError(
            f"--db: not a database URL: {_masked(url)!r}; give one like {GOOD_URLS}"
        ) from exc
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if not parsed.database:
            raise InvalidArgumentError(
                f"--db: {url!r} names no file; give one like sqlite:////abs/path/fleet.db"
                " (three slashes and a relative path: relative to the current directory)"
            )
        if parsed.database == ":memory:":
            # Each connection would be a store of its own, gone when it closes: init's schema
            # would never reach serve (and the engine refused its pool options in a traceback).
            raise InvalidArgumentError(
                f"--db: {url!r} is a store in memory, which no other connection or process"
                " sees; give a file, like sqlite:////abs/path/fleet.db"
            )
        return Dialect.SQLITE, parsed.set(drivername="sqlite+pysqlite").render_as_string(False)
    if backend in ("postgresql", "postgres"):
        _check_hosts(parsed.host or "")
        return Dialect.POSTGRESQL, parsed.set(drivername="postgresql+psycopg").render_as_string(
            False
        )
    shown = backend if len(backend) <= 40 else backend[:39] + "…"  # a pasted blob, not a line
    raise InvalidArgumentError(f"--db: unsupported database {shown!r}; use {GOOD_URLS}")


def _check_hosts(hosts: str) -> None:
    """Refuse a host name no resolver takes (`db..example`, a label past 63 characters):
    the driver's lookup raised UnicodeError from inside the connection pool, a traceback."""
    for host in hosts.split(","):  # libpq takes a list of hosts
        if not host or host.startswith("/") or host.startswith("["):
            continue  # the default, a Unix socket's directory, an IPv6 address
        try:
            host.encode("idna")
        except UnicodeError as exc:
            shown = host if len(host) <= 80 else host[:79] + "…"
            raise InvalidArgumentError(
                f"--db: {shown!r} is not a host name (an empty label, or one past 63"
                " characters); check its spelling"
            ) from exc


def sqlite_path(url: str) -> Path | None:
    """The absolute path of a SQLite URL's file (`sqlite:///a/b` is `./a/b`); None otherwise."""
    dialect, _ = parse_db_url(url)
    database = make_url(url).database
    if dialect is not Dialect.SQLITE or not database or database == ":memory:":
        return None
    return Path(os.path.abspath(database))


def describe_store(url: str) -> str:
    """Where the store of `url` is, for people: `sqlite at /abs/fleet.db`, no password."""
    path = sqlite_path(url)
    if path is not None:
        return f"sqlite at {path}"
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return "sqlite in memory"
    user = f" as {parsed.username}" if parsed.username else ""
    return f"postgresql at {_pg_where(url)}/{parsed.database or parsed.username or ''}{user}"


def _masked(url: str) -> str:
    """`url` with what stands between `user:` and the host's `@` masked: for a URL that
    does not parse, so that its password is never echoed in the error that refuses it."""
    url = re.sub(r"(://[^/:@]*:).*@", r"\1***@", url)
    return re.sub(r"\b((?:ssl)?password=)[^&]*", r"\1***", url)


# Query parameters libpq takes a secret in (`?password=...` works as well as `user:pw@`).
_SECRET_PARAMS = ("password", "sslpassword")


def _secrets_of(url: str) -> list[str]:
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return []
    found = [str(parsed.password)] if parsed.password else []
    for key in _SECRET_PARAMS:
        value = parsed.query.get(key)
        found += [value] if isinstance(value, str) else list(value or ())
    return [s for s in found if s]


def without_password(url: str, text: str) -> str:
    """`text` with the password of `url`, wherever it appears, masked (a driver's message)."""
    for secret in _secrets_of(url):
        text = text.replace(secret, "***")
    return text


def shown_url(url: str) -> str:
    """`url` as a command to copy may show it: any password masked, in the query too."""
    parsed = make_url(url)
    hidden = {k: "***" for k in _SECRET_PARAMS if k in parsed.query}
    shown = parsed.update_query_dict(hidden).render_as_string(hide_password=True)
    return shown.replace("%2A%2A%2A", "***")


def require_store_file(url: str) -> None:
    """Refuse a SQLite URL whose file is missing, before anything connects: SQLite would
    create an empty file there, and a typo would leave it behind."""
    path = sqlite_path(url)
    try:
        if path is None or path.exists():
            return
    except OSError as exc:  # a name too long for the file system, a component not a directory
        raise FailedPreconditionError(
            f"--db: the SQLite path {str(path)[:120]!r}{'…' if len(str(path)) > 120 else ''}"
            f" cannot be used: {exc.strerror}"
        ) from exc
    database = make_url(url).database or ""
    if not os.path.isabs(database) and os.path.exists("/" + database):
        raise FailedPreconditionError(
            f"no database file at {path}; sqlite:///{database} is relative to the current"
            f" directory: did you mean sqlite:////{database}?"
        )
    raise FailedPreconditionError(
        f"no database file at {path}; run `deskfleet-coordinator init --db sqlite:///{path}` first"
    )


def _pg_where(url: str) -> str:
    parsed = make_url(url)
    host = parsed.host or "the local socket"
    return f"{host}:{parsed.port or 5432}" if parsed.host else host


def store_problem(url: str, exc: BaseException | None) -> str | None:
    """One line naming why the store of `url` cannot be used, when `exc` (a driver error, or
    what wraps one) is a known reason: a role, a password, a database, nothing listening."""
    while exc is not None and not isinstance(exc, DBAPIError | PoolTimeoutError | OSError):
        exc = exc.__cause__
    if exc is None:
        return None
    reason = str(getattr(exc, "orig", None) or exc)
    try:
        dialect, _ = parse_db_url(url)
    except InvalidArgumentError:
        return None
    if dialect is Dialect.SQLITE:
        path = sqlite_path(url)
        if path is not None and path.is_dir():
            return f"{path} is a directory; --db names the SQLite file, e.g. {path}/fleet.db"
        if "unable to open database file" in reason:
            return (
                f"cannot open the SQLite file at {path}: is its directory there, and"
                " readable and writable by this user?"
            )
        if "file is not a database" in reason:
            return f"{path} is not a SQLite database; check --db"
        if "readonly database" in reason:
            return f"the SQLite file at {path} is read-only for this user"
        return None
    where = _pg_where(url)
    if m := re.search(r'role "([^"]+)" does not exist', reason):
        return (
            f'authentication failed for role "{m[1]}" at {where}: PostgreSQL has no such role;'
            f" create it (createuser {m[1]}) or name another user in --db"
        )
    if m := re.search(r'password authentication failed for user "([^"]+)"', reason):
        return (
            f'authentication failed for role "{m[1]}" at {where}: check the password'
            " (in --db or ~/.pgpass)"
        )
    if m := re.search(r'database "([^"]+)" does not exist', reason):
        return (
            f'PostgreSQL at {where} has no database "{m[1]}"; create it (createdb {m[1]}),'
            " then run `deskfleet-coordinator init --db URL`"
        )
    if "Connection refused" in reason or "No such file or directory" in reason:
        return f"nothing listening at {where} (is PostgreSQL running?)"
    if "failed to resolve host" in reason or "could not translate host name" in reason:
        return f"cannot resolve the host {make_url(url).host!r} of --db; check its spelling"
    if "timeout expired" in reason or isinstance(exc, PoolTimeoutError):
        return f"no answer from {where} within 5 s (is PostgreSQL running there?)"
    if "no pg_hba.conf entry" in reason:
        return (
            f"PostgreSQL at {where} refuses this host, user or database (no pg_hba.conf entry"
            " for them)"
        )
    return None


def create_store_engine(url: str, *, immediate: bool = True, pool_size: int = 5) -> Engine:
    """An engine for `url`; SQLite connections get WAL and, for writers, BEGIN IMMEDIATE."""
    dialect, sa_url = parse_db_url(url)
    if dialect is Dialect.POSTGRESQL:
        return create_engine(
            sa_url,
            pool_size=pool_size,
            max_overflow=0,
            pool_pre_ping=True,
            pool_timeout=5,
            connect_args={"connect_timeout": 5},
        )
    engine = create_engine(
        sa_url, pool_size=pool_size, max_overflow=0, connect_args={"check_same_thread": False}
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Take over transaction control from the driver so that writers can BEGIN IMMEDIATE:
        # a deferred transaction that upgrades to a write fails at once with SQLITE_BUSY in WAL.
        dbapi_conn.isolation_level = None
        for pragma in (
            "journal_mode=WAL",
            # A writer's commit is on disk when it returns (one fsync of the WAL): a receipt is
            # acknowledged only after its batch commits, and the worker then drops its copy.
            # NORMAL would leave the last commits to a power loss. Readers never commit writes.
            "synchronous=FULL" if immediate else "synchronous=NORMAL",
            "busy_timeout=5000",
            "foreign_keys=ON",
            # A replaced or deleted value (a secret stored before sealing existed) is
            # overwritten, not left readable in a free page of the file.
            "secure_delete=ON",
        ):
            dbapi_conn.execute(f"PRAGMA {pragma}")

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


@dataclass
class Busy:
    """What the store's threads spent in the transactions of one access (writes or reads) since
    the coordinator started, added as each transaction ends (committed or rolled back).

    On SQLite one thread makes every write, so the write figures are how busy the one resource
    every receipt and dispatch queues for is; `/metrics` reports them
    (`deskfleet_store_busy_seconds_total`) and the benchmarks divide them by the work done."""

    transactions: int = 0
    unit_seconds: float = 0.0  # from BEGIN to the unit's return: its statements and Python
    commit_seconds: float = 0.0  # the commit: hooks (owner limits), the last flush, COMMIT, fsync
    cpu_seconds: float = 0.0  # the thread's CPU across both; the rest waited on the store or disk
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, unit: float, commit: float, cpu: float) -> None:
        with self._lock:  # reads run on several threads, PostgreSQL writes too
            self.transactions += 1
            self.unit_seconds += unit
            self.commit_seconds += commit
            self.cpu_seconds += cpu


class Database:
    """The coordinator's connection to its store: units of work run on store threads.

    SQLite gets one writer thread and connection (writes are serialized in-process instead of
    fighting over the file lock) and a few readers; PostgreSQL uses one pool for both.
    """

    def __init__(self, url: str, *, threads: int = 4) -> None:
        self.url = url
        self.dialect, _ = parse_db_url(url)
        self._checkpoints: ThreadPoolExecutor | None = None
        self._checkpointer: Engine | None = None
        self._writes = 0  # since the last checkpoint (SQLite)
        self._checkpointing: asyncio.Future[None] | None = None
        if self.dialect is Dialect.SQLITE:
            self._writer = create_store_engine(url, immediate=True, pool_size=1)
            event.listen(self._writer, "connect", _no_autocheckpoint)
            self._reader = create_store_engine(url, immediate=False, pool_size=threads)
            self._write_pool = ThreadPoolExecutor(1, thread_name_prefix="store-write")
            self._read_pool = ThreadPoolExecutor(threads, thread_name_prefix="store-read")
            # Its own thread and connection, so that a checkpoint delays neither writes nor reads.
            self._checkpoints = ThreadPoolExecutor(1, thread_name_prefix="store-checkpoint")
            self._checkpointer = create_store_engine(url, immediate=False, pool_size=1)
        else:
            self._writer = self._reader = create_store_engine(url, pool_size=threads * 2)
            self._write_pool = self._read_pool = ThreadPoolExecutor(
                threads * 2, thread_name_prefix="store"
            )
        self._write_sessions = sessionmaker(self._writer, expire_on_commit=False)
        self._read_sessions = sessionmaker(self._reader, expire_on_commit=False)
        # Told the kind of each store error ("conflict", "unavailable"): the metrics count them.
        self.on_error: Callable[[str], None] = _ignore
        self.busy = {"write": Busy(), "read": Busy()}

    def before_commit(self, hook: Callable[[Session], None]) -> None:
        """Run `hook(session)` as each write transaction commits, after its unit: what it
        raises rolls the whole transaction back and reaches the caller of `write`."""
        event.listen(self._write_sessions, "before_commit", hook)

    async def write(
        self, unit: Callable[Concatenate[Session, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Run `unit(session, ...)` in one read-write transaction: committed, or rolled back.

        On PostgreSQL, concurrent transactions (on this replica's threads or on other
        replicas) can deadlock; the server then aborts one, and it is run again from the start.
        So a unit must be safe to run twice: whatever it collects for its caller it resets first.
        """
        for attempt in range(1, RETRIES + 1):
            try:
                result = await self._run(
                    self._write_pool,
                    self._write_sessions,
                    self.busy["write"],
                    unit,
                    *args,
                    **kwargs,
                )
                self._checkpoint_if_due()
                return result
            except StoreUnavailableError as exc:
                if not isinstance(exc.__cause__, DBAPIError) or not _retryable(exc.__cause__):
                    raise
                if attempt == RETRIES:
                    raise
                log.info("store conflict (%s); running the transaction again", _reason(exc))
                await asyncio.sleep(random.uniform(0.005, 0.05) * attempt)
        raise AssertionError("unreachable")

    async def read(
        self, unit: Callable[Concatenate[Session, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Run `unit(session, ...)` in one read-only transaction (a consistent snapshot)."""
        return await self._run(
            self._read_pool, self._read_sessions, self.busy["read"], unit, *args, **kwargs
        )

    async def _run(
        self,
        pool: ThreadPoolExecutor,
        sessions: sessionmaker[Session],
        busy: Busy,
        unit: Callable[Concatenate[Session, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        def in_thread() -> T:
            start, cpu = time.perf_counter(), time.thread_time()
            returned: float | None = None
            try:
                with _store_errors(self.on_error), sessions() as session, session.begin():
                    result = unit(session, *args, **kwargs)
                    returned = time.perf_counter()
                return result
            finally:
                end = time.perf_counter()
                ran = (returned or end) - start
                busy.add(ran, end - start - ran, time.thread_time() - cpu)

        loop = asyncio.get_running_loop()
        # The caller's context goes along: a unit sees the RPC's trace (a new run adopts it).
        return await loop.run_in_executor(pool, contextvars.copy_context().run, in_thread)

    def _checkpoint_if_due(self) -> None:
        """SQLite: start a passive checkpoint every CHECKPOINT_EVERY writes, one at a time.

        Passive: it copies what no reader still needs and never blocks the writer or readers;
        the next write after a complete one starts the WAL over from its beginning."""
        if self._checkpoints is None:
            return
        self._writes += 1
        if self._writes < CHECKPOINT_EVERY or self._checkpointing is not None:
            return
        self._writes = 0
        loop = asyncio.get_running_loop()
        self._checkpointing = loop.run_in_executor(self._checkpoints, self._passive_checkpoint)
        self._checkpointing.add_done_callback(self._checkpointed)

    def _passive_checkpoint(self) -> None:
        assert self._checkpointer is not None
        raw = self._checkpointer.raw_connection()
        try:
            raw.driver_connection.execute("PRAGMA wal_checkpoint(PASSIVE)")  # type: ignore[union-attr]
        finally:
            raw.close()

    def _checkpointed(self, done: asyncio.Future[None]) -> None:
        self._checkpointing = None
        error = None if done.cancelled() else done.exception()
        if error is not None:
            # Nothing is lost: the WAL only grows until the next checkpoint.
            log.warning("could not checkpoint the store's WAL: %s", _reason(error))

    async def check_schema(self, expected_revision: str) -> None:
        """Fail with SchemaError unless the store was initialised at `expected_revision`."""

        def version(s: Session) -> str | None:
            return s.execute(text("SELECT version_num FROM alembic_version")).scalar()

        try:
            found = await self.read(version)
        except StoreUnavailableError as exc:
            # Not reaching the store at all is not a missing schema: init would fail the same way.
            if (problem := store_problem(self.url, exc)) is not None:
                raise StoreUnavailableError(problem) from exc
            if not _missing_table(exc):
                # A store that could not be asked (a bad option, a port out of range) is not
                # a missing schema: init would fail the same way. Its own words, no password.
                raise StoreUnavailableError(
                    f"cannot use the store ({describe_store(self.url)}):"
                    f" {without_password(self.url, _reason(exc.__cause__ or exc))}"
                ) from exc
            raise SchemaError(
                f"the store ({describe_store(self.url)}) has no deskfleet schema; run"
                f" `deskfleet-coordinator init --db {shown_url(self.url)}` first"
            ) from exc
        if found != expected_revision:
            raise SchemaError(
                f"the store's schema is at revision {found}, this coordinator needs "
                f"{expected_revision}; run `deskfleet-coordinator init --db"
                f" {shown_url(self.url)}` to upgrade it"
            )

    async def checkpoint(self) -> None:
        """SQLite: copy the WAL into the database file and empty it, so that page images from
        before a change (secrets sealed a moment ago) leave the files. PostgreSQL: nothing."""
        if self.dialect is not Dialect.SQLITE:
            return

        def run() -> None:
            raw = self._writer.raw_connection()
            try:
                raw.driver_connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # type: ignore[union-attr]
            finally:
                raw.close()

        await asyncio.get_running_loop().run_in_executor(self._write_pool, run)

    async def close(self) -> None:
        """Release threads and connections; safe to call twice."""
        for pool in {self._write_pool, self._read_pool, self._checkpoints}:
            if pool is not None:
                pool.shutdown(wait=True)
        for engine in {self._writer, self._reader, self._checkpointer}:
            if engine is not None:
                engine.dispose()


@contextmanager
def _store_errors(on_error: Callable[[str], None]) -> Iterator[None]:
    try:
        yield
    except IntegrityError:
        raise
    except DataError as exc:
        # A value the store cannot hold (a number out of range, a bad encoding) got past the
        # checks: a defect, not an outage. UNAVAILABLE keeps meaning the store cannot be
        # reached, and the database's own words stay in the log.
        ref = new_id("err")
        log.error("the store refused a value (ref %s): %s", ref, _reason(exc))
        raise InternalError(f"internal error (ref {ref})") from exc
    except (DBAPIError, PoolTimeoutError, OSError) as exc:
        on_error("conflict" if isinstance(exc, DBAPIError) and _retryable(exc) else "unavailable")
        raise StoreUnavailableError(
            f"the coordinator's store is unavailable: {_reason(exc)}"
        ) from exc


def _ignore(kind: str) -> None:
    pass


def _no_autocheckpoint(dbapi_conn: Any, _record: Any) -> None:
    """The writer's commits leave the WAL to `Database._checkpoint_if_due`."""
    dbapi_conn.execute("PRAGMA wal_autocheckpoint=0")


def _retryable(exc: DBAPIError) -> bool:
    return getattr(exc.orig, "sqlstate", None) in RETRYABLE_SQLSTATES


def _missing_table(exc: BaseException) -> bool:
    """Whether a store error says the table asked for is not there (SQLite, PostgreSQL)."""
    reason = str(getattr(exc.__cause__, "orig", None) or exc.__cause__ or exc)
    return "no such table" in reason or bool(re.search(r"relation .* does not exist", reason))


def _reason(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    return str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
