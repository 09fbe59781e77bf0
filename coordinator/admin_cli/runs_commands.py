"""`deskfleet runs ...` and `deskfleet journal ...`: submit plans, follow and steer runs."""

from __future__ import annotations

import argparse
import math
import sys
import uuid
from pathlib import Path
from typing import Any

from coordinator.admin_cli import evidence_commands, render
from coordinator.admin_cli.client import CoordinatorClient
from coordinator.admin_cli.out_files import write_private
from deskfleet.client import RECONNECT_FOR
from deskfleet.errors import WatchLostError
from shared.errors import DeskfleetError, InvalidArgumentError, UnavailableError
from shared.gen.deskfleet.v1 import runs_pb2
from shared.plans import submit_request
from shared.receipts import GivenTwiceError, decode_result
from shared.states import ACTIVE, DONE, RUN_KINDS, RUN_STATES, RunState

# The plan reading the console and the MCP server share with `runs submit`.
plan_request = submit_request

EXIT_RUN_NOT_SUCCEEDED = 6
EXIT_NO_EVIDENCE = 8  # `research --wait`: the run ended without evidence (its stop reason says why)


class RunNotSucceeded(Exception):
    """`--wait` saw the run stop without success (the document is printed all the same)."""


class NoEvidence(Exception):
    """`research --wait` saw the run end with no evidence (the report is printed all the same)."""


def read_plan_file(path: str) -> Any:
    """PLAN.json as a document, checked as a plan (naming the field at fault on any mistake)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError as exc:
        raise InvalidArgumentError(f"plan file {path} does not exist") from exc
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(f"plan file {path}: {exc}") from exc
    try:
        # As the coordinator reads JSON: a key given twice is refused by its path
        # (`actions[0].idempotent: given twice`), never resolved to one of the two.
        plan = decode_result(text)
    except GivenTwiceError:
        raise
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"plan file {path}: {exc.message}") from exc
    plan_request(plan, f"plan file {path}")  # its mistakes named as the file's
    return plan


def load_plan(path: str) -> runs_pb2.SubmitRunRequest:
    """Read PLAN.json into a request, naming the field at fault on any mistake."""
    return plan_request(read_plan_file(path), f"plan file {path}")


def _print_run(doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        render.print_json(doc)
    else:
        print(render.run_detail(doc))


# With --wait, SubmitRun itself waits this long: a short run is submitted and answered in one
# round trip; a longer one is announced, then followed with WaitRun.
SUBMIT_WAIT = 5.0
MAX_SEQ = 2**31 - 1  # a journal's sequence numbers are int32 on the wire


def submit(client: CoordinatorClient, args: argparse.Namespace) -> None:
    plan = read_plan_file(args.plan)
    handle = client.fleet_client.submit_plan(plan, wait=SUBMIT_WAIT if args.wait else 0)
    run = handle.started
    assert run is not None
    if args.wait and run.active:
        if not args.json:
            print(f"run {run.id} submitted; waiting for it to stop...", file=sys.stderr)
        run = handle.result()
    _print_run(run.to_dict(), args.json)
    if args.wait and run.status != RunState.SUCCEEDED:
        raise RunNotSucceeded(run.status)


def revise(client: CoordinatorClient, args: argparse.Namespace) -> None:
    plan = load_plan(args.plan)
    if plan.HasField("limits") and plan.limits.ByteSize():
        raise InvalidArgumentError(
            f"plan file {args.plan}: limits carry over from the run; a revise sets none"
            ' (remove "limits")'
        )
    request = runs_pb2.ReviseRunRequest(id=args.id, actions=plan.actions)
    _print_run(render.as_dict(client.call(client.runs.ReviseRun, request)), args.json)


def show(client: CoordinatorClient, args: argparse.Namespace) -> None:
    doc = render.as_dict(client.call(client.runs.GetRun, runs_pb2.RunRef(id=args.id)))
    _timeline_nulls(doc.get("timeline"))
    _tree_nulls(doc)
    if args.artifacts_dir:
        _save_artifacts(client, doc, Path(args.artifacts_dir))
    _print_run(doc, args.json)


def _tree_nulls(doc: dict[str, Any]) -> None:
    """A run with no parent says `"parent": null`, not an empty string."""
    doc["parent"] = doc.get("parent") or None


def _timeline_nulls(timeline: dict[str, Any] | None) -> None:
    """Name the open ends (the current state, a live run's end) as null rather than leave
    them out, so a program can tell "still open" from "not reported"."""
    if timeline is None:
        return
    timeline.setdefault("endedAt", None)
    timeline.setdefault("submittedAt", None)
    for state in timeline.get("states", []):
        state.setdefault("leftAt", None)
    for attempt in timeline.get("actions", []):
        attempt.setdefault("startedAt", None)
        attempt.setdefault("finishedAt", None)


EXTENSIONS = {"image/png": ".png", "image/jpeg": ".jpg", "image/webp": ".webp"}


def _save_artifacts(client: CoordinatorClient, doc: dict[str, Any], directory: Path) -> None:
    """Write every artifact of the run into `directory` and note each file's path."""
    from shared.gen.deskfleet.v1 import desktop_pb2

    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)  # screens: the user's alone
    except OSError as exc:
        raise DeskfleetError(f"--artifacts-dir {directory}: {exc.strerror or exc}") from exc
    for action in doc.get("actions", []):
        for art in action.get("artifacts", []):
            reply = client.call(
                client.desktop.GetArtifact,
                desktop_pb2.GetArtifactRequest(run_id=doc["id"], sha256=art["sha256"]),
                timeout=60,
            )
            path = directory / (art["sha256"] + EXTENSIONS.get(art["mediaType"], ".bin"))
            write_private(path, reply.data, "--artifacts-dir")
            art["path"] = str(path)


