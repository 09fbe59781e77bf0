"""`deskfleet`: the admin CLI. Read commands print a table, or one JSON document with --json."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from coordinator.admin_cli import desktop_commands, question_commands, render, runs_commands, top
from coordinator.admin_cli.client import CoordinatorClient
from coordinator.admin_cli.completion import SHELLS, completion_help, completion_script
from coordinator.admin_cli.out_files import check_writable
from shared import __version__, tracing
from shared.config import (
    DEFAULT_COORDINATOR,
    ENV_CA_FILE,
    ENV_COORDINATOR,
    ENV_TOKEN_FILE,
    ClientConfig,
    config_file,
    parse_duration,
)
from shared.errors import DeskfleetError, InvalidArgumentError
from shared.files import replace_atomically
from shared.gen.deskfleet.v1 import admin_pb2, fleet_pb2
from shared.sizes import parse_size
from shared.timestamps import iso

Command = Callable[[CoordinatorClient, argparse.Namespace], None]

DEFAULT_TIMEOUT = 10.0

# Exit codes a script can tell apart.
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_AUTH = 3
EXIT_NOT_FOUND = 4
EXIT_UNAVAILABLE = 5


def _tokens_create(client: CoordinatorClient, args: argparse.Namespace) -> None:
    if args.uses < 1:
        raise InvalidArgumentError("--uses: must be at least 1")
    try:
        ttl = parse_duration(args.ttl)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(
            f"--ttl {args.ttl}: not a duration; give a positive one, e.g. 10m, 1h, 2d"
        ) from exc
    if ttl < 1:
        # 0 would reach the coordinator as "its default", an hour nobody asked for.
        raise InvalidArgumentError(
            f"--ttl {args.ttl}: a token must live at least a second; give e.g. 10m, 1h, 2d"
        )
    token = client.call(
        client.admin.CreateEnrollmentToken,
        admin_pb2.CreateEnrollmentTokenRequest(
            capabilities=args.capability or [],
            ttl_seconds=int(ttl),
            # Past 32 bits the request cannot hold it (a traceback): the coordinator's own
            # refusal names its limit.
            uses=min(args.uses, 2**31 - 1),
        ),
    )
    doc = render.as_dict(token)
    if args.json:
        render.print_json(doc)
        return
    caps = ",".join(doc["capabilities"]) or "all"
    # stdout is the token alone, so that `T=$(deskfleet tokens create)` holds just the token.
    print(
        f"enrollment token {doc['id']} (capabilities: {caps}; uses: {doc['uses']};"
        f" expires {doc['expiresAt']})",
        file=sys.stderr,
    )
    print(doc["token"])


def _token_state(token: admin_pb2.EnrollmentTokenInfo, now: float) -> str:
    if token.revoked:
        return "revoked"
    if token.used >= token.uses:
        return "used up"
    if token.expires_at.ToSeconds() <= now:
        return "expired"
    return "usable"


def _tokens_list(client: CoordinatorClient, args: argparse.Namespace) -> None:
    tokens = client.call(
        client.admin.ListEnrollmentTokens, admin_pb2.ListEnrollmentTokensRequest()
    ).tokens
    if args.json:
        render.print_json([_token_doc(t) for t in tokens])
        return
    if not tokens:
        print("no enrollment tokens (create one with `deskfleet tokens create`)")
        return
    now = time.time()
    print(
        render.table(
            ("ID", "CAPABILITIES", "USED", "EXPIRES", "STATE"),
            [
                (
                    t.id,
                    ",".join(t.capabilities) or "all",
                    f"{t.used} of {t.uses}",
                    iso(t.expires_at.ToSeconds()),
                    _token_state(t, now),
                )
                for t in tokens
            ],
        )
    )


def _token_doc(token: admin_pb2.EnrollmentTokenInfo) -> dict[str, Any]:
    doc = render.as_dict(token)
    return {k: doc[k] for k in ("id", "capabilities", "uses", "used", "expiresAt", "revoked")}


def _tokens_revoke(client: CoordinatorClient, args: argparse.Namespace) -> None:
    token = client.call(
        client.admin.RevokeEnrollmentToken, admin_pb2.RevokeEnrollmentTokenRequest(id=args.id)
    )
    if args.json:
        render.print_json(_token_doc(token))
        return
    print(
        f"enrollment token {token.id} revoked: it enrolls no worker from now on"
        f" ({token.used} of {token.uses} uses were taken; the workers enrolled with it stay"
        " until `deskfleet workers revoke WORKER_ID`)"
    )


def _save_target(
    client: CoordinatorClient, path: Path | None, *, user: str, rotating: bool = False
) -> None:
    """A token that is shown once must have somewhere to go before it is made, and that
    somewhere is not the credential this command signs in with unless the token is the
    caller's own new one: `users create bob --save admin.token` replaced the admin's
    credential with bob's, locking the admin out of the CLI."""
    if path is None:
        return
    check_writable(path, "--save")
    mine = client.config.token_file
    if mine is None or not _same_file(path, mine):
        return
    if rotating:
        me = client.call(client.admin.WhoAmI, admin_pb2.WhoAmIRequest())
        if user in ("", me.id, me.name):
            return  # rotating oneself into one's own file: what --save is for
    raise InvalidArgumentError(
        f"--save {path}: that is the credential this command signs in with; {user}'s token"
        " there would replace it: give another FILE"
    )


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and a.samefile(b)
    except OSError:
        return False


