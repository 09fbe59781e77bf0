"""`deskfleet top`: a live view of the fleet, refreshed until Ctrl-C.

Each frame is one snapshot read through the ordinary RPCs (status, fleet activity,
approvals, kill switches); `--once` (or an output that is not a terminal) prints a single
frame, and `--json` prints the snapshot as one document.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from coordinator.admin_cli import render
from coordinator.admin_cli.client import CoordinatorClient
from shared.errors import DeskfleetError, InvalidArgumentError
from shared.gen.deskfleet.v1 import admin_pb2, desktop_pb2, fleet_pb2
from shared.states import RUN_STATES
from shared.text import visible

# Wide enough that ids are never cut when the frame goes to a file or a pipe.
PIPE_WIDTH = 200


def _epoch(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def snapshot(client: CoordinatorClient) -> dict[str, Any]:
    """What the fleet is doing now, as one document."""
    status = render.as_dict(
        client.call(client.fleet.GetWorkerStatus, fleet_pb2.GetWorkerStatusRequest())
    )
    activity = render.as_dict(
        client.call(client.admin.GetFleetActivity, admin_pb2.FleetActivityRequest())
    )
    approvals = render.as_dict(
        client.call(client.approvals.ListApprovals, desktop_pb2.ListApprovalsRequest(limit=50))
    )["approvals"]
    kills = render.as_dict(client.call(client.kills.Status, desktop_pb2.KillStatusRequest()))
    engaged = [k for k in kills["switches"] if k.get("engaged")]
    now = time.time()
    by_worker: dict[str, list[dict[str, Any]]] = {}
    for attempt in activity["actions"]:
        since = _epoch(attempt.get("since"))
        attempt["seconds"] = round(now - since, 3) if since is not None else None
        by_worker.setdefault(attempt["workerId"], []).append(attempt)
    workers = []
    for w in status["workers"]:
        held = by_worker.get(w["id"], [])
        workers.append(
            {
                "id": w["id"],
                "name": w["name"],
                "state": w["state"],
                "online": w["online"],
                "replica": w.get("replica", ""),
                "capabilities": [c["name"] for c in w.get("capabilities", []) if c["available"]],
                "currentAction": held[0] if held else None,
                "inFlight": len(held),
                "localKill": w.get("localKill") or {"engaged": False},
            }
        )
    runs_by_state = {state: 0 for state in RUN_STATES}
    runs_by_state.update(activity["runsByState"])
    return {
        "coordinator": client.config.coordinator,
        "at": datetime.fromtimestamp(now, UTC).isoformat(timespec="seconds"),
        "headlessOnline": status["headlessOnline"],
        "computerUseOnline": status["computerUseOnline"],
        "workersOnline": status.get("online", 0),
        "workers": workers,
        # `workers` is the first page; the counts above cover the whole fleet.
        "moreWorkers": bool(status.get("nextPageToken")),
        "runsByState": runs_by_state,
        "fleetWide": activity["fleetWide"],
        "approvalsWaiting": len(approvals),
        "approvals": approvals,
        "killSwitchEngaged": bool(engaged) or bool(kills.get("localCount")),
        "killSwitches": engaged,
        # Workers' own switches, as they report them (the first LISTED; the count is exact).
        "localKillSwitches": kills.get("local", []),
        "localKillCount": int(kills.get("localCount", 0)),
    }


def _action_cell(worker: dict[str, Any]) -> str:
    a = worker["currentAction"]
    if a is None:
        return "idle" if worker["online"] else "-"
    seconds = f", {a['seconds']:.1f} s" if a.get("seconds") is not None else ""
    more = f" (+{worker['inFlight'] - 1} more)" if worker["inFlight"] > 1 else ""
    return (
        f"{a['kind']} #{a['index']} attempt {a['attempt']} {a['status']}{seconds}"
        f" in {a['runId']}{more}"
    )


def _kill_line(doc: dict[str, Any]) -> Text:
    if not doc["killSwitchEngaged"]:
        return Text("kill switch: released (none engaged)")
    parts = [
        f"{k['scope']}{' ' + k['target'] if k.get('target') else ''}"
        f" by {k.get('engagedByName') or k.get('engagedBy') or '?'}: {k.get('reason') or '-'}"
        for k in doc["killSwitches"]
    ]
    parts += [
        f"worker {k['workerId']} locally (by {k.get('state', {}).get('means') or '?'}):"
        f" {k.get('state', {}).get('reason') or '-'}"
        for k in doc.get("localKillSwitches", [])
    ]
    more = doc.get("localKillCount", 0) - len(doc.get("localKillSwitches", []))
    if more > 0:
        parts.append(f"+{more} more workers locally")
    return Text("kill switch: ENGAGED: " + "; ".join(parts), style="bold red")


def _shown(value: Any) -> Any:
    """The snapshot with control characters spelled out in every string (shared/text.py)."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {k: _shown(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shown(v) for v in value]
    return value