def list_runs(client: CoordinatorClient, args: argparse.Namespace) -> None:
    doc = render.as_dict(
        client.call(
            client.runs.ListRuns,
            runs_pb2.ListRunsRequest(
                limit=args.limit,
                status=(args.status or "").upper(),
                kind=args.kind or "",
                owner=args.owner or "",
                parent=args.parent or "",
            ),
        )
    )
    for run in doc["runs"]:
        _tree_nulls(run)
    if args.json:
        render.print_json(doc)
    elif doc["runs"]:
        print(render.run_rows(doc["runs"]))
    else:
        print("no runs yet (submit one with `deskfleet runs submit PLAN.json`)")


def control(rpc: str) -> Any:
    def run(client: CoordinatorClient, args: argparse.Namespace) -> None:
        if rpc == "CancelRun":
            _print_run(client.fleet_client.run(args.id).cancel().to_dict(), args.json)
            return
        result = client.call(getattr(client.runs, rpc), runs_pb2.RunRef(id=args.id))
        _print_run(render.as_dict(result), args.json)

    return run


def guide(client: CoordinatorClient, args: argparse.Namespace) -> None:
    # One id per invocation: a send repeated after a lost answer is the same message.
    reply = client.fleet_client.run(args.id).guide(
        args.text,
        args.message_id or f"cli-{uuid.uuid4().hex}",
        expected_execution=args.expected_execution,
    )
    if args.json:
        render.print_json(reply.to_dict())
    elif reply.repeated_send:
        print(
            f"guidance {reply.guidance_id} (message {reply.message_id}) was already queued for"
            f" run {args.id} (journal event {reply.seq}): nothing sent twice;"
            f" `deskfleet runs show {args.id}` says where it stands"
        )
    else:
        print(
            f"guidance {reply.guidance_id} queued for run {args.id} (message {reply.message_id},"
            f" execution {reply.execution}, journal event {reply.seq}); it is delivered at the"
            " run's next safe boundary"
        )


def watch(client: CoordinatorClient, args: argparse.Namespace) -> None:
    """Stream the journal; after a disconnect, resume from the last sequence seen (the
    library reconnects and says so on stderr); past its window, name the command that
    goes on from the last event printed."""
    if not 0 <= args.reconnect_for < math.inf:  # NaN too: it reconnected forever
        raise InvalidArgumentError("--reconnect-for must be 0 or more seconds (a finite number)")
    if not 0 <= args.after_seq <= MAX_SEQ:
        raise InvalidArgumentError(f"--after-seq must be from 0 to {MAX_SEQ}")
    events: list[dict[str, Any]] = []
    printed = args.after_seq  # --json prints nothing until the end: resume from the start
    handle = client.fleet_client.run(args.id)
    try:
        for event in handle.watch(
            args.after_seq, follow=not args.no_follow, reconnect_for=args.reconnect_for
        ):
            doc = event.to_dict()
            if args.json:
                events.append(doc)
            else:
                print(render.event_line(doc), flush=True)
                printed = event.seq
    except WatchLostError as exc:
        again = ["deskfleet", "runs", "watch", args.id, "--after-seq", str(printed)]
        again += ["--no-follow"] if args.no_follow else []
        again += ["--json"] if args.json else []
        raise UnavailableError(f"{exc.message}; resume with: {' '.join(again)}") from exc
    if args.json:
        render.print_json({"runId": args.id, "events": events})


