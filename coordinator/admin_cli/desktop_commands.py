"""`deskfleet desktop|approvals|kill|secrets ...`: scoped desktop control under a kill switch."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from pathlib import Path
from typing import Any

import grpc

from coordinator.admin_cli import render
from coordinator.admin_cli.client import CoordinatorClient
from coordinator.admin_cli.out_files import check_writable, write_private
from shared import desktop_scope
from shared.config import config_file, file_settings, parse_duration
from shared.errors import InvalidArgumentError, UnavailableError, from_rpc_error
from shared.gen.deskfleet.v1 import desktop_pb2, runs_pb2
from shared.states import APPROVAL_STATES

ACTIONS = desktop_scope.ACTIONS
EXIT_ACTION_NOT_DONE = 7  # the action was refused, failed, or its outcome is not known


class ActionNotDone(Exception):
    """`desktop act` ended without success (the receipt is printed all the same)."""


def _region(text: str | None) -> desktop_pb2.Region | None:
    """WxH+X+Y, as X11 geometry is written."""
    if not text:
        return None
    try:
        size, x, y = text.split("+")
        w, h = size.lower().split("x")
        return desktop_pb2.Region(x=int(x), y=int(y), width=int(w), height=int(h))
    except ValueError as exc:
        raise InvalidArgumentError(f"--region {text!r}: expected WIDTHxHEIGHT+X+Y") from exc


def _scope(args: argparse.Namespace) -> desktop_pb2.DesktopScope:
    scope = desktop_pb2.DesktopScope(
        actions=args.action or [],
        displays=args.display or [],
        ttl_seconds=parse_duration(args.ttl) if args.ttl else 0,
        max_actions=args.max_actions or 0,
    )
    region = _region(args.region)
    if region is not None:
        scope.region.CopyFrom(region)
    return scope


def request(client: CoordinatorClient, args: argparse.Namespace) -> None:
    region = _region(args.region)
    session = client.fleet_client.request_desktop(
        args.worker,  # an id or a worker's unique name
        actions=args.action or [],
        ttl=parse_duration(args.ttl) if args.ttl else desktop_scope.DEFAULT_TTL,
        max_actions=args.max_actions or None,
        displays=args.display or (0,),
        region=None if region is None else (region.x, region.y, region.width, region.height),
        reason=args.reason or "",
        title=args.title or "",
    )
    doc = session.run.to_dict()
    if args.json:
        render.print_json(doc)
        return
    print(f"desktop run {doc['id']} waits for approval")
    waiting = doc.get("waiting", {})
    if waiting:
        print(f"  {waiting.get('detail', '')}")


def _act_args(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if args.args:
        try:
            extra = json.loads(args.args)
        except ValueError as exc:
            raise InvalidArgumentError(f"--args: not JSON ({exc})") from exc
        if not isinstance(extra, dict):
            raise InvalidArgumentError("--args: a JSON object")
        out.update(extra)
    for name in ("x", "y", "to_x", "to_y", "dx", "dy", "display", "quality"):
        value = getattr(args, name)
        if value is not None:
            out[name] = value
    for name in ("text", "key", "format"):
        value = getattr(args, name)
        if value is not None:
            out[name] = value
    if args.zoom_region:
        try:
            out["region"] = [int(v) for v in args.zoom_region.split(",")]
        except ValueError as exc:
            raise InvalidArgumentError(
                f"--region {args.zoom_region!r}: expected X0,Y0,X1,Y1 (integers)"
            ) from exc
    if args.seconds is not None:
        out["seconds"] = args.seconds
    if args.space:
        try:
            w, h = args.space.lower().split("x")
            out["space"] = {"width": int(w), "height": int(h)}
        except ValueError as exc:
            raise InvalidArgumentError(f"--space {args.space!r}: expected WIDTHxHEIGHT") from exc
    if args.screenshot_after:
        out["screenshot_after"] = True
    if args.action in ("screenshot", "zoom") and args.out and "format" not in out:
        suffix = Path(args.out).suffix.lower().lstrip(".")
        out["format"] = {"jpg": "jpeg"}.get(suffix, suffix) if suffix else "png"
    return out


def act(client: CoordinatorClient, args: argparse.Namespace) -> None:
    act_args = _act_args(args)
    if args.out:
        check_writable(Path(args.out))  # before the action runs, not after
    session = client.fleet_client.desktop(args.run_id)
    done = session.act(args.action, timeout=args.wait_seconds, **act_args)
    doc = done.to_dict()
    result_json = doc.pop("resultJson", "")
    doc["result"] = json.loads(result_json) if result_json else None
    written = ""
    if args.out and done.artifacts:
        art = next(
            (a for a in done.artifacts if a.role in ("screenshot", "zoom")), done.artifacts[-1]
        )
        write_private(Path(args.out), session.artifact(art.sha256))
        written = args.out
        doc["out"] = written
    if args.json:
        render.print_json(doc)
    else:
        print(render.act_line(doc))
        if written:
            print(f"  wrote {written}")
    if not done.succeeded:
        raise ActionNotDone(done.status)


def resume(client: CoordinatorClient, args: argparse.Namespace) -> None:
    run = client.call(client.desktop.Continue, runs_pb2.RunRef(id=args.id))
    doc = render.as_dict(run)
    if args.json:
        render.print_json(doc)
    else:
        print(f"run {doc['id']} continues: input may resume with the next action")


ENV_CONSOLE = "DESKFLEET_CONSOLE"


def _console_url(given: str | None) -> str:
    """The console's base URL: --console, DESKFLEET_CONSOLE, or `console` in the config file."""
    url = given or os.environ.get(ENV_CONSOLE) or file_settings().get("console", "")
    if not url:
        raise InvalidArgumentError(
            f"no console address: pass --console URL (e.g. http://127.0.0.1:8080), set"
            f" {ENV_CONSOLE}, or put `console` in {config_file()}"
        )
    if not url.startswith(("http://", "https://")) or any(c in url for c in ' "<>'):
        raise InvalidArgumentError(f"--console {url[:100]!r}: an http:// or https:// URL")
    return url.rstrip("/")