def _save(path: Path, token: str) -> None:
    try:
        replace_atomically(path, token + "\n")
    except OSError as exc:
        # The token exists now and is shown nowhere else: print it rather than lose it.
        print(token)
        raise DeskfleetError(
            f"--save {path}: {exc.strerror or exc}; the token is printed above instead"
        ) from exc


def _users_create(client: CoordinatorClient, args: argparse.Namespace) -> None:
    _save_target(client, args.save, user=args.name)
    user = client.call(
        client.admin.CreateUser, admin_pb2.CreateUserRequest(name=args.name, role=args.role)
    )
    doc = render.as_dict(user)
    if args.save:
        _save(args.save, doc["token"])
    if args.json:
        render.print_json({**doc, "token": "" if args.save else doc["token"]})
        return
    if args.save:
        print(f"user {doc['id']} ({doc['name']}, {doc['role']}); its token saved to {args.save}")
    else:
        # As `tokens create`: `T=$(deskfleet users create ann)` holds the token alone.
        print(
            f"user {doc['id']} ({doc['name']}, {doc['role']}); its token, shown once:",
            file=sys.stderr,
        )
        print(doc["token"])


def _users_list(client: CoordinatorClient, args: argparse.Namespace) -> None:
    users = client.call(client.admin.ListUsers, admin_pb2.ListUsersRequest()).users
    if args.json:
        render.print_json([render.as_dict(u) for u in users])
        return
    print(
        render.table(
            ("ID", "NAME", "ROLE", "CREATED"),
            [(u.id, u.name, u.role, iso(u.created_at.ToSeconds())) for u in users],
        )
    )


def _users_rotate(client: CoordinatorClient, args: argparse.Namespace) -> None:
    _save_target(client, args.save, user=args.name or "", rotating=True)
    user = client.call(client.admin.RotateUser, admin_pb2.RotateUserRequest(name=args.name))
    doc = render.as_dict(user)
    if args.save:
        _save(args.save, doc["token"])
    if args.json:
        render.print_json({**doc, "token": "" if args.save else doc["token"]})
        return
    said = f"user {doc['id']} ({doc['name']}): new token; the old one no longer works"
    if args.save:
        print(said)
        print(f"saved to {args.save}")
    else:
        print(said, file=sys.stderr)
        print(doc["token"])


def _limit_value(field: str, text: str | None) -> int | None:
    """`--max-...`: None (unchanged), -1 for `default`, 0 for `none`, or the number."""
    if text is None:
        return None
    word = text.strip().lower()
    if word == "default":
        return -1
    if word in ("none", "0"):
        return 0
    return parse_size(field, text) if "bytes" in field else _count(field, text)


def _count(field: str, text: str) -> int:
    if not text.strip().isdigit() or not text.strip().isascii():
        raise InvalidArgumentError(f"{field}: a number, `none` (no limit) or `default`")
    return int(text)


