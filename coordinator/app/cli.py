"""`deskfleet-coordinator`: initialise the store, and serve."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.engine import make_url

from coordinator.agent import providers
from coordinator.app import descriptors
from coordinator.app.server import Coordinator
from coordinator.console.limits import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_PER_CLIENT,
    DEFAULT_REQUEST_TIMEOUT,
)
from coordinator.model.identity import Role
from coordinator.model.settings import (
    DEFAULT_AUTH_FAILURES,
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_MAX_REFUSED_REPORTS,
    DEFAULT_MAX_WATCH_STREAMS,
    DEFAULT_OWNER_MAX_ACTIVE_RUNS,
    DEFAULT_OWNER_MAX_SECRETS,
    DEFAULT_OWNER_MAX_STORED_BYTES,
    CoordinatorConfig,
)
from coordinator.security import evidence_key, secret_box
from coordinator.security.principals import NewUser, create_user, has_admin_secret
from coordinator.security.secret_box import KEY_FILE_NAME, SecretBox
from coordinator.security.tls import (
    CA_CERT,
    DEFAULT_HOSTS,
    DEFAULT_SERVER_DAYS,
    DEFAULT_WORKER_DAYS,
    SERVER_CERT,
    SERVER_KEY,
    certificate_hosts,
    init_ca,
)
from coordinator.store import Database, SchemaError
from coordinator.store.engine import (
    describe_store,
    require_store_file,
    sqlite_path,
    store_problem,
    without_password,
)
from coordinator.store.schema import upgrade
from shared import __version__, heap, logs, telemetry_options, tracing
from shared.advertisement import HelloLimits
from shared.config import parse_duration
from shared.errors import AlreadyExistsError, DeskfleetError, StoreUnavailableError
from shared.ids import new_id
from shared.sizes import parse_size
from shared.text import visible

if TYPE_CHECKING:  # the console (Starlette, uvicorn) is imported only when it is served
    from coordinator.console.server import Embedded

_DB_HELP = (
    "the store: sqlite:////ABS/PATH (four slashes; sqlite:///PATH is relative to the current"
    " directory) or postgresql://USER@HOST:PORT/DB"
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="deskfleet-coordinator", description=__doc__)
    p.add_argument("--version", action="version", version=f"deskfleet {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    init = sub.add_parser("init", help="create or upgrade the schema and write an admin credential")
    init.add_argument("--db", required=True, help=_DB_HELP + " (a SQLite file is created)")
    init.add_argument("--admin-token-file", required=True, type=Path)
    _evidence_key_option(init)
    _key_file_option(init)

    serve = sub.add_parser("serve", help="serve the API")
    serve.add_argument("--db", required=True, help=_DB_HELP + ", initialised with init")
    _key_file_option(serve)
    _evidence_key_option(serve)
    serve.add_argument("--listen", default="127.0.0.1:50051", help="HOST:PORT (port 0: any free)")
    serve.add_argument("--replica", default=None, help="this replica's name (default: hostname)")
    serve.add_argument(
        "--console-listen",
        metavar="HOST:PORT",
        help="also serve the web console here; it calls this coordinator's API like any client"
        " (HTTPS with the API's certificate when it has one)",
    )
    _host_name_option(serve, "--console-host-name")
    serve.add_argument("--heartbeat-interval", type=float, default=5.0, metavar="SECONDS")
    serve.add_argument("--lease-ttl", type=float, default=15.0, metavar="SECONDS")
    serve.add_argument(
        "--sweep-interval",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how often the recovery sweep resumes saved work (default 120)",
    )
    serve.add_argument(
        "--line-check-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="while runs wait for a worker slot, also serve their line this often, for capacity"
        " no event announced (a worker lease renewed after lapsing); default 1",
    )
    serve.add_argument(
        "--auth-failures-per-minute",
        type=int,
        default=DEFAULT_AUTH_FAILURES,
        metavar="N",
        help="failed authentications one host may make per minute before its calls are"
        f" refused for a while (default {DEFAULT_AUTH_FAILURES}; 0: no limit)",
    )
    serve.add_argument(
        "--relay-poll-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="how often a replica looks for orders other replicas left for its workers; on"
        " PostgreSQL a notification wakes it sooner (default 1)",
    )
    serve.add_argument(
        "--goal-context-budget",
        type=int,
        default=20_000,
        metavar="TOKENS",
        help="estimated tokens of a goal's working set before old results are archived"
        " (default 20000; at least 4000 beyond what is pinned)",
    )
    serve.add_argument(
        "--goal-model-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="a goal's whole model call may take this long; past it, it is retried once",
    )
    serve.add_argument(
        "--goal-question-wait",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long an optional ask_human question holds the goal before it goes on",
    )
    serve.add_argument(
        "--advice-model",
        default="",
        metavar="PROVIDER:MODEL",
        help="the model `approvals advise` asks about an approval outside a goal (a goal's"
        " approval asks the goal's own model)",
    )
    serve.add_argument(
        "--policy",
        type=Path,
        default=None,
        metavar="FILE",
        help="routing policy (JSON); default: headless workers, then a desktop with approval",
    )
    serve.add_argument(
        "--scripted-models-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="offer `scripted:NAME` models: replayed JSON scripts, plain file names in DIR"
        " (tests, demos; default: none)",
    )
    serve.add_argument(
        "--anthropic-computer-tool",
        choices=providers.ANTHROPIC_COMPUTER_TOOLS,
        default=providers.DEFAULT_ANTHROPIC_COMPUTER_TOOL,
        help="the computer tool `anthropic:` goals are sent: the generally available toolset"
        " (default %(default)s), or one of the older single tools with their beta headers",
    )
    serve.add_argument(
        "--openai-computer-tool",
        choices=providers.OPENAI_COMPUTER_TOOLS,
        default=providers.DEFAULT_OPENAI_COMPUTER_TOOL,
        help="the computer tool `openai:` goals are sent: the generally available one, whose"
        " calls batch actions (default %(default)s), or the older computer_use_preview",
    )
    serve.add_argument(
        "--allow-private-networks",
        action="store_true",
        help="let browser actions reach loopback and private addresses",
    )
    serve.add_argument(
        "--owner-max-active-runs",
        type=int,
        default=DEFAULT_OWNER_MAX_ACTIVE_RUNS,
        metavar="N",
        help="runs one owner may have in flight before a new one is refused (default"
        f" {DEFAULT_OWNER_MAX_ACTIVE_RUNS}; 0: no limit; `deskfleet users limits` per owner)",
    )
    serve.add_argument(
        "--owner-max-stored-bytes",
        default=str(DEFAULT_OWNER_MAX_STORED_BYTES),
        metavar="SIZE",
        help="bytes one owner's runs may store before a new run is refused, e.g. 500MiB, 5GiB"
        " (default 5GiB; 0: no limit; `deskfleet users limits` per owner)",
    )
    serve.add_argument(
        "--hello-limit",
        action="append",
        default=[],
        metavar="NAME=N",
        help="raise or lower a bound of what a worker's hello may hold (repeatable): max_bytes"
        " (65536), max_entries (64), max_text (256), max_reason (1024), max_displays (16),"
        " max_display_px (32768), max_held (512); see docs/SECURITY.md",
    )
    serve.add_argument(
        "--owner-max-secrets",
        type=int,
        default=DEFAULT_OWNER_MAX_SECRETS,
        metavar="N",
        help=f"secrets one owner may store (default {DEFAULT_OWNER_MAX_SECRETS}; 0: no limit);"
        " replacing the value of one already stored does not count",
    )
    serve.add_argument(
        "--max-watch-streams",
        type=int,
        default=DEFAULT_MAX_WATCH_STREAMS,
        metavar="N",
        help="WatchRun and WaitRun calls (runs watch, --wait) one user may have open at once on"
        f" this replica (default {DEFAULT_MAX_WATCH_STREAMS}; 0: no limit)",
    )
    serve.add_argument(
        "--recording-retention",
        default="30d",
        metavar="DURATION",
        help="how long a desktop run's recorded frames are kept, e.g. 7d, 12h (default 30d;"
        " 0: kept until the run's data is removed)",
    )
    serve.add_argument(
        "--recording-max-bytes",
        default="1GiB",
        metavar="SIZE",
        help="bytes of recordings one owner may keep; past it a run's recording stops with a"
        " journal note (default 1GiB; 0: no limit but the owner's stored bytes)",
    )
    serve.add_argument(
        "--recording-fps",
        type=float,
        default=2.0,
        metavar="N",
        help="frames a second a desktop run's recording keeps of a changing screen (a still"
        " screen keeps none; default 2; 0: desktop runs are not recorded)",
    )
    serve.add_argument(
        "--live-viewers-per-session",
        type=int,
        default=2,
        metavar="N",
        help="live screen views one console session (or one direct caller) may hold open"
        " (default 2)",
    )
    serve.add_argument(
        "--live-viewers-per-worker",
        type=int,
        default=16,
        metavar="N",
        help="live screen views of one worker at once, recordings not counted (default 16)",
    )
    serve.add_argument(
        "--max-refused-reports",
        type=int,
        default=DEFAULT_MAX_REFUSED_REPORTS,
        metavar="N",
        help="refused receipts and starts a worker stream may make a minute before it is ended"
        f" (default {DEFAULT_MAX_REFUSED_REPORTS}; 0: no limit; see docs/SECURITY.md)",
    )
    serve.add_argument(
        "--max-connections",
        type=int,
        default=0,
        metavar="N",
        help="gRPC connections accepted at once (default: the open-files limit, raised to its"
        " hard limit at start, less a reserve for the store and the console); see"
        " docs/SECURITY.md",
    )
    serve.add_argument(
        "--handshake-timeout",
        type=float,
        default=DEFAULT_HANDSHAKE_TIMEOUT,
        metavar="SECONDS",
        help="a connection that has not finished its TLS and HTTP/2 handshake by then is closed"
        f" (default {DEFAULT_HANDSHAKE_TIMEOUT:.0f})",
    )
    serve.add_argument("--tls-cert", type=Path, metavar="FILE", help="serve TLS: certificate")
    serve.add_argument("--tls-key", type=Path, metavar="FILE", help="serve TLS: private key")
    serve.add_argument(
        "--ca-dir",
        type=Path,
        metavar="DIR",
        help="the CA from `ca init`: sign worker certificates and require one on worker"
        " streams (--tls-cert/--tls-key default to its server certificate)",
    )
    serve.add_argument(
        "--worker-listen",
        metavar="HOST:PORT",
        help="with --ca-dir: where worker streams with client certificates are taken"
        " (default: the --listen host, its port + 1)",
    )
    serve.add_argument(
        "--worker-cert-days",
        type=float,
        default=DEFAULT_WORKER_DAYS,
        metavar="DAYS",
        help=f"validity of the worker certificates signed (default {DEFAULT_WORKER_DAYS};"
        " workers renew with a third left)",
    )
    serve.add_argument(
        "--plaintext",
        action="store_true",
        help="accept serving without TLS on a non-loopback address (loopback needs no flag)",
    )
    telemetry_options.add_to(serve)

    rotate = sub.add_parser(
        "rotate-secrets-key",
        help="seal every stored secret under a new key (stop the replicas first; give each the"
        " new key file before starting it again)",
    )
    rotate.add_argument("--db", required=True, help=_DB_HELP)
    _key_file_option(rotate)

    console = sub.add_parser(
        "console",
        help="serve the web console: fleet, runs, approvals, kill switch and audit in a browser,"
        " through the coordinator's API with each signed-in user's token",
    )
    console.add_argument(
        "--coordinator", required=True, metavar="HOST:PORT", help="the coordinator's API address"
    )
    console.add_argument(
        "--listen", default="127.0.0.1:8080", metavar="HOST:PORT", help="(port 0: any free)"
    )
    console.add_argument(
        "--ca-file", type=Path, metavar="FILE", help="verify the coordinator's TLS with this CA"
    )
    console.add_argument("--tls-cert", type=Path, metavar="FILE", help="serve HTTPS: certificate")
    console.add_argument("--tls-key", type=Path, metavar="FILE", help="serve HTTPS: private key")
    console.add_argument(
        "--session-ttl",
        type=float,
        default=8.0,
        metavar="HOURS",
        help="how long a sign-in lasts (default 8)",
    )
    console.add_argument(
        "--plaintext",
        action="store_true",
        help="serve plain HTTP on a non-loopback address (loopback needs no flag)",
    )
    _host_name_option(console, "--host-name")
    console.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="N",
        help=f"HTTP connections open at once, in all (default {DEFAULT_MAX_CONNECTIONS})",
    )
    console.add_argument(
        "--max-connections-per-client",
        type=int,
        default=DEFAULT_MAX_PER_CLIENT,
        metavar="N",
        help=f"HTTP connections open at once from one address (default {DEFAULT_MAX_PER_CLIENT})",
    )
    console.add_argument(
        "--request-timeout",
        type=float,
        default=DEFAULT_REQUEST_TIMEOUT,
        metavar="SECONDS",
        help="a request's head and body must arrive within this time, or the connection is"
        f" closed (default {DEFAULT_REQUEST_TIMEOUT:.0f})",
    )

    evidence = sub.add_parser(
        "evidence-key",
        help="print the public half of the key that signs exported evidence, and its fingerprint",
    )
    evidence.add_argument("--db", required=True, help=_DB_HELP)
    _evidence_key_option(evidence)
    evidence.add_argument("--json", action="store_true", help="one JSON document on stdout")

    ca = sub.add_parser("ca", help="the certificate authority for TLS")
    ca_sub = ca.add_subparsers(dest="ca_command", required=True)
    ca_init = ca_sub.add_parser(
        "init", help="create a CA (never replacing one) and a server certificate"
    )
    ca_init.add_argument("--dir", required=True, type=Path)
    ca_init.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name or IP address of the coordinator (repeatable; default"
        f" {', '.join(DEFAULT_HOSTS)})",
    )
    ca_init.add_argument(
        "--days",
        type=int,
        default=DEFAULT_SERVER_DAYS,
        help=f"validity of the server certificate (default {DEFAULT_SERVER_DAYS})",
    )
    return p


def _host_name_option(p: argparse.ArgumentParser, flag: str) -> None:
    p.add_argument(
        flag,
        action="append",
        default=[],
        metavar="NAME",
        help="a name the console answers to in the Host header (repeatable); IP addresses,"
        " localhost and this machine's names are always accepted, any other name is refused"
        " (a page on another name resolving to this address: DNS rebinding)",
    )


def _key_file_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--secrets-key-file",
        type=Path,
        metavar="FILE",
        help="the key that seals secret values (mode 0600, outside the database; every replica"
        f" needs the same; default: {KEY_FILE_NAME} next to a SQLite database, none with"
        " PostgreSQL)",
    )


def _evidence_key_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--evidence-key-file",
        type=Path,
        metavar="FILE",
        help="the Ed25519 key that signs exported evidence (mode 0600; replicas share one;"
        f" default: {evidence_key.KEY_FILE_NAME} next to a SQLite database, none with"
        " PostgreSQL)",
    )


def _evidence_key_file(args: argparse.Namespace) -> Path | None:
    return _beside_store(args.db, args.evidence_key_file, evidence_key.KEY_FILE_NAME)


def _print_evidence_key(args: argparse.Namespace) -> None:
    path = _evidence_key_file(args)
    if path is None:
        raise DeskfleetError("--evidence-key-file: required with PostgreSQL")
    key = evidence_key.load(path)
    if args.json:
        doc = {"fingerprint": key.fingerprint, "publicKeyPem": key.public_pem, "file": str(path)}
        print(json.dumps(doc, indent=2))
        return
    print(f"evidence key {key.fingerprint} ({path})")
    print(key.public_pem, end="")


def _key_file(args: argparse.Namespace) -> Path | None:
    return _beside_store(args.db, args.secrets_key_file, KEY_FILE_NAME)


def _beside_store(db_url: str, given: Path | None, name: str) -> Path | None:
    """The key file named on the command line, else `name` next to a SQLite database (with
    PostgreSQL there is no such place: None)."""
    if given is not None:
        return given
    db_path = sqlite_path(db_url)
    return db_path.parent / name if db_path is not None else None


async def _seal(db_url: str, key_file: Path, *, rotate: bool) -> int:
    """Seal stored plaintext values (or, rotating, every value) with the key file's first key."""
    db = Database(db_url)
    try:
        box = SecretBox.load(key_file)
        count = await db.write(secret_box.seal_all, box, plaintext_only=not rotate)
        await db.checkpoint()
        return count
    finally:
        await db.close()