def _is_run(target: str, forced: bool) -> bool:
    return forced or target.startswith("run_")


def watch(client: CoordinatorClient, args: argparse.Namespace) -> None:
    """The viewer's URL, after one frame proves the caller may watch and the screen is there
    (that look is audited as a viewing)."""
    base = _console_url(args.console)
    as_run = _is_run(args.target, args.run)
    request = desktop_pb2.WatchScreenRequest(
        run=args.target if as_run else "", worker="" if as_run else args.target
    )
    stream = client.desktop.WatchScreen(request, metadata=client.metadata(), timeout=30)
    first = None
    try:
        for frame in stream:
            if frame.seq:
                first = frame
                break
    except grpc.RpcError as exc:
        raise from_rpc_error(exc, client.config.coordinator) from exc
    finally:
        stream.cancel()
    if first is None:
        raise UnavailableError("the live view ended before its first frame")
    if args.out:
        write_private(Path(args.out), first.data)
    kind, ref = ("runs", args.target) if as_run else ("workers", first.worker_id)
    url = f"{base}/{kind}/{ref}/screen"
    doc = {
        "url": url,
        "workerId": first.worker_id,
        "display": first.display,
        "width": first.width,
        "height": first.height,
        "out": args.out or "",
    }
    if args.json:
        render.print_json(doc)
        return
    print(url)
    saved = f"; the current frame is in {args.out}" if args.out else ""
    print(
        f"display {first.display} of worker {first.worker_id} ({first.width}x{first.height})"
        f" is live there, view only{saved}; each viewing is audited",
        file=sys.stderr,
    )


def takeover(client: CoordinatorClient, args: argparse.Namespace) -> None:
    base = _console_url(args.console) if not args.no_url else ""
    as_run = _is_run(args.target, args.run)
    request = desktop_pb2.TakeOverRequest(
        run=args.target if as_run else "",
        worker="" if as_run else args.target,
        reason=args.reason or "",
    )
    row = client.call(client.desktop.TakeOver, request)
    doc = render.as_dict(row)
    if base:
        doc["url"] = f"{base}/takeovers/{row.id}"
    if args.json:
        render.print_json(doc)
        return
    paused = f"run {row.run_id} waits as human_active" if row.run_id else "no run held it"
    print(doc.get("url") or row.id)
    print(
        f"takeover {row.id}: you hold worker {row.worker_id}'s desktop ({paused}); give it"
        f" back with: deskfleet desktop handback {row.id}",
        file=sys.stderr,
    )