def _users_limits(client: CoordinatorClient, args: argparse.Namespace) -> None:
    runs = _limit_value("--max-active-runs", args.max_active_runs)
    stored = _limit_value("--max-stored-bytes", args.max_stored_bytes)
    if runs is None and stored is None:
        answer = client.call(
            client.admin.GetUserLimits, admin_pb2.GetUserLimitsRequest(name=args.name)
        )
    else:
        request = admin_pb2.SetUserLimitsRequest(name=args.name)
        if runs is not None:
            request.max_active_runs = runs
        if stored is not None:
            request.max_stored_bytes = stored
        answer = client.call(client.admin.SetUserLimits, request)
    doc = {
        "userId": answer.user_id,
        "name": answer.name,
        "activeRuns": answer.active_runs,
        "storedBytes": answer.stored_bytes,
        "maxActiveRuns": answer.max_active_runs,
        "maxStoredBytes": answer.max_stored_bytes,
        "maxActiveRunsSet": answer.max_active_runs_set,
        "maxStoredBytesSet": answer.max_stored_bytes_set,
    }
    if args.json:
        render.print_json(doc)
        return

    def limit(value: int, overridden: bool) -> str:
        return ("no limit" if value == 0 else str(value)) + ("" if overridden else " (default)")

    print(f"user {answer.user_id} ({answer.name})")
    print(
        f"  runs in flight  {answer.active_runs} of"
        f" {limit(answer.max_active_runs, answer.max_active_runs_set)}"
    )
    print(
        f"  stored bytes    {answer.stored_bytes} of"
        f" {limit(answer.max_stored_bytes, answer.max_stored_bytes_set)}"
    )


def _whoami(client: CoordinatorClient, args: argparse.Namespace) -> None:
    me = render.as_dict(client.call(client.admin.WhoAmI, admin_pb2.WhoAmIRequest()))
    if args.json:
        render.print_json(me)
    else:
        print(f"{me['name']} ({me['role']}, {me['id']})")


