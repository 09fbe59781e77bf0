"""`deskfleet`: the admin CLI. Read commands print a table, or one JSON document with --json."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from coordinator.admin_cli import desktop_commands, render, runs_commands, top
from coordinator.admin_cli.client import CoordinatorClient
from coordinator.admin_cli.completion import SHELLS, completion_help, completion_script
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

Command = Callable[[CoordinatorClient, argparse.Namespace], None]

# Exit codes a script can tell apart.
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_AUTH = 3
EXIT_NOT_FOUND = 4
EXIT_UNAVAILABLE = 5


def _tokens_create(client: CoordinatorClient, args: argparse.Namespace) -> None:
    if args.uses < 1:
        raise InvalidArgumentError("--uses: must be at least 1")
    token = client.call(
        client.admin.CreateEnrollmentToken,
        admin_pb2.CreateEnrollmentTokenRequest(
            capabilities=args.capability or [],
            ttl_seconds=int(parse_duration(args.ttl)),
            uses=args.uses,
        ),
    )
    doc = render.as_dict(token)
    if args.json:
        render.print_json(doc)
        return
    caps = ",".join(doc["capabilities"]) or "all"
    print(
        f"enrollment token {doc['id']} (capabilities: {caps}; uses: {doc['uses']};"
        f" expires {doc['expiresAt']})"
    )
    print(doc["token"])


def _users_create(client: CoordinatorClient, args: argparse.Namespace) -> None:
    user = client.call(
        client.admin.CreateUser, admin_pb2.CreateUserRequest(name=args.name, role=args.role)
    )
    doc = render.as_dict(user)
    if args.json:
        render.print_json(doc)
        return
    print(f"user {doc['id']} ({doc['name']}, {doc['role']}); its token, shown once:")
    print(doc["token"])


def _users_rotate(client: CoordinatorClient, args: argparse.Namespace) -> None:
    user = client.call(client.admin.RotateUser, admin_pb2.RotateUserRequest(name=args.name))
    doc = render.as_dict(user)
    if args.save:
        replace_atomically(args.save, doc["token"] + "\n")
    if args.json:
        render.print_json({**doc, "token": "" if args.save else doc["token"]})
        return
    print(f"user {doc['id']} ({doc['name']}): new token; the old one no longer works")
    if args.save:
        print(f"saved to {args.save}")
    else:
        print(doc["token"])


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
    doc = render.as_dict(
        client.call(client.fleet.GetWorkerStatus, fleet_pb2.GetWorkerStatusRequest())
    )
    if args.json:
        render.print_json(doc)
        return
    print(
        f"headless online: {doc['headlessOnline']}    "
        f"computer use online: {doc['computerUseOnline']}"
    )
    if doc["workers"]:
        print()
        print(render.worker_rows(doc["workers"]))


def _workers_list(client: CoordinatorClient, args: argparse.Namespace) -> None:
    doc = render.as_dict(
        client.call(
            client.fleet.ListWorkers, fleet_pb2.ListWorkersRequest(include_revoked=args.all)
        )
    )
    if args.json:
        render.print_json(doc)
    elif doc["workers"]:
        print(render.worker_rows(doc["workers"]))
    else:
        print("no workers enrolled (create a token with `deskfleet tokens create`)")


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


def _mcp(client: CoordinatorClient, args: argparse.Namespace) -> None:
    from coordinator.admin_cli import mcp_server  # the SDK takes a second or two to import

    mcp_server.serve(client)


def _parser() -> argparse.ArgumentParser:
    # How to reach the coordinator: every command but `completion`.
    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument(
        "--coordinator",
        metavar="HOST:PORT",
        help=f"the coordinator (env {ENV_COORDINATOR}; default {DEFAULT_COORDINATOR})",
    )
    connection.add_argument(
        "--token-file",
        metavar="FILE",
        help=f"the credential file (env {ENV_TOKEN_FILE})",
    )
    connection.add_argument(
        "--ca-file",
        metavar="FILE",
        help=f"the coordinator's CA certificate: use TLS (env {ENV_CA_FILE})",
    )
    connection.add_argument(
        "--timeout", type=float, default=10.0, metavar="SECONDS", help="seconds per call"
    )
    # Commands that print a result also print it as one JSON document.
    common = argparse.ArgumentParser(add_help=False, parents=[connection])
    common.add_argument("--json", action="store_true", help="print one JSON document")

    p = argparse.ArgumentParser(
        prog="deskfleet",
        description=__doc__,
        epilog=(
            f"The coordinator is --coordinator, else ${ENV_COORDINATOR}, else the config file"
            f" ({config_file()}), else {DEFAULT_COORDINATOR}. The credential is --token-file,"
            f" else ${ENV_TOKEN_FILE}, else the config file. Shell completion:"
            " `deskfleet completion bash|zsh|fish`."
        ),
    )
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
    create = leaf(tokens, "create", _tokens_create, "create an expiring enrollment token")
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
    urotate = leaf(users, "rotate", _users_rotate, "replace a user's token (default: your own)")
    urotate.add_argument(
        "name", nargs="?", default="", metavar="USER", help="a user's name or id (admins)"
    )
    urotate.add_argument(
        "--save", type=Path, metavar="FILE", help="write the new token to FILE (0600) instead"
    )

    leaf(sub, "status", _status, "fleet status: workers online by capability")
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
    top.add_parser(sub, leaf)

    workers = sub.add_parser("workers", help="enrolled workers").add_subparsers(
        dest="sub", required=True, metavar="ACTION"
    )
    wlist = leaf(workers, "list", _workers_list, "list enrolled workers")
    wlist.add_argument("--all", action="store_true", help="include revoked workers")
    for name, rpc, verb, help_text in (
        ("show", "GetWorker", "", "one worker in detail, with capability reasons"),
        ("revoke", "RevokeWorker", "revoked", "disconnect the worker and refuse it from now on"),
        ("drain", "DrainWorker", "draining: no new work will reach it", "stop new work for it"),
        ("undrain", "UndrainWorker", "active again", "let new work reach it again"),
        (
            "rotate",
            "RotateWorker",
            "asked for a new credential (now if connected, else when it next connects)",
            "replace the worker's credential; the old one stops once the new one is used",
        ),
    ):
        leaf(workers, name, _worker_action(rpc, verb), help_text).add_argument(
            "id", metavar="WORKER_ID", help="the worker's id (deskfleet workers list)"
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
    if args.run is None:  # `completion`: needs no coordinator
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


def _run(args: argparse.Namespace) -> int:
    try:
        config = ClientConfig.resolve(args.coordinator, args.token_file, args.ca_file)
        if args.timeout <= 0:
            raise InvalidArgumentError("--timeout must be positive")
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
    except desktop_commands.ActionNotDone:
        return desktop_commands.EXIT_ACTION_NOT_DONE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