def handback(client: CoordinatorClient, args: argparse.Namespace) -> None:
    by_id = args.target.startswith("tk_")
    request = desktop_pb2.HandBackRequest(
        takeover=args.target if by_id else "",
        worker="" if by_id else args.target,
        note=args.note or "",
    )
    row = client.call(client.desktop.HandBack, request)
    doc = render.as_dict(row)
    if args.json:
        render.print_json(doc)
        return
    goes_on = f"; run {row.run_id} goes on" if row.run_id else ""
    print(f"takeover {row.id} handed back after {row.events} input event(s){goes_on}")


def peek(client: CoordinatorClient, args: argparse.Namespace) -> None:
    shot = client.call(
        client.approvals.PeekScreen, desktop_pb2.PeekScreenRequest(id=args.id), timeout=30
    )
    write_private(Path(args.out), shot.data)
    doc = render.as_dict(shot)
    doc.pop("data", None)
    doc["out"] = args.out
    if args.json:
        render.print_json(doc)
    else:
        print(
            f"display {shot.display} of worker {shot.worker_id} ({shot.width}x{shot.height},"
            f" {shot.media_type}) written to {args.out}; the look is in the audit log"
        )


def approvals_list(client: CoordinatorClient, args: argparse.Namespace) -> None:
    reply = client.call(
        client.approvals.ListApprovals,
        desktop_pb2.ListApprovalsRequest(status=args.status or "", limit=args.limit),
    )
    doc = render.as_dict(reply)
    if args.json:
        render.print_json(doc)
    elif doc.get("approvals"):
        print(render.approval_rows(doc["approvals"]))
    else:
        print(f"no {args.status or 'pending'} approvals")


def approve(client: CoordinatorClient, args: argparse.Namespace) -> None:
    row = client.call(
        client.approvals.Approve,
        desktop_pb2.ApproveRequest(id=args.id, scope=_scope(args), reason=args.reason or ""),
    )
    doc = render.as_dict(row)
    if args.json:
        render.print_json(doc)
    else:
        print(
            f"approval {doc['id']} approved for run {doc['runId']}"
            f" until {doc.get('expiresAt', '?')}: {render.scope_text(doc.get('granted', {}))}"
        )


def deny(client: CoordinatorClient, args: argparse.Namespace) -> None:
    row = client.call(
        client.approvals.Deny, desktop_pb2.DenyRequest(id=args.id, reason=args.reason or "")
    )
    doc = render.as_dict(row)
    if args.json:
        render.print_json(doc)
    else:
        print(f"approval {doc['id']} denied; run {doc['runId']} is cancelled")


def guide_approval(client: CoordinatorClient, args: argparse.Namespace) -> None:
    # The same guidance again is the saved answer: a send whose answer was lost is repeated.
    row = client.call_repeatable(
        client.approvals.GuideApproval, desktop_pb2.GuideApprovalRequest(id=args.id, text=args.text)
    )
    doc = render.as_dict(row)
    if args.json:
        render.print_json(doc)
    else:
        print(
            f"approval {doc['id']} answered with guidance, not approved: run {doc['runId']}"
            " reads it at its next step and asks anew (deskfleet approvals list)"
        )


def discuss_approval(client: CoordinatorClient, args: argparse.Namespace) -> None:
    found = client.call(
        client.approvals.DiscussApproval,
        desktop_pb2.DiscussApprovalRequest(id=args.id, text=args.text or ""),
    )
    doc = render.as_dict(found)
    if args.json:
        render.print_json(doc)
    else:
        print(render.discussion(doc))


def advise_approval(client: CoordinatorClient, args: argparse.Namespace) -> None:
    # A model call can take up to its 2 minutes.
    note = client.call(
        client.approvals.AdviseApproval,
        desktop_pb2.AdviseApprovalRequest(id=args.id, model=args.model or ""),
        timeout=150,
    )
    doc = render.as_dict(note)
    if args.json:
        render.print_json(doc)
    else:
        print(f"advice ({note.author}; it approves nothing):")
        print(render.safe_text(note.text))