def _since(text: str) -> float:
    """`--since`: a duration back from now (`1h`, `2d`) or an ISO 8601 time."""
    if not text:
        return 0.0
    try:
        return time.time() - parse_duration(text)
    except InvalidArgumentError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidArgumentError(
            f"--since: {text!r} is neither a duration (10m, 1h, 2d) nor an ISO 8601 time"
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _audit(client: CoordinatorClient, args: argparse.Namespace) -> None:
    doc = render.as_dict(
        client.call(
            client.admin.ListAudit,
            admin_pb2.ListAuditRequest(since=_since(args.since), limit=args.limit),
        )
    )
    for entry in doc["entries"]:
        entry["detail"] = json.loads(entry.pop("detailJson") or "{}")
    if args.json:
        render.print_json(doc)
        return
    if not doc["entries"]:
        print("no administrative acts recorded in that time")
        return
    print(render.audit_rows(doc["entries"]))
    if doc["more"]:
        print(f"(only the first {len(doc['entries'])}: ask again with a later --since)")


def _status(client: CoordinatorClient, args: argparse.Namespace) -> None:
    doc = client.fleet_client.status(limit=args.limit, page_token=args.page_token).to_dict()
    doc.setdefault("nextPageToken", "")
    if args.json:
        render.print_json(doc)
        return
    by_replica = ", ".join(f"{r['replica']}: {r.get('online', 0)}" for r in doc.get("replicas", []))
    print(
        f"headless online: {doc['headlessOnline']}    "
        f"computer use online: {doc['computerUseOnline']}    "
        f"online: {doc.get('online', 0)}{f' ({by_replica})' if by_replica else ''}"
    )
    stopped = [w for w in doc["workers"] if render.local_kill_text(w.get("localKill"))]
    if stopped:
        names = ", ".join(f"{w['id']} ({w['name']})" for w in stopped)
        print(f"local kill switch engaged on {len(stopped)} worker(s) of this page: {names}")
    if doc["workers"]:
        print()
        print(render.worker_rows(doc["workers"]))
    _more(doc, "status")


def _workers_list(client: CoordinatorClient, args: argparse.Namespace) -> None:
    request = fleet_pb2.ListWorkersRequest(
        include_revoked=args.all,
        limit=args.limit,
        page_token=args.page_token,
        state=args.state,
        capability=args.capability,
        replica=args.replica,
    )
    if args.online is not None:
        request.online = args.online
    doc = render.as_dict(client.call(client.fleet.ListWorkers, request))
    doc.setdefault("nextPageToken", "")
    if args.json:
        render.print_json(doc)
    elif doc["workers"]:
        print(render.worker_rows(doc["workers"]))
        _more(doc, "workers list")
    elif (
        args.page_token or args.state or args.capability or args.replica or args.online is not None
    ):
        print("no workers match")
    else:
        print("no workers enrolled (create a token with `deskfleet tokens create`)")


def _more(doc: dict[str, Any], command: str) -> None:
    if doc["nextPageToken"]:
        print(
            f"(first {len(doc['workers'])} workers: the next ones with"
            f" `deskfleet {command} --page-token {doc['nextPageToken']}`)"
        )


def _paged(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limit",
        type=int,
        default=0,
        metavar="N",
        help="workers a page (default 100, at most 1000)",
    )
    parser.add_argument(
        "--page-token", default="", metavar="T", help="the next page: a previous nextPageToken"
    )


def _worker_action(rpc: str, verb: str) -> Command:
    def run(client: CoordinatorClient, args: argparse.Namespace) -> None:
        info = client.call(getattr(client.fleet, rpc), fleet_pb2.WorkerRef(id=args.id))
        doc = render.as_dict(info)
        if args.json:
            render.print_json(doc)
        elif verb:
            print(f"worker {doc['id']} ({doc['name']}) {verb}")
        else:
            print(render.worker_detail(doc))

    return run


def _workers_rotate(client: CoordinatorClient, args: argparse.Namespace) -> None:
    info = client.call(
        client.fleet.RotateWorker,
        fleet_pb2.RotateWorkerRequest(id=args.id, while_offline=args.while_offline),
    )
    doc = render.as_dict(info)
    if args.json:
        render.print_json(doc)
    elif doc.get("online"):
        print(f"worker {doc['id']} ({doc['name']}) asked for a new credential")
    else:
        print(
            f"worker {doc['id']} ({doc['name']}) will be given a new credential when it next"
            " connects"
        )


def _mcp(client: CoordinatorClient, args: argparse.Namespace) -> None:
    from coordinator.admin_cli import mcp_server  # the SDK takes a second or two to import

    mcp_server.serve(client)


WORKER_ID_HELP = "the worker's id, or its name when no other enrolled worker has it"


def _shared_options(parser: argparse.ArgumentParser, *, json_output: bool, top: bool) -> None:
    """How to reach the coordinator, and --json: taken before the command and after it alike
    (`deskfleet --ca-file ca.pem status` is `deskfleet status --ca-file ca.pem`).

    The top-level parser holds the defaults. A command's copy defaults to nothing at all
    (SUPPRESS), so that argparse, which copies a command's namespace over the top-level one,
    never puts a default over a value given before the command; given after it, it wins.
    """

    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    parser.add_argument(
        "--coordinator",
        metavar="HOST:PORT",
        default=default(None),
        help=f"the coordinator (env {ENV_COORDINATOR}; default {DEFAULT_COORDINATOR})",
    )
    parser.add_argument(
        "--token-file",
        metavar="FILE",
        default=default(None),
        help=f"the credential file (env {ENV_TOKEN_FILE})",
    )
    parser.add_argument(
        "--ca-file",
        metavar="FILE",
        default=default(None),
        help=f"the coordinator's CA certificate: use TLS (env {ENV_CA_FILE})",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=default(DEFAULT_TIMEOUT),
        metavar="SECONDS",
        help=f"seconds per call (default {DEFAULT_TIMEOUT:g})",
    )
    if json_output:
        # Commands that print a result also print it as one JSON document.
        parser.add_argument(
            "--json", action="store_true", default=default(False), help="print one JSON document"
        )


def _parser() -> argparse.ArgumentParser:
    # How to reach the coordinator: every command but `completion`.
    connection = argparse.ArgumentParser(add_help=False)
    _shared_options(connection, json_output=False, top=False)
    common = argparse.ArgumentParser(add_help=False)
    _shared_options(common, json_output=True, top=False)

    p = argparse.ArgumentParser(
        prog="deskfleet",
        description=__doc__,
        epilog=(
            "The options above may also come after the command, with the same meaning."
            f" The coordinator is --coordinator, else ${ENV_COORDINATOR}, else the config file"
            f" ({config_file()}), else {DEFAULT_COORDINATOR}. The credential is --token-file,"
            f" else ${ENV_TOKEN_FILE}, else the config file. Shell completion:"
            " `deskfleet completion bash|zsh|fish`."
        ),
    )
    _shared_options(p, json_output=True, top=True)
    p.add_argument("--version", action="version", version=f"deskfleet {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def leaf(
        parent: argparse._SubParsersAction[argparse.ArgumentParser],
        name: str,
        command: Command,
        help_text: str,
        *,
        json_output: bool = True,
    ) -> argparse.ArgumentParser:
        parser = parent.add_parser(
            name,
            parents=[common if json_output else connection],
            help=help_text,
            description=help_text,
        )
        parser.set_defaults(run=command)
        return parser

    tokens = sub.add_parser("tokens", help="enrollment tokens").add_subparsers(
        dest="sub", required=True, metavar="ACTION"
    )
    create = leaf(
        tokens,
        "create",
        _tokens_create,
        "create an expiring enrollment token: the token alone on stdout, what it allows on stderr",
    )
    create.add_argument(
        "--capability",
        action="append",
        choices=["headless", "computer_use"],
        help="a capability the worker may offer (repeatable; default all)",
    )
    create.add_argument(
        "--ttl", default="1h", metavar="DURATION", help="lifetime, e.g. 10m, 1h, 2d (default 1h)"
    )
    create.add_argument(
        "--uses", type=int, default=1, metavar="N", help="how many enrollments (default 1)"
    )
    leaf(
        tokens,
        "list",
        _tokens_list,
        "enrollment tokens, newest first: uses taken, expiry, revoked (never the secret)",
    )
    leaf(tokens, "revoke", _tokens_revoke, "refuse an enrollment token from now on").add_argument(
        "id", metavar="TOKEN_ID", help="the token's id (deskfleet tokens list)"
    )

    users = sub.add_parser("users", help="owner and admin principals").add_subparsers(
        dest="sub", required=True, metavar="ACTION"
    )
    ucreate = leaf(users, "create", _users_create, "create a user and print its token")
    ucreate.add_argument("name", metavar="NAME", help="the new user's name")
    ucreate.add_argument(
        "--role",
        choices=["owner", "admin"],
        default="owner",
        help="owner: runs work on the fleet; admin: also manages it (default owner)",
    )
    ucreate.add_argument(
        "--save", type=Path, metavar="FILE", help="write its token to FILE (0600) instead"
    )
    leaf(users, "list", _users_list, "the admins and owners, oldest first (never a token)")
    urotate = leaf(users, "rotate", _users_rotate, "replace a user's token (default: your own)")
    urotate.add_argument(
        "name", nargs="?", default="", metavar="USER", help="a user's name or id (admins)"
    )
    urotate.add_argument(
        "--save", type=Path, metavar="FILE", help="write the new token to FILE (0600) instead"
    )

    ulimits = leaf(
        users,
        "limits",
        _users_limits,
        "a user's limits and usage (default: your own); admins set them with the options",
    )
    ulimits.add_argument(
        "name", nargs="?", default="", metavar="USER", help="a user's name or id (admins)"
    )
    ulimits.add_argument(
        "--max-active-runs",
        metavar="N",
        help="runs in flight before a new one is refused; `none` (0): no limit; `default`",
    )
    ulimits.add_argument(
        "--max-stored-bytes",
        metavar="SIZE",
        help="bytes the user's runs may store, e.g. 500MiB, 2GiB; `none` (0); `default`",
    )

    _paged(leaf(sub, "status", _status, "fleet status: workers online by capability"))
    leaf(sub, "whoami", _whoami, "the principal of the credential in use")
    audit = leaf(sub, "audit", _audit, "administrative acts: who did what, when, from where")
    audit.add_argument(
        "--since",
        default="",
        metavar="WHEN",
        help="a duration back (1h, 2d) or an ISO 8601 time (default: all)",
    )
    audit.add_argument(
        "--limit", type=int, default=1000, metavar="N", help="at most this many (default 1000)"
    )
    leaf(
        sub,
        "mcp",
        _mcp,
        "serve the fleet as MCP tools on stdio (for agent applications)",
        json_output=False,  # it speaks JSON-RPC on stdio whatever is asked
    )

    runs_commands.add_parsers(sub, leaf)
    desktop_commands.add_parsers(sub, leaf)
    question_commands.add_parsers(sub, leaf)
    top.add_parser(sub, leaf)

    workers = sub.add_parser("workers", help="enrolled workers").add_subparsers(
        dest="sub", required=True, metavar="ACTION"
    )
    wlist = leaf(workers, "list", _workers_list, "list enrolled workers")
    wlist.add_argument("--all", action="store_true", help="include revoked workers")
    _paged(wlist)
    wlist.add_argument(
        "--state",
        default="",
        choices=("active", "draining", "revoked"),
        help="only workers in this state",
    )
    wlist.add_argument(
        "--capability", default="", choices=("headless", "computer_use"), help="offering it now"
    )
    wlist.add_argument("--replica", default="", metavar="REPLICA", help="streaming to this replica")
    online = wlist.add_mutually_exclusive_group()
    online.add_argument(
        "--online", dest="online", action="store_true", default=None, help="only online workers"
    )
    online.add_argument(
        "--offline", dest="online", action="store_false", help="only offline workers"
    )
    for name, rpc, verb, help_text in (
        ("show", "GetWorker", "", "one worker in detail, with capability reasons"),
        ("revoke", "RevokeWorker", "revoked", "disconnect the worker and refuse it from now on"),
        ("drain", "DrainWorker", "draining: no new work will reach it", "stop new work for it"),
        ("undrain", "UndrainWorker", "active again", "let new work reach it again"),
    ):
        leaf(workers, name, _worker_action(rpc, verb), help_text).add_argument(
            "id", metavar="WORKER_ID", help=WORKER_ID_HELP
        )
    wrotate = leaf(
        workers,
        "rotate",
        _workers_rotate,
        "replace a connected worker's credential; the old one stops once the new one is used",
    )
    wrotate.add_argument("id", metavar="WORKER_ID", help=WORKER_ID_HELP)
    wrotate.add_argument(
        "--while-offline",
        action="store_true",
        help="the worker is not connected: give the new credential to whoever next connects"
        " with the current one (never for a stolen credential: revoke and enroll again)",
    )

    completion = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh or fish)",
        description=completion_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    completion.add_argument("shell", choices=SHELLS, metavar="SHELL", help="bash, zsh or fish")
    completion.set_defaults(run=None)
    return p