def journal_read(client: CoordinatorClient, args: argparse.Namespace) -> None:
    page = client.call(
        client.journal.ReadEntry,
        runs_pb2.ReadEntryRequest(
            run_id=args.run_id, seq=args.seq, offset=args.offset, limit=args.limit
        ),
    )
    doc = render.as_dict(page)
    if args.json:
        render.print_json(doc)
        return
    sys.stdout.write(page.text + "\n")
    more = f"more from --offset {page.next_offset}" if page.next_offset >= 0 else "end"
    print(
        f"[{page.kind} #{page.seq}: characters {page.offset}-{page.offset + len(page.text)}"
        f" of {page.total_length}{', archived' if page.archived else ''}; {more}]",
        file=sys.stderr,
    )


def journal_search(client: CoordinatorClient, args: argparse.Namespace) -> None:
    page = client.call(
        client.journal.SearchJournal,
        runs_pb2.SearchJournalRequest(
            run_id=args.run_id, text=args.text, cursor=args.cursor or "", limit=args.limit
        ),
    )
    doc = render.as_dict(page)
    if args.json:
        render.print_json(doc)
        return
    for m in doc["matches"]:
        print(f"#{m['seq']} {m['kind']} @{m['offset']}: {m['excerpt']}")
    if not doc["matches"]:
        print("no match in this page" + (" (more to search)" if doc["hasMore"] else ""))
    if doc["matchLimitReached"]:
        print(
            "some excerpts did not fit: narrow the search or read the events by --seq",
            file=sys.stderr,
        )
    if doc["hasMore"]:
        print(f"continue with --cursor {doc['cursor']}", file=sys.stderr)


def journal_verify(client: CoordinatorClient, args: argparse.Namespace) -> None:
    doc = render.as_dict(client.call(client.journal.VerifyJournal, runs_pb2.RunRef(id=args.run_id)))
    if args.json:
        render.print_json(doc)
    elif doc["ok"]:
        print(
            f"journal of {args.run_id} verified: {doc['eventsChecked']} events in an unbroken"
            f" chain, {doc['receiptsChecked']} receipts match their content hashes"
        )
    if not doc["ok"]:
        for problem in doc["problems"]:
            print(f"problem: {problem}", file=sys.stderr)
        raise RunNotSucceeded("journal verification failed")


def _report(client: CoordinatorClient, run_id: str) -> dict[str, Any] | None:
    report = client.fleet_client.research_report(run_id)
    return report.to_dict() or None


def research(client: CoordinatorClient, args: argparse.Namespace) -> None:
    fleet = client.fleet_client
    handle = fleet.start_research_request(
        runs_pb2.ResearchRequest(
            query=args.query,
            urls=args.url or [],
            search_url=searxng_template(args.searxng) if args.searxng else args.search_url or "",
            max_sources=args.max_sources,
            thorough=args.thorough,
            max_pages=args.max_pages,
            max_bytes=args.max_bytes,
            search_format="searxng" if args.searxng else "",
            result_selector=args.result_selector or "",
            link_selector=args.link_selector or "",
            snippet_selector=args.snippet_selector or "",
            search_profile=args.search_profile or "",
        )
    )
    run = handle.started
    assert run is not None
    if not args.wait:
        _print_run(run.to_dict(), args.json or args.format == "json")
        return
    shown = ""
    while run.active:
        done = sum(a.status in DONE for a in run.actions)
        line = f"research {run.id}: {done}/{len(run.actions)} work units done, {run.status}"
        if run.waiting:
            line += f" ({run.waiting})"
        if line != shown and not args.json and args.format != "json":
            print(line, file=sys.stderr, flush=True)
            shown = line
        run = handle.wait(1)
    doc = run.to_dict()
    report = fleet.research_report(run).to_dict() or None
    if args.json or args.format == "json":
        render.print_json({**doc, "report": report})
    elif args.format == "md":
        if report is None:
            print(render.run_detail(doc))
        else:
            sys.stdout.write(render.research_markdown(report, doc))
    else:
        print(render.run_detail(doc))
        if report is not None:
            print()
            print(render.research_report(report))
    if run.status != RunState.SUCCEEDED:
        raise RunNotSucceeded(run.status)
    if run.stop_reason.startswith("no_evidence"):
        if not args.json:
            print(f"deskfleet: {run.stop_reason}", file=sys.stderr)
        raise NoEvidence(run.stop_reason)