def kill_engage(client: CoordinatorClient, args: argparse.Namespace) -> None:
    view = client.call(
        client.kills.Engage,
        desktop_pb2.EngageKillRequest(
            worker=args.worker or "", run=args.run_target or "", reason=args.reason
        ),
    )
    doc = render.as_dict(view)
    if args.json:
        render.print_json(doc)
    else:
        target = f" {doc['target']}" if doc.get("target") else ""
        pushed = doc.get("unacknowledgedCount", 0)
        print(
            f"kill switch {doc['id']} engaged for {doc['scope']}{target}; pushed to {pushed}"
            " connected worker(s) (see `deskfleet kill status`)"
        )


def kill_release(client: CoordinatorClient, args: argparse.Namespace) -> None:
    reply = client.call(
        client.kills.Release,
        desktop_pb2.ReleaseKillRequest(
            id=args.id or "",
            worker=args.worker or "",
            run=args.run_target or "",
            fleet=args.fleet,
            reason=args.reason or "",
        ),
    )
    doc = render.as_dict(reply)
    if args.json:
        render.print_json(doc)
        return
    for k in doc.get("switches", []):
        print(f"kill switch {k['id']} released; desktop runs it stopped must be approved again")


def kill_status(client: CoordinatorClient, args: argparse.Namespace) -> None:
    reply = client.call(
        client.kills.Status, desktop_pb2.KillStatusRequest(include_released=args.all)
    )
    doc = render.as_dict(reply)
    doc.setdefault("local", [])
    doc.setdefault("localCount", 0)
    if args.json:
        render.print_json(doc)
        return
    if doc.get("switches"):
        print(render.kill_rows(doc["switches"]))
    if doc["local"]:
        if doc.get("switches"):
            print()
        count = int(doc["localCount"])
        print(f"engaged on the workers themselves (only the worker releases it): {count}")
        print(render.local_kill_rows(doc["local"]))
        if count > len(doc["local"]):
            print(f"(the {len(doc['local'])} most recently engaged of {count})")
    if not doc.get("switches") and not doc["local"]:
        print("no kill switch is engaged")


def secrets_set(client: CoordinatorClient, args: argparse.Namespace) -> None:
    if args.value_stdin:
        value = sys.stdin.read().rstrip("\n")
    elif sys.stdin.isatty():
        value = getpass.getpass(f"value of secret {args.name}: ")
    else:
        value = sys.stdin.readline().rstrip("\n")
    info = client.call(
        client.desktop.SetSecret,
        desktop_pb2.SetSecretRequest(name=args.name, value=value, owner=args.owner or ""),
    )
    doc = render.as_dict(info)
    if args.json:
        render.print_json(doc)
    else:
        print(
            f"secret {doc['name']} stored for {doc['owner']}; type it with"
            f" {{{{secret:{doc['name']}}}}} (the value is never shown again)"
        )


# Positional and option ids read the same in every usage line and help.
RUN_ID: dict[str, str] = {"metavar": "RUN_ID", "help": "the run's id"}
WORKER_ID: dict[str, str] = {"metavar": "WORKER_ID", "help": "the worker's id or unique name"}
APPROVAL_ID: dict[str, str] = {"metavar": "APPROVAL_ID", "help": "the approval's id"}
_INT_ARGS = (
    ("x", "X", "click, move, drag: the horizontal pixel"),
    ("y", "Y", "click, move, drag: the vertical pixel"),
    ("to_x", "X", "drag: where to end, horizontally"),
    ("to_y", "Y", "drag: where to end, vertically"),
    ("dx", "DX", "scroll: columns (negative: left)"),
    ("dy", "DY", "scroll: lines (negative: up)"),
    ("display", "INDEX", "the display index (default 0)"),
    ("quality", "Q", "screenshot: JPEG or WebP quality, 1-100"),
)