def _exit_code(exc: DeskfleetError) -> int:
    import grpc

    return {
        grpc.StatusCode.UNAUTHENTICATED: EXIT_AUTH,
        grpc.StatusCode.PERMISSION_DENIED: EXIT_AUTH,
        grpc.StatusCode.NOT_FOUND: EXIT_NOT_FOUND,
        grpc.StatusCode.UNAVAILABLE: EXIT_UNAVAILABLE,
        grpc.StatusCode.INVALID_ARGUMENT: EXIT_USAGE,
    }.get(exc.code, EXIT_ERROR)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.run is _mcp and args.json:  # given before the command: `mcp --json` is refused too
        parser.error("mcp prints no JSON document (it speaks JSON-RPC on stdio): drop --json")
    if args.run is None and getattr(args, "offline", None) is None:  # `completion`
        sys.stdout.write(completion_script(parser, args.shell))
        return 0
    # What the coordinator, workers and web pages wrote reaches a terminal only with its
    # control characters spelled out. `mcp` speaks JSON-RPC on stdio; `top` draws its frames
    # with escape sequences of its own and spells out the text in them itself.
    streams = sys.stdout, sys.stderr
    if args.run is not _mcp:
        sys.stderr = render.VisibleWriter(sys.stderr)
        if args.run is not top.top:
            sys.stdout = render.VisibleWriter(sys.stdout)
    try:
        return _run(args)
    finally:
        with contextlib.suppress(OSError):  # a reader that went away is not our error
            sys.stdout.flush()
        sys.stdout, sys.stderr = streams