def _row(table: Table, *cells: str, style: str = "") -> None:
    # Text cells: what a worker or an owner wrote is shown as it is, never read as markup.
    table.add_row(*(Text(c) for c in cells), style=style)


def frame(doc: dict[str, Any], note: str = "") -> RenderableType:
    """One screen of `top`."""
    doc, note = _shown(doc), visible(note)
    head = Text(f"deskfleet top  {doc['coordinator']}  {doc['at']}", style="bold")
    online = Text(
        f"headless online: {doc['headlessOnline']}    computer use online:"
        f" {doc['computerUseOnline']}    workers online: {doc['workersOnline']}"
        f" of {len(doc['workers'])}{'+ (the first page below)' if doc.get('moreWorkers') else ''}"
    )
    workers = Table(title="workers", title_justify="left", expand=False)
    for column in ("ID", "NAME", "STATE", "ONLINE", "REPLICA", "CAPABILITIES"):
        workers.add_column(column, no_wrap=True)
    workers.add_column("CURRENT ACTION", overflow="fold")
    for w in doc["workers"]:
        _row(
            workers,
            w["id"],
            w["name"],
            # A document of `top --json` from before local switches were reported has none.
            w["state"] + (", local kill" if (w.get("localKill") or {}).get("engaged") else ""),
            "yes" if w["online"] else "no",
            w["replica"] or "-",
            ",".join(w["capabilities"]) or "none",
            _action_cell(w),
        )
    scope = "all owners" if doc["fleetWide"] else "your runs"
    runs = Table(title=f"runs by state ({scope})", title_justify="left")
    runs.add_column("STATE", no_wrap=True)
    runs.add_column("RUNS", justify="right")
    for state, count in doc["runsByState"].items():
        _row(runs, state, str(count), style="dim" if not count else "")
    parts: list[RenderableType] = [head, online, _kill_line(doc)]
    parts.append(Text(f"approvals waiting: {doc['approvalsWaiting']}"))
    parts += [workers, runs]
    if doc["approvals"]:
        waiting = Table(title="approvals waiting", title_justify="left")
        for column in ("ID", "RUN", "WORKER", "REASON", "REQUESTED"):
            waiting.add_column(column, no_wrap=column != "REASON")
        for a in doc["approvals"]:
            _row(
                waiting,
                a["id"],
                a["runId"],
                a["workerId"],
                a.get("reason") or "-",
                a.get("requestedAt") or "-",
            )
        parts.append(waiting)
    if note:
        parts.append(Text(note, style="yellow"))
    return Group(*parts)


def top(client: CoordinatorClient, args: argparse.Namespace) -> None:
    if args.interval <= 0:
        raise InvalidArgumentError("--interval must be a positive number of seconds")
    doc = snapshot(client)  # an unreachable coordinator fails here, with the usual error
    if args.json:
        render.print_json(doc)
        return
    if args.once or not sys.stdout.isatty():
        Console(width=PIPE_WIDTH if not sys.stdout.isatty() else None).print(frame(doc))
        return
    _live(lambda: snapshot(client), doc, args.interval)


def _live(read: Callable[[], dict[str, Any]], doc: dict[str, Any], interval: float) -> None:
    footer = f"every {interval:g} s; Ctrl-C to quit"
    # A process started with SIGINT ignored (a parent that ignores it passes that on) would
    # never leave a live view: this view says Ctrl-C quits, so it makes that true.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with Live(frame(doc, footer), auto_refresh=False, screen=False) as live:
            while True:
                time.sleep(interval)
                try:
                    doc = read()
                    note = footer
                except DeskfleetError as exc:
                    # A live view outlasts a coordinator restart: keep the last frame, say why.
                    note = f"{exc.message} (showing the last answer; retrying)"
                live.update(frame(doc, note), refresh=True)
    except KeyboardInterrupt:
        return  # Ctrl-C is how one leaves top: not an error


def add_parser(sub: Any, leaf: Any) -> None:
    p = leaf(sub, "top", top, "a live view of the fleet: workers, their actions, runs, approvals")
    p.add_argument(
        "--interval",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="refresh every this many seconds (default 2)",
    )
    p.add_argument(
        "--once",
        action="store_true",
        help="print one frame and exit (also when the output is not a terminal)",
    )