def _scope_options(p: argparse.ArgumentParser, narrowing: bool) -> None:
    verb = "narrow to" if narrowing else "ask for"
    p.add_argument(
        "--action", action="append", choices=ACTIONS, help=f"{verb} this action (repeatable)"
    )
    p.add_argument(
        "--display",
        action="append",
        type=int,
        metavar="INDEX",
        help=f"{verb} this display index (repeatable)",
    )
    p.add_argument(
        "--region",
        metavar="WxH+X+Y",
        help=f"{verb} this screen region, WIDTHxHEIGHT+X+Y (real pixels)",
    )
    p.add_argument(
        "--ttl",
        metavar="DURATION",
        help=f"{verb} this duration once approved, e.g. 10m (default 10m)",
    )
    p.add_argument(
        "--max-actions", type=int, metavar="N", help=f"{verb} at most N actions (default 100)"
    )


def add_parsers(sub: Any, leaf: Any) -> None:
    desktop = sub.add_parser("desktop", help="scoped desktop control").add_subparsers(
        dest="sub", required=True, metavar="ACTION"
    )
    p = leaf(desktop, "request", request, "ask for desktop control of a worker; opens a run")
    p.add_argument("--worker", required=True, **WORKER_ID)
    _scope_options(p, narrowing=False)
    p.add_argument("--title", metavar="TEXT", help="a short title for the run")
    p.add_argument("--reason", metavar="TEXT", help="why, shown to the approver")
    p = leaf(desktop, "act", act, "run one action in an approved desktop run")
    p.add_argument("run_id", **RUN_ID)
    p.add_argument("action", choices=ACTIONS, metavar="ACTION", help=", ".join(ACTIONS))
    for name, metavar, text in _INT_ARGS:
        p.add_argument(
            f"--{name.replace('_', '-')}", dest=name, type=int, metavar=metavar, help=text
        )
    p.add_argument(
        "--text", metavar="TEXT", help="text to type; {{secret:NAME}} types a stored secret"
    )
    p.add_argument("--key", metavar="KEY", help="a key or combo, e.g. Return, ctrl+a, shift+Tab")
    p.add_argument(
        "--seconds", type=float, metavar="SECONDS", help="for wait and hold_key: how long"
    )
    p.add_argument(
        "--region",
        dest="zoom_region",
        metavar="X0,Y0,X1,Y1",
        help="for zoom: the rectangle to see at full resolution (the far corner exclusive)",
    )
    p.add_argument(
        "--space",
        metavar="WxH",
        help="coordinates and screenshots in this space, e.g. 1280x800",
    )
    p.add_argument("--format", choices=("png", "webp", "jpeg"), help="screenshot encoding")
    p.add_argument("--screenshot-after", action="store_true", help="attach a screenshot after")
    p.add_argument("--args", metavar="JSON", help="more arguments as a JSON object")
    p.add_argument("--out", metavar="FILE", help="write the screenshot (or zoom) to this file")
    p.add_argument(
        "--wait-seconds",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for the receipt (default 60)",
    )
    leaf(desktop, "continue", resume, "after human_active: let input resume").add_argument(
        "id", **RUN_ID
    )
    console_help = (
        f"the console's base URL (default: ${ENV_CONSOLE}, or `console` in the config file)"
    )
    p = leaf(desktop, "watch", watch, "print the URL of a desktop's live view (view only)")
    p.add_argument("target", metavar="WORKER|RUN", help="a worker's id or name, or a run id")
    p.add_argument("--run", action="store_true", help="TARGET is a run (run ids are found anyway)")
    p.add_argument("--console", metavar="URL", help=console_help)
    p.add_argument("--out", metavar="FILE", help="also write the current frame (JPEG) here")
    p = leaf(desktop, "takeover", takeover, "take a desktop's controls from its agent")
    p.add_argument("target", metavar="RUN|WORKER", help="a desktop run, or a worker")
    p.add_argument("--run", action="store_true", help="TARGET is a run (run ids are found anyway)")
    p.add_argument("--reason", metavar="TEXT", help="why, for the run's journal and the audit")
    p.add_argument("--console", metavar="URL", help=console_help)
    p.add_argument(
        "--no-url", action="store_true", help="print the takeover's id, not its page's URL"
    )
    p = leaf(desktop, "handback", handback, "give a taken-over desktop back to its run")
    p.add_argument("target", metavar="TAKEOVER|WORKER", help="a takeover id, or the worker")
    p.add_argument("--note", metavar="TEXT", help="what you did, for the run's journal")

    approvals = sub.add_parser("approvals", help="answer permission requests").add_subparsers(
        dest="sub", required=True, metavar="ACTION"
    )
    p = leaf(approvals, "list", approvals_list, "approvals (pending by default)")
    p.add_argument(
        "--status",
        choices=[str(s) for s in APPROVAL_STATES],
        help="only approvals in this state (default pending)",
    )
    p.add_argument(
        "--limit", type=int, default=50, metavar="N", help="at most this many (default 50)"
    )
    p = leaf(approvals, "approve", approve, "approve, optionally narrowing the scope")
    p.add_argument("id", **APPROVAL_ID)
    _scope_options(p, narrowing=True)
    p.add_argument("--reason", metavar="TEXT", help="why, kept with the answer")
    p = leaf(
        approvals,
        "peek",
        peek,
        "admins: one screenshot of the display a pending request targets (audited)",
    )
    p.add_argument("id", **APPROVAL_ID)
    p.add_argument("--out", required=True, metavar="FILE", help="write the image to this file")
    p = leaf(
        approvals,
        "guide",
        guide_approval,
        "answer with a correction, not a grant: the run reads it and asks anew",
    )
    p.add_argument("id", **APPROVAL_ID)
    p.add_argument("text", metavar="TEXT", help="the correction (e.g. use the left window)")
    p = leaf(
        approvals,
        "discuss",
        discuss_approval,
        "with TEXT, add a message to the approval's discussion (it answers nothing); without,"
        " print the discussion",
    )
    p.add_argument("id", **APPROVAL_ID)
    p.add_argument("text", metavar="TEXT", nargs="?", default="", help="your message")
    p = leaf(
        approvals,
        "advise",
        advise_approval,
        "admins: a model's read-only advice on the request (it approves nothing)",
    )
    p.add_argument("id", **APPROVAL_ID)
    p.add_argument(
        "--model",
        metavar="PROVIDER:MODEL",
        help="the model to ask (default: the goal's own, or the coordinator's --advice-model)",
    )
    p = leaf(approvals, "deny", deny, "deny: the waiting run is cancelled")
    p.add_argument("id", **APPROVAL_ID)
    p.add_argument("--reason", metavar="TEXT", help="why, kept with the answer")

    kill = sub.add_parser("kill", help="the kill switch").add_subparsers(
        dest="sub", required=True, metavar="ACTION"
    )
    p = leaf(kill, "engage", kill_engage, "stop desktop input: the fleet, a worker or a run")
    target = p.add_mutually_exclusive_group()
    target.add_argument(
        "--worker", metavar="WORKER_ID", help="stop this worker's input (id or name)"
    )
    target.add_argument("--run", dest="run_target", metavar="RUN_ID", help="stop this run's input")
    p.add_argument("--reason", required=True, metavar="TEXT", help="why, kept with the switch")
    p = leaf(kill, "release", kill_release, "release a kill switch (runs need re-approval)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--id", metavar="SWITCH_ID", help="the switch with this id")
    which.add_argument(
        "--worker", metavar="WORKER_ID", help="the switches on this worker (id or name)"
    )
    which.add_argument(
        "--run", dest="run_target", metavar="RUN_ID", help="the switches on this run"
    )
    which.add_argument("--fleet", action="store_true", help="the fleet-wide switch")
    p.add_argument("--reason", metavar="TEXT", help="why, kept with the release")
    p = leaf(kill, "status", kill_status, "engaged switches and who has acknowledged them")
    p.add_argument("--all", action="store_true", help="include released switches")

    secrets = sub.add_parser("secrets", help="values `type` may reference").add_subparsers(
        dest="sub", required=True, metavar="ACTION"
    )
    p = leaf(secrets, "set", secrets_set, "store a secret (value from stdin or a prompt)")
    p.add_argument("name", metavar="NAME", help="the secret's name, as {{secret:NAME}} uses it")
    p.add_argument(
        "--owner", metavar="USER", help="an owner's name or id (admins); default: yourself"
    )
    p.add_argument("--value-stdin", action="store_true", help="read the whole of stdin")