class _StderrNotes(logging.Handler):
    """The client library's notes (a request sent again, a watch resumed) on the stderr of
    the moment: in-process callers swap sys.stderr between commands."""

    def emit(self, record: logging.LogRecord) -> None:
        print(self.format(record), file=sys.stderr)


def _notes_to_stderr() -> None:
    log = logging.getLogger("deskfleet")
    if not any(isinstance(h, _StderrNotes) for h in log.handlers):
        log.addHandler(_StderrNotes())
        log.propagate = False


def _run(args: argparse.Namespace) -> int:
    _notes_to_stderr()
    try:
        offline = getattr(args, "offline", None)
        if offline is not None:  # `verify`: no coordinator, credential or configuration
            code: int = offline(args)
            return code
        config = ClientConfig.resolve(args.coordinator, args.token_file, args.ca_file)
        if not 0 < args.timeout < math.inf:  # NaN too: every call "did not answer in time"
            raise InvalidArgumentError("--timeout must be a positive number of seconds")
        command = getattr(args.run, "__name__", "command").strip("_").replace("_", " ")
        with (
            tracing.command_span(f"deskfleet {command}") as trace,
            CoordinatorClient(config, timeout=args.timeout, traceparent=trace) as client,
        ):
            args.run(client, args)
        return 0
    except DeskfleetError as exc:
        print(f"deskfleet: {exc.message}", file=sys.stderr)
        return _exit_code(exc)
    except runs_commands.RunNotSucceeded:
        return runs_commands.EXIT_RUN_NOT_SUCCEEDED
    except runs_commands.NoEvidence:
        return runs_commands.EXIT_NO_EVIDENCE
    except desktop_commands.ActionNotDone:
        return desktop_commands.EXIT_ACTION_NOT_DONE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