def searxng_template(base: str) -> str:
    """A SearXNG instance's JSON search for `--searxng URL` (its base URL or its /search)."""
    base = base.rstrip("/")
    if not base.endswith("/search"):
        base += "/search"
    return f"{base}?q={{query}}&format=json"


def goal(client: CoordinatorClient, args: argparse.Namespace) -> None:
    run = client.call(
        client.runs.StartGoal,
        runs_pb2.GoalRequest(
            text=args.text,
            desktop=args.desktop or "",
            model=args.model,
            max_steps=args.max_steps,
        ),
    )
    if not args.wait:
        _print_run(render.as_dict(run), args.json)
        return
    shown = ""
    while run.status in ACTIVE:
        line = f"goal {run.id}: {run.last_seq} journal events, {run.status}"
        if run.waiting.code:
            line += f" ({run.waiting.code}: {run.waiting.detail})"
        if line != shown and not args.json:
            print(line, file=sys.stderr, flush=True)
            shown = line
        run = client.call(
            client.runs.WaitRun, runs_pb2.WaitRunRequest(id=run.id, timeout_seconds=1), timeout=30
        )
    _print_run(render.as_dict(run), args.json)
    if run.status != RunState.SUCCEEDED:
        raise RunNotSucceeded(run.status)


# Every positional run id reads the same in usage lines and help.
RUN_ID: dict[str, str] = {"metavar": "RUN_ID", "help": "the run's id"}