def _rotate(db_url: str, key_file: Path) -> int:
    """A new first key; every value sealed under it; then the older keys dropped. Stopped at
    any point, the file still opens every stored value, and running it again finishes."""
    old = SecretBox.load(key_file)
    new = secret_box.new_key()
    secret_box.write_keys(key_file, (new, *old.keys))
    count = asyncio.run(_seal(db_url, key_file, rotate=True))
    secret_box.write_keys(key_file, (new,))
    return count


async def _init(
    db_url: str, token_file: Path, existing_secret: str | None
) -> tuple[str, NewUser | None]:
    """Upgrade the schema; create an admin unless `existing_secret` already is one."""
    before, after = await asyncio.to_thread(upgrade, db_url)
    note = (
        f"schema already at {after}"
        if before == after
        else f"schema {before or 'empty'} -> {after}"
    )
    db = Database(db_url)
    try:
        if existing_secret is not None:
            if await has_admin_secret(db, existing_secret):
                return note, None
            raise DeskfleetError(
                f"{token_file} holds no admin credential of this store;"
                " move it away to write a new one"
            )
        try:
            return note, await create_user(db, "admin", Role.ADMIN)
        except AlreadyExistsError:
            return note, await create_user(db, f"admin-{new_id('x')[-6:]}", Role.ADMIN)
    finally:
        await db.close()


def _store_line(db_url: str) -> str:
    """Where init puts the store, said so that a relative SQLite path is seen as one."""
    where = describe_store(db_url)
    path = sqlite_path(db_url)
    if path is None or Path(make_url(db_url).database or "").is_absolute():
        return where
    return (
        f"{where} (a path relative to the current directory; sqlite:///{path} names it from"
        " anywhere)"
    )


def _write_secret(path: Path, secret: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Created with 0600 from the start: never world-readable, not even for an instant.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secret + "\n")


async def _serve(
    config: CoordinatorConfig,
    console_listen: str | None = None,
    console_host_names: tuple[str, ...] = (),
) -> None:
    coordinator = Coordinator(config)
    try:
        port = await coordinator.start()
    except BaseException:
        await coordinator.stop()
        raise
    heap.freeze_startup()  # before serving: see shared/heap.py
    host = config.listen.rsplit(":", 1)[0]
    # Tests and scripts read the bound port from this line (with --listen HOST:0).
    print(f"deskfleet-coordinator {config.replica} listening on {host}:{port}", flush=True)
    if coordinator.worker_port:
        worker_host = (config.worker_listen or config.listen).rsplit(":", 1)[0]
        print(
            f"deskfleet-coordinator {config.replica} worker streams (client certificates) on"
            f" {worker_host}:{coordinator.worker_port}",
            flush=True,
        )
    if config.metrics_listen:
        metrics_host = config.metrics_listen.rsplit(":", 1)[0]
        print(
            f"deskfleet-coordinator {config.replica} metrics on"
            f" {metrics_host}:{coordinator.metrics.port}",
            flush=True,
        )
    console = None
    if console_listen:
        try:
            console = await _console_beside(config, console_listen, port, console_host_names)
        except BaseException:
            await coordinator.stop()
            raise
        print(f"deskfleet-coordinator {config.replica} console on {console.url}", flush=True)
    # Last: scripts and tests read the lines above in this order.
    print(
        f"deskfleet-coordinator {config.replica} store: {visible(describe_store(config.db_url))}",
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logging.getLogger(__name__).info("stopping")
    if console is not None:
        await console.stop()
    await coordinator.stop()


async def _console_beside(
    config: CoordinatorConfig, listen: str, port: int, host_names: tuple[str, ...] = ()
) -> Embedded:
    """The console in this process, dialling this coordinator's API on its own address with
    the API's certificate checked against the CA of --ca-dir."""
    from coordinator.console.server import ConsoleOptions, start_beside

    host = config.listen.rsplit(":", 1)[0]
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "[::]": "[::1]"}.get(host, host)
    cert, key, ca_file, name = config.tls_cert, config.tls_key, None, ""
    if config.ca_dir is not None:
        cert = cert or config.ca_dir / SERVER_CERT
        key = key or config.ca_dir / SERVER_KEY
        ca_file = config.ca_dir / CA_CERT
        name = min(certificate_hosts(cert.read_bytes()), default="")
    elif cert is not None:
        raise DeskfleetError(
            "--console-listen with --tls-cert needs --ca-dir, whose CA the console checks this"
            " coordinator's certificate with (or run `deskfleet-coordinator console --ca-file`)"
        )
    options = ConsoleOptions(
        coordinator=f"{host}:{port}",
        listen=listen,
        ca_file=ca_file,
        tls_cert=cert,
        tls_key=key,
        plaintext=config.plaintext,
        host_names=host_names,
    )
    return await start_beside(options, tls_name=name)