def add_parsers(sub: Any, leaf: Any) -> None:
    p = leaf(sub, "goal", goal, "a goal for a model to reach with the fleet's tools")
    p.add_argument("text", metavar="GOAL", help="what to reach, in words")
    p.add_argument(
        "--desktop",
        metavar="WORKER_ID",
        help="a worker (id or name) whose desktop the computer tool may use",
    )
    p.add_argument(
        "--model",
        required=True,
        metavar="PROVIDER:MODEL",
        help="anthropic:MODEL, openai:MODEL, openai-chat:MODEL or scripted:NAME (a script"
        " the operator offers)",
    )
    p.add_argument(
        "--max-steps", type=int, default=0, metavar="N", help="model calls at most (default 50)"
    )
    p.add_argument(
        "--wait", action="store_true", help="follow it until it stops (exit 6 unless it succeeded)"
    )
    p = leaf(sub, "research", research, "search, fetch sources on workers, report evidence")
    p.add_argument("query", metavar="QUERY", help="the question to research")
    p.add_argument(
        "--url", action="append", metavar="URL", help="fetch this source (repeatable; no search)"
    )
    search = p.add_mutually_exclusive_group()
    search.add_argument(
        "--search-url",
        metavar="TEMPLATE",
        help="a search results page, URL template with {query}; its result links are found"
        " by --result-selector/--link-selector, or else by the generic extractor"
        " (default: the coordinator's search)",
    )
    search.add_argument(
        "--searxng", metavar="URL", help="a SearXNG instance (its JSON API, format=json)"
    )
    search.add_argument(
        "--search-profile", metavar="NAME", help="a named search profile (duckduckgo-html)"
    )
    p.add_argument("--result-selector", metavar="CSS", help="each result on the results page")
    p.add_argument("--link-selector", metavar="CSS", help="a result's link, inside it")
    p.add_argument("--snippet-selector", metavar="CSS", help="a result's snippet, inside it")
    p.add_argument(
        "--max-sources",
        type=int,
        default=5,
        metavar="N",
        help="sources to fetch from the search results at most (default 5)",
    )
    p.add_argument(
        "--thorough",
        action="store_true",
        help="run the policy's app routes beside the browsers and merge the reports,"
        " listing where they disagree",
    )
    p.add_argument(
        "--max-pages",
        type=int,
        default=0,
        metavar="N",
        help="pages the browsers may fetch (default 50)",
    )
    p.add_argument(
        "--max-bytes",
        type=int,
        default=0,
        metavar="BYTES",
        help="bytes the browsers may read (default 64 MiB)",
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="show progress, then the evidence report (exit 6 unless it succeeded, 8 when it"
        " found no evidence)",
    )
    p.add_argument(
        "--format",
        choices=("text", "json", "md"),
        default="text",
        help="the report with --wait: text (default), json (as --json), md (Markdown)",
    )

    runs = sub.add_parser("runs", help="durable runs").add_subparsers(
        dest="sub", required=True, metavar="ACTION"
    )
    evidence_commands.add_parsers(sub, runs, leaf)  # runs export, and verify
    p = leaf(runs, "submit", submit, "submit a plan of actions")
    p.add_argument("plan", metavar="PLAN.json", help="the plan: a JSON file of actions")
    p.add_argument(
        "--wait", action="store_true", help="wait until the run stops (exit 6 unless it succeeded)"
    )
    p = leaf(runs, "list", list_runs, "your runs, newest first")
    p.add_argument(
        "--status",
        # The one vocabulary (shared/states.py) that `top` counts runs by; any case.
        type=str.upper,
        choices=[str(s) for s in RUN_STATES],
        metavar="STATE",
        help=f"only runs in this state: {', '.join(RUN_STATES)}",
    )
    p.add_argument("--kind", choices=RUN_KINDS, help="only runs of this kind")
    p.add_argument(
        "--parent", metavar="RUN_ID", help="only the children of this run (a goal's runs)"
    )
    p.add_argument(
        "--owner",
        metavar="USER",
        help="admins: another user's runs (name or id), or '*' for every owner's",
    )
    p.add_argument(
        "--limit", type=int, default=50, metavar="N", help="at most this many (default 50)"
    )
    p = leaf(
        runs,
        "show",
        show,
        "a run: state, stop or waiting reason, actions, receipts, and its timeline",
    )
    p.add_argument("id", **RUN_ID)
    p.add_argument(
        "--artifacts-dir",
        metavar="DIR",
        help="save the run's screenshots here and list their paths",
    )
    p = leaf(runs, "watch", watch, "stream a run's journal; resume with --after-seq")
    p.add_argument("id", **RUN_ID)
    p.add_argument(
        "--after-seq",
        type=int,
        default=0,
        metavar="SEQ",
        help="print only events after this sequence number (default 0: all)",
    )
    p.add_argument("--no-follow", action="store_true", help="print history only")
    p.add_argument(
        "--reconnect-for",
        type=float,
        default=RECONNECT_FOR,
        metavar="SECONDS",
        help="when the coordinator goes away, try again this long, then exit 5 naming the"
        " command that resumes (default %(default)g; 0: give up at once)",
    )
    for name, rpc, text in (
        ("cancel", "CancelRun", "stop a run now"),
        ("retry", "RetryRun", "continue a stopped run from its checkpoint"),
        ("abandon", "AbandonRun", "end a stopped run, keeping its results"),
        # As the source documents name the answers to a spent estimate.
        ("continue", "RetryRun", "keep working (retry): the same as runs retry"),
        ("stop", "AbandonRun", "stop here (abandon): the same as runs abandon"),
    ):
        leaf(runs, name, control(rpc), text).add_argument("id", **RUN_ID)
    p = leaf(
        runs,
        "revise",
        revise,
        "once, after recovery is spent: replace what a plan run has not finished",
    )
    p.add_argument("id", **RUN_ID)
    p.add_argument(
        "plan",
        metavar="PLAN.json",
        help="the new unfinished part, in the plan file's shape (no limits: they carry over)",
    )
    p = leaf(runs, "guide", guide, "queue a message for the run's next safe boundary")
    p.add_argument("id", **RUN_ID)
    p.add_argument("text", metavar="TEXT", help="the message for the run")
    p.add_argument(
        "--message-id",
        default="",
        metavar="K",
        help="this message's id (A-Z a-z 0-9 _ . : -, at most 128): sending it again with the"
        " same id is the same message; by default one per invocation",
    )
    p.add_argument(
        "--expected-execution",
        type=int,
        default=0,
        metavar="N",
        help="refuse the message if the run is no longer at this execution (runs show says"
        " which it is at)",
    )

    journal = sub.add_parser("journal", help="a run's journal").add_subparsers(
        dest="sub", required=True, metavar="ACTION"
    )
    p = leaf(journal, "read", journal_read, "a page of one event's original text")
    p.add_argument("run_id", **RUN_ID)
    p.add_argument(
        "--seq", type=int, required=True, metavar="SEQ", help="the event's sequence number"
    )
    p.add_argument(
        "--offset", type=int, default=0, metavar="N", help="start at this character (default 0)"
    )
    p.add_argument(
        "--limit", type=int, default=0, metavar="N", help="characters at most (default 16384)"
    )
    p = leaf(journal, "search", journal_search, "search a run's journal")
    p.add_argument("run_id", **RUN_ID)
    p.add_argument("text", metavar="TEXT", help="the words to find")
    p.add_argument(
        "--cursor", metavar="CURSOR", help="the next page: the cursor the previous page printed"
    )
    p.add_argument("--limit", type=int, default=10, metavar="N", help="hits at most (default 10)")
    leaf(
        journal, "verify", journal_verify, "check the hash chain and every receipt's content hash"
    ).add_argument("run_id", **RUN_ID)