def main(argv: list[str] | None = None) -> int:
    # Everything the coordinator creates (the SQLite database and its -wal/-shm, keys, tokens,
    # directories) is for its own user alone.
    os.umask(0o077)
    args = _parser().parse_args(argv)
    prog = "deskfleet-coordinator"
    try:
        if args.command == "ca":
            for line in init_ca(args.dir, args.host, args.days):
                print(line)
            return 0
        if args.command == "init":
            print(f"store: {visible(_store_line(args.db))}", flush=True)
            path = sqlite_path(args.db)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
            token_file: Path = args.admin_token_file
            existing = token_file.read_text().strip() if token_file.exists() else None
            note, user = asyncio.run(_init(args.db, token_file, existing))
            if user is None:
                print(f"{note}; admin credential in {token_file} is valid, kept")
            else:
                _write_secret(token_file, user.secret)
                print(f"{note}; admin credential for {user.principal.name} written to {token_file}")
            evidence_file = _evidence_key_file(args)
            if evidence_file is None:
                print("no evidence key: give --evidence-key-file to init to sign exported runs")
            else:
                made = evidence_key.create(evidence_file)
                key = evidence_key.load(evidence_file)
                print(
                    f"evidence key {key.fingerprint} {'written to' if made else 'kept in'}"
                    f" {evidence_file}"
                )
            key_file = _key_file(args)
            if key_file is None:
                print("no secrets key: give --secrets-key-file to init and serve to store secrets")
                return 0
            made = secret_box.create_key_file(key_file)
            sealed = asyncio.run(_seal(args.db, key_file, rotate=False))
            print(
                f"secrets key {'written to' if made else 'kept in'} {key_file}"
                + (f"; {sealed} stored secret value(s) sealed with it" if sealed else "")
            )
            return 0
        if args.command == "evidence-key":
            _print_evidence_key(args)
            return 0
        if args.command == "console":
            from coordinator.console.server import ConsoleOptions, serve

            serve(
                ConsoleOptions(
                    coordinator=args.coordinator,
                    listen=args.listen,
                    ca_file=args.ca_file,
                    tls_cert=args.tls_cert,
                    tls_key=args.tls_key,
                    plaintext=args.plaintext,
                    session_ttl=args.session_ttl * 3600,
                    host_names=tuple(args.host_name),
                    max_connections=args.max_connections,
                    max_connections_per_client=args.max_connections_per_client,
                    request_timeout=args.request_timeout,
                )
            )
            return 0
        if args.command == "rotate-secrets-key":
            require_store_file(args.db)
            key_file = _key_file(args)
            if key_file is None:
                raise DeskfleetError("--secrets-key-file: required with PostgreSQL")
            count = _rotate(args.db, key_file)
            print(
                f"secrets key in {key_file} replaced; {count} stored secret value(s) sealed"
                " with the new key: give every replica this file before starting it again"
            )
            return 0
        endpoint = tracing.resolve_endpoint(args.otlp_endpoint)
        logs.configure(args.log_level, args.log_format)
        if args.heartbeat_interval <= 0 or args.lease_ttl <= args.heartbeat_interval:
            raise DeskfleetError("--lease-ttl must be longer than --heartbeat-interval (> 0)")
        if args.worker_cert_days <= 0:
            raise DeskfleetError("--worker-cert-days must be positive")
        if not args.line_check_interval > 0:
            raise DeskfleetError("--line-check-interval must be positive")
        if args.scripted_models_dir is not None and not args.scripted_models_dir.is_dir():
            raise DeskfleetError("--scripted-models-dir must name a directory")
        if args.owner_max_active_runs < 0:
            raise DeskfleetError("--owner-max-active-runs: 0 (no limit) or more")
        if args.max_watch_streams < 0:
            raise DeskfleetError("--max-watch-streams: 0 (no limit) or more")
        if args.max_refused_reports < 0:
            raise DeskfleetError("--max-refused-reports: 0 (no limit) or more")
        if args.owner_max_secrets < 0:
            raise DeskfleetError("--owner-max-secrets: 0 (no limit) or more")
        if args.max_connections < 0:
            raise DeskfleetError("--max-connections: 0 (the default cap) or more")
        if not args.handshake_timeout > 0:
            raise DeskfleetError("--handshake-timeout must be positive")
        owner_max_stored_bytes = parse_size("--owner-max-stored-bytes", args.owner_max_stored_bytes)
        recording_max_bytes = parse_size("--recording-max-bytes", args.recording_max_bytes)
        try:
            recording_retention = parse_duration(args.recording_retention)
        except DeskfleetError as exc:
            raise DeskfleetError(f"--recording-retention: {exc}") from None
        if not 0 <= args.recording_fps <= 10:
            raise DeskfleetError("--recording-fps: 0 (no recording) to 10")
        if not 1 <= args.live_viewers_per_session <= 64:
            raise DeskfleetError("--live-viewers-per-session: 1 to 64")
        if not 1 <= args.live_viewers_per_worker <= 256:
            raise DeskfleetError("--live-viewers-per-worker: 1 to 256")
        open_files = descriptors.raise_open_files_limit()
        console_connections = DEFAULT_MAX_CONNECTIONS if args.console_listen else 0
        config = CoordinatorConfig(
            db_url=args.db,
            listen=args.listen,
            heartbeat_interval=args.heartbeat_interval,
            lease_ttl=args.lease_ttl,
            sweep_interval=args.sweep_interval,
            line_check_interval=args.line_check_interval,
            relay_poll_interval=args.relay_poll_interval,
            auth_failures_per_minute=args.auth_failures_per_minute,
            owner_max_active_runs=args.owner_max_active_runs,
            owner_max_stored_bytes=owner_max_stored_bytes,
            owner_max_secrets=args.owner_max_secrets,
            max_watch_streams=args.max_watch_streams,
            max_refused_reports=args.max_refused_reports,
            max_connections=args.max_connections
            or descriptors.connection_cap(open_files, console_connections),
            handshake_timeout=args.handshake_timeout,
            goal_context_budget=args.goal_context_budget,
            goal_model_timeout=args.goal_model_timeout,
            goal_question_wait=args.goal_question_wait,
            recording_fps=args.recording_fps,
            recording_retention=recording_retention,
            recording_max_bytes=recording_max_bytes,
            live_viewers_per_session=args.live_viewers_per_session,
            live_viewers_per_worker=args.live_viewers_per_worker,
            advice_model=args.advice_model,
            allow_private_networks=args.allow_private_networks,
            policy_file=args.policy,
            scripted_models_dir=args.scripted_models_dir,
            anthropic_computer_tool=args.anthropic_computer_tool,
            openai_computer_tool=args.openai_computer_tool,
            secrets_key_file=_key_file(args),
            evidence_key_file=_evidence_key_file(args),
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            ca_dir=args.ca_dir,
            worker_listen=args.worker_listen,
            worker_cert_days=args.worker_cert_days,
            plaintext=args.plaintext,
            metrics_listen=args.metrics_listen,
            hello_limits=HelloLimits.parse(args.hello_limit),
            **({"replica": args.replica} if args.replica else {}),
        )
        # After every flag is read (a bad flag is named first), before anything connects:
        # SQLite would create a missing file, empty, on a typo.
        require_store_file(args.db)
        spans = tracing.Tracing(
            tracing.COORDINATOR, {"service.instance.id": config.replica}, endpoint
        ).start()
        try:
            asyncio.run(_serve(config, args.console_listen, tuple(args.console_host_name)))
        finally:
            spans.shutdown()
        return 0
    # Spelled out with `visible`: a --db path or a file name holding an escape sequence or a
    # line break is shown as typed, never run by the terminal.
    except StoreUnavailableError as exc:
        db = getattr(args, "db", "")
        said = (store_problem(db, exc) or without_password(db, str(exc))) if db else str(exc)
        print(f"{prog}: {visible(said)}", file=sys.stderr)
        return 1
    except (DeskfleetError, SchemaError) as exc:
        print(f"{prog}: {visible(str(exc))}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{prog}: {visible(str(exc.strerror or exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
