"""`deskfleet mcp`: the fleet as MCP tools on stdio, for any agent application.

Every tool is a call to the coordinator's RPCs under the caller's own credential, so what an
agent does through it is authorized, limited and journaled exactly like the CLI's commands.
Coordinator errors come back as tool errors (`isError`) carrying their one-line reason.

Each argument is checked as the RPC field it feeds is (the field's integer width, finite
numbers, positive where the RPC needs it) before a request is built, so a value the RPC cannot
carry is a one-sentence tool error, never a failure inside the server. The bounds are in the
tools' schemas for the agent to read; the checks here give the error.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from typing import Annotated, Any

from anyio import from_thread, to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.types import CallToolResult, ContentBlock, ImageContent, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from coordinator.admin_cli import render
from coordinator.admin_cli.client import CoordinatorClient
from coordinator.admin_cli.mcp_results import (
    ApprovalAnswer,
    DesktopActResult,
    DesktopRequestResult,
    DiscussionResult,
    FleetStatusResult,
    GuideResult,
    JournalEntryResult,
    JournalSearchResult,
    NoteResult,
    QuestionResult,
    QuestionsResult,
    RunResult,
    RunSummary,
)
from coordinator.admin_cli.mcp_wire import serve_stdio
from coordinator.admin_cli.runs_commands import _report, plan_request, searxng_template
from deskfleet import Run
from deskfleet.sync import RunHandle
from shared import __version__, desktop_scope
from shared.errors import DeskfleetError, InvalidArgumentError, NotFoundError
from shared.gen.deskfleet.v1 import desktop_pb2, runs_pb2
from shared.states import ACTIVE, RunState


class SearchOptions(BaseModel):
    """Where research searches: a SearXNG instance, or an HTML results page (with selectors,
    or read by the generic extractor)."""

    model_config = ConfigDict(extra="forbid")
    searxng: str = Field(default="", description="a SearXNG instance's URL (its JSON API)")
    search_url: str = Field(default="", description="a results page URL template with {query}")
    result_selector: str = Field(default="", description="CSS: each result (with link_selector)")
    link_selector: str = Field(default="", description="CSS inside a result: its link")
    snippet_selector: str = Field(default="", description="CSS inside a result: its snippet")


DesktopAction = desktop_scope.Action
RunId = Annotated[str, Field(description="a run id, as returned by research or desktop_request")]
INSTRUCTIONS = (
    "Tools of a deskfleet coordinator: research on headless browsers, and control of a real "
    "desktop under a person's approval and a kill switch. Every call is journaled under your "
    "credential; recall a run's journal with journal_search and journal_read."
)

# The parts of a run's timeline an agent gets from run_status.
MCP_TIMELINE = ("states", "retries", "stopReason", "wallSeconds")
INT32_MAX = 2**31 - 1  # the width of the RPC fields the integer arguments feed
# Coordinates and distances travel in a desktop action's JSON arguments: the coordinator
# bounds them by the screen; this only keeps them numbers a JSON reader on the way can hold.
COORDINATE_MAX = 2**53
SECONDS_MAX = 1e9


def whole(name: str, value: int, low: int, high: int = INT32_MAX) -> int:
    """`value` if it is a whole number in [low, high]; else a one-sentence InvalidArgumentError."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        shown = str(value) if len(str(value)) <= 24 else f"{str(value)[:20]}..."
        raise InvalidArgumentError(f"{name}: a whole number from {low} to {high}, not {shown}")
    return value


def seconds(name: str, value: float, high: float = SECONDS_MAX) -> float:
    """`value` if it is a finite number of seconds above 0 and at most `high`."""
    # NaN passes no comparison: it is refused by isfinite, before any comparison.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentError(f"{name}: a number of seconds")
    if not math.isfinite(value) or not 0 < value <= high:
        raise InvalidArgumentError(f"{name}: a number of seconds above 0 and at most {high:g}")
    return float(value)


def _bounds(description: str, low: float, high: float | None = None) -> Any:
    """A schema that states the bounds the tool checks (see the module docstring)."""
    extra: dict[str, Any] = {"minimum": low}
    if high is not None:
        extra["maximum"] = high
    return Field(description=description, json_schema_extra=extra)


def _text(doc: Any) -> TextContent:
    return TextContent(type="text", text=doc if isinstance(doc, str) else json.dumps(doc))


def _result(doc: Any) -> CallToolResult:
    """`doc` as text (for agents that read text) and as structured content (for the rest)."""
    return CallToolResult(content=[_text(doc)], structured_content=doc)


def _error(text: str) -> CallToolResult:
    return CallToolResult(content=[_text(text)], is_error=True)


# A tool that follows a run asks WaitRun this often, so an agent hears how it moves.
PROGRESS_EVERY = 5
Progress = Callable[[Run], None]


def _no_progress(run: Run) -> None:
    return None


class FleetTools:
    """The tools' bodies: blocking coordinator calls, run on worker threads by `build_server`."""

    def __init__(self, client: CoordinatorClient) -> None:
        self.client = client

    def fleet_status(self) -> CallToolResult:
        return _result(self.client.fleet_client.status().to_dict())

    def research(
        self,
        query: str,
        urls: list[str] | None,
        max_sources: int,
        wait: bool,
        progress: Progress = _no_progress,
        search: SearchOptions | None = None,
    ) -> CallToolResult:
        max_sources = whole("max_sources", max_sources, 0)
        options = search or SearchOptions()
        handle = self.client.fleet_client.start_research_request(
            runs_pb2.ResearchRequest(
                query=query,
                urls=urls or [],
                max_sources=max_sources,
                search_url=(
                    searxng_template(options.searxng) if options.searxng else options.search_url
                ),
                search_format="searxng" if options.searxng else "",
                result_selector=options.result_selector,
                link_selector=options.link_selector,
                snippet_selector=options.snippet_selector,
            )
        )
        run = self._follow(handle, wait, progress)
        # The same report as `deskfleet research --format json`, as text and as structure.
        return _result(self._run_summary(run, report=True))

    def submit_plan(self, plan: dict[str, Any], wait: bool, progress: Progress) -> CallToolResult:
        handle = self.client.fleet_client.submit_plan(plan)
        return _result(self._run_summary(self._follow(handle, wait, progress), report=False))

    def cancel_run(self, run_id: str) -> CallToolResult:
        run = self.client.fleet_client.run(run_id).cancel()
        return _result(self._run_summary(run, report=False))

    def guide_run(
        self, run_id: str, text: str, message_id: str, expected_execution: int
    ) -> CallToolResult:
        # No id given: one is made for this call, so a send repeated after a lost answer is
        # still the same message.
        reply = self.client.fleet_client.run(run_id).guide(
            text,
            message_id or None,
            expected_execution=whole("expected_execution", expected_execution, 0),
        )
        return _result(
            {
                "guidanceId": reply.guidance_id,
                "messageId": reply.message_id,
                "seq": reply.seq,
                "queued": reply.queued,
                "execution": reply.execution,
                "repeatedSend": reply.repeated_send,
            }
        )

    def guide_approval(self, approval_id: str, text: str) -> CallToolResult:
        c = self.client
        row = c.call_repeatable(
            c.approvals.GuideApproval, desktop_pb2.GuideApprovalRequest(id=approval_id, text=text)
        )
        return _result(
            {"id": row.id, "runId": row.run_id, "status": row.status, "answer": row.answer}
        )

    def discuss_approval(self, approval_id: str, text: str) -> CallToolResult:
        c = self.client
        found = c.call(
            c.approvals.DiscussApproval,
            desktop_pb2.DiscussApprovalRequest(id=approval_id, text=text),
        )
        return _result(render.as_dict(found))

    def advise_approval(self, approval_id: str, model: str) -> CallToolResult:
        c = self.client
        note = c.call(
            c.approvals.AdviseApproval,
            desktop_pb2.AdviseApprovalRequest(id=approval_id, model=model),
            timeout=150,
        )
        return _result(render.as_dict(note))

    def revise_run(self, run_id: str, plan: dict[str, Any]) -> CallToolResult:
        c = self.client
        request = plan_request(plan)
        if request.limits.ByteSize():
            raise InvalidArgumentError("plan.limits: limits carry over from the run; set none")
        run = c.call(
            c.runs.ReviseRun, runs_pb2.ReviseRunRequest(id=run_id, actions=request.actions)
        )
        return _result(self._run_summary(run, report=False))

    def list_questions(self, run_id: str, include_closed: bool) -> CallToolResult:
        c = self.client
        reply = c.call(
            c.runs.ListQuestions,
            runs_pb2.ListQuestionsRequest(run_id=run_id, include_closed=include_closed),
        )
        return _result({"questions": render.as_dict(reply).get("questions", [])})

    def answer_question(self, question_id: str, text: str) -> CallToolResult:
        c = self.client
        question = c.call_repeatable(
            c.runs.AnswerQuestion, runs_pb2.AnswerQuestionRequest(id=question_id, text=text)
        )
        doc = render.as_dict(question)
        return _result(
            {
                "id": question.id,
                "runId": question.run_id,
                "status": question.status,
                **({"answer": doc["answer"]} if doc.get("answer") else {}),
                **({"guidanceId": question.guidance_id} if question.guidance_id else {}),
            }
        )

    def _follow(self, handle: RunHandle, wait: bool, progress: Progress) -> Run:
        """With `wait`, follow the run until it stops, telling `progress` where it is."""
        run = handle.started
        assert run is not None
        progress(run)
        # A run waiting for a person's approval may wait for hours: hand that back instead.
        while wait and run.active and run.status != RunState.WAITING_FOR_AUTHORITY:
            run = handle.wait(PROGRESS_EVERY)
            progress(run)
        return run

    def _run_summary(self, run: Run, *, report: bool) -> dict[str, Any]:
        doc: dict[str, Any] = {"runId": run.id, "status": run.status}
        if run.stop_reason:
            doc["stopReason"] = run.stop_reason
        waiting = run.to_dict().get("waiting") or {}
        if waiting.get("code"):
            doc["waiting"] = {"code": waiting["code"], "detail": waiting.get("detail", "")}
        if report and not run.active:
            doc["report"] = self.client.fleet_client.research_report(run).to_dict() or None
        return doc

    def desktop_request(
        self,
        worker: str,
        actions: list[str],
        ttl_seconds: float | None,
        max_actions: int | None,
        reason: str | None,
    ) -> CallToolResult:
        c = self.client
        if ttl_seconds is not None:
            ttl_seconds = seconds("ttl_seconds", ttl_seconds)
        if max_actions is not None:
            max_actions = whole("max_actions", max_actions, 1)
        session = c.fleet_client.request_desktop(
            worker,  # an id or a worker's unique name
            actions=actions,
            ttl=ttl_seconds or desktop_scope.DEFAULT_TTL,
            max_actions=max_actions,
            reason=reason or "",
        )
        run = session.run
        pending = c.call(
            c.approvals.ListApprovals,
            desktop_pb2.ListApprovalsRequest(status="pending", limit=1000),
        )
        approval = next((a for a in pending.approvals if a.run_id == run.id), None)
        doc = {
            "runId": run.id,
            "status": run.status,
            "waiting": run.to_dict().get("waiting", {}),
            "approval": render.as_dict(approval) if approval is not None else None,
        }
        return _result(doc)

    def desktop_act(self, run_id: str, action: str, args: dict[str, Any]) -> CallToolResult:
        c = self.client
        reply = c.call(
            c.desktop.Act,
            desktop_pb2.DesktopActRequest(
                run_id=run_id, action=action, args_json=json.dumps(args), timeout_seconds=60
            ),
            timeout=75,
        )
        doc = render.as_dict(reply)
        result_json = doc.pop("resultJson", "")
        doc["result"] = json.loads(result_json) if result_json else None
        if reply.status != "succeeded":
            why = reply.code or reply.status
            return _error(f"{why}: {reply.error or reply.status}\n{json.dumps(doc)}")
        content: list[ContentBlock] = [_text(doc)]
        for art in reply.artifacts:
            if not art.media_type.startswith("image/"):
                continue
            data = c.call(
                c.desktop.GetArtifact,
                desktop_pb2.GetArtifactRequest(run_id=run_id, sha256=art.sha256),
                timeout=60,
            ).data
            content.append(
                ImageContent(
                    type="image",
                    data=base64.b64encode(data).decode("ascii"),
                    mime_type=art.media_type,
                )
            )
        return CallToolResult(content=content, structured_content=doc)

    def journal_search(self, run_id: str, text: str, cursor: str | None) -> CallToolResult:
        c = self.client
        page = c.call(
            c.journal.SearchJournal,
            runs_pb2.SearchJournalRequest(run_id=run_id, text=text, cursor=cursor or ""),
        )
        return _result(render.as_dict(page))

    def journal_read(self, run_id: str, seq: int, offset: int) -> CallToolResult:
        c = self.client
        seq, offset = whole("seq", seq, 1), whole("offset", offset, 0)
        page = c.call(
            c.journal.ReadEntry, runs_pb2.ReadEntryRequest(run_id=run_id, seq=seq, offset=offset)
        )
        return _result(render.as_dict(page))

    def run_doc(self, run_id: str) -> dict[str, Any]:
        c = self.client
        run = c.call(c.runs.GetRun, runs_pb2.RunRef(id=run_id))
        doc = render.as_dict(run)
        # An agent's context is scarce: keep where the run waited and why, not every attempt
        # again (the actions above already carry their receipts).
        timeline = doc.get("timeline")
        if isinstance(timeline, dict):
            doc["timeline"] = {k: timeline[k] for k in MCP_TIMELINE if k in timeline}
        if run.title.startswith("research: ") and run.status not in ACTIVE:
            doc["report"] = _report(c, run.id)
        return doc

    def run_status(self, run_id: str) -> CallToolResult:
        return _result(self.run_doc(run_id))

    def journal_events(self, run_id: str) -> dict[str, Any]:
        """The run's journal so far, as `deskfleet runs watch --no-follow --json` prints it."""
        handle = self.client.fleet_client.run(run_id)
        events = [event.to_dict() for event in handle.watch(follow=False)]
        return {"runId": run_id, "events": events}


def _wait_checked(value: float) -> None:
    # `wait` takes 0 seconds too (a no-op): only the number itself is checked here.
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgumentError("seconds: a finite number")
    if not 0 <= value <= SECONDS_MAX:
        raise InvalidArgumentError(f"seconds: from 0 to {SECONDS_MAX:g}")


async def _off_loop(body: Callable[[], CallToolResult]) -> CallToolResult:
    """Run a blocking call on a worker thread; a coordinator error becomes a tool error."""
    try:
        return await to_thread.run_sync(body)
    except DeskfleetError as exc:
        return _error(exc.message)


def _progress(ctx: Context) -> Progress:
    """Progress notifications from a worker thread, one each time the run moves (its state or
    its journal); a no-op unless the caller asked for progress."""
    seen: list[tuple[str, int]] = []

    def report(run: Run) -> None:
        if seen and seen[-1] == (run.status, run.last_seq):
            return
        seen.append((run.status, run.last_seq))
        message = f"run {run.id}: {run.status}, {run.last_seq} journal events"
        from_thread.run(ctx.report_progress, len(seen), None, message)

    return report


def argument_errors(exc: ValidationError) -> str:
    """Pydantic's report on a tool's arguments as one sentence that names each argument."""
    parts = []
    for err in exc.errors():
        name = ".".join(str(p) for p in err["loc"]) or "arguments"
        if err["type"] == "missing":
            parts.append(f"{name}: required")
            continue
        message = str(err["msg"]).replace("Input should be ", "should be ", 1)
        parts.append(f"{name}: {message.removeprefix('Value error, ')}")
    return "; ".join(dict.fromkeys(parts))


class FleetServer(MCPServer[Any]):
    """MCPServer whose refusal of a tool's arguments is one sentence naming the argument, and
    which refuses a request whose JSON gives a key twice (`mcp_wire`)."""

    async def run_stdio_async(self) -> None:
        await serve_stdio(self._lowlevel_server)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                return _error(argument_errors(exc.__cause__))
            raise


# What each kind of tool promises (hints for the agent application, see the MCP spec).
READS = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
STARTS = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True
)
ACTS = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True
)
# The same answer again is the same answer.
ANSWERS = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
# Not idempotent as such: only a repeat with the same message id is the same message.
GUIDES = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
STOPS = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)


def build_server(client: CoordinatorClient) -> MCPServer[Any]:
    """An MCP server whose tools call the coordinator through `client`."""
    tools = FleetTools(client)
    server = FleetServer(
        "deskfleet", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )

    @server.tool(annotations=READS)
    async def fleet_status() -> Annotated[CallToolResult, FleetStatusResult]:
        """The fleet: workers online by capability, and each worker's state."""
        return await _off_loop(tools.fleet_status)

    @server.tool(annotations=STARTS)
    async def research(
        query: Annotated[str, Field(description="what to find evidence for")],
        ctx: Context,
        urls: Annotated[
            list[str] | None, Field(description="fetch these sources instead of searching")
        ] = None,
        max_sources: Annotated[int, _bounds("sources to read (0 = 5)", 0, INT32_MAX)] = 0,
        wait: Annotated[bool, Field(description="wait for the evidence report")] = True,
        search: Annotated[
            SearchOptions | None,
            Field(description="where to search (default: the coordinator's search)"),
        ] = None,
    ) -> Annotated[CallToolResult, RunSummary]:
        """Research on headless browsers: sources with their passages that answer the query best
        (text, section heading, score, a link that opens the page at it), by receipt. While it
        waits it reports the run's progress."""
        report = _progress(ctx)
        return await _off_loop(
            lambda: tools.research(query, urls, max_sources, wait, report, search)
        )

    @server.tool(annotations=ACTS)
    async def submit_plan(
        plan: Annotated[
            dict[str, Any],
            Field(
                description='a plan, as for `deskfleet runs submit`: {"title": ..., "actions": '
                '[{"kind": ..., "args": {...}, "idempotent": ..., "route": {...}}], "limits": '
                '{"max_actions": ..., "max_seconds": ...}}'
            ),
        ],
        ctx: Context,
        wait: Annotated[bool, Field(description="wait for the run to stop")] = True,
    ) -> Annotated[CallToolResult, RunSummary]:
        """Submit a plan of actions as a run; while it waits it reports the run's progress."""
        report = _progress(ctx)
        return await _off_loop(lambda: tools.submit_plan(plan, wait, report))

    @server.tool(annotations=STOPS)
    async def cancel_run(run_id: RunId) -> Annotated[CallToolResult, RunSummary]:
        """Cancel a run: nothing more of it is dispatched (a stopped run stays as it is)."""
        return await _off_loop(lambda: tools.cancel_run(run_id))

    @server.tool(annotations=GUIDES)
    async def guide_run(
        run_id: RunId,
        text: Annotated[str, Field(description="the message, delivered at the next safe boundary")],
        message_id: Annotated[
            str,
            Field(
                description="your id for this message (A-Z a-z 0-9 _ . : -, at most 128): a call"
                " repeated with it is the same message, never a second one",
            ),
        ] = "",
        expected_execution: Annotated[
            int,
            _bounds("refuse it if the run has moved past this execution (0 = any)", 0, INT32_MAX),
        ] = 0,
    ) -> Annotated[CallToolResult, GuideResult]:
        """Guide a run: a correction that grants nothing, read at its next safe boundary (a
        goal's next model call, a plan's next action). run_status says where it stands."""
        return await _off_loop(
            lambda: tools.guide_run(run_id, text, message_id, expected_execution)
        )

    @server.tool(annotations=ANSWERS)
    async def guide_approval(
        approval_id: Annotated[str, Field(description="a pending approval's id")],
        text: Annotated[str, Field(description="the correction, e.g. use the left window")],
    ) -> Annotated[CallToolResult, ApprovalAnswer]:
        """Admins: answer a pending desktop request with guidance instead of approving it. It
        grants nothing; the run reads it and asks anew. The same guidance again is that
        answer."""
        return await _off_loop(lambda: tools.guide_approval(approval_id, text))

    @server.tool(annotations=GUIDES)
    async def discuss_approval(
        approval_id: Annotated[str, Field(description="the approval's id")],
        text: Annotated[
            str, Field(description="a message to add (empty: read the discussion)")
        ] = "",
    ) -> Annotated[CallToolResult, DiscussionResult]:
        """An approval's discussion: the request, its goal's request, people's messages, advice
        and the decision. A message added answers nothing."""
        return await _off_loop(lambda: tools.discuss_approval(approval_id, text))

    @server.tool(annotations=GUIDES)
    async def advise_approval(
        approval_id: Annotated[str, Field(description="the approval's id")],
        model: Annotated[
            str, Field(description="PROVIDER:MODEL (empty: the goal's own or the default)")
        ] = "",
    ) -> Annotated[CallToolResult, NoteResult]:
        """Admins: a model's read-only advice on a request (no tools, at most 2 minutes),
        labelled advice; it approves nothing."""
        return await _off_loop(lambda: tools.advise_approval(approval_id, model))

    @server.tool(annotations=ACTS)
    async def revise_run(
        run_id: RunId,
        plan: Annotated[
            dict[str, Any],
            Field(
                description='the new unfinished part, as for submit_plan: {"actions": [...]}'
                " (no limits: they carry over)"
            ),
        ],
    ) -> Annotated[CallToolResult, RunSummary]:
        """Once, for a plan run stopped for a person (FAILED or HAND_BACK_TO_HUMAN): replace
        what it has not finished with these actions; what succeeded stays, with its receipts."""
        return await _off_loop(lambda: tools.revise_run(run_id, plan))

    @server.tool(annotations=READS)
    async def list_questions(
        run_id: Annotated[str, Field(description="one run's questions (empty: all yours)")] = "",
        include_closed: Annotated[bool, Field(description="answered and expired ones too")] = False,
    ) -> Annotated[CallToolResult, QuestionsResult]:
        """Questions goals asked a person (their ask_human calls), newest first; open ones by
        default. A required one holds its goal until it is answered."""
        return await _off_loop(lambda: tools.list_questions(run_id, include_closed))

    @server.tool(annotations=ANSWERS)
    async def answer_question(
        question_id: Annotated[str, Field(description="the question's id (list_questions)")],
        text: Annotated[str, Field(description="the answer")],
    ) -> Annotated[CallToolResult, QuestionResult]:
        """Answer a goal's question. The same answer again changes nothing; an optional one
        that expired while its goal went on takes the answer into its next model call."""
        return await _off_loop(lambda: tools.answer_question(question_id, text))

    @server.tool(annotations=STARTS)
    async def desktop_request(
        worker: Annotated[str, Field(description="the desktop worker: its id or its unique name")],
        actions: Annotated[list[DesktopAction], Field(description="the actions to ask for")],
        ttl_seconds: Annotated[
            float | None, _bounds("how long, once approved (default 600)", 0, SECONDS_MAX)
        ] = None,
        max_actions: Annotated[
            int | None, _bounds("actions allowed (default 100)", 1, INT32_MAX)
        ] = None,
        reason: Annotated[str | None, Field(description="why, shown to the approver")] = None,
    ) -> Annotated[CallToolResult, DesktopRequestResult]:
        """Ask for control of a desktop: opens a run that waits for a person's approval."""
        return await _off_loop(
            lambda: tools.desktop_request(worker, list(actions), ttl_seconds, max_actions, reason)
        )

    @server.tool(annotations=ACTS)
    async def desktop_act(
        run_id: RunId,
        action: DesktopAction,
        x: int | None = None,
        y: int | None = None,
        to_x: int | None = None,
        to_y: int | None = None,
        text: Annotated[
            str | None, Field(description="for type; {{secret:NAME}} types a stored secret")
        ] = None,
        key: Annotated[str | None, Field(description="for key: Return, ctrl+a, shift+Tab")] = None,
        dx: int | None = None,
        dy: int | None = None,
        seconds: Annotated[float | None, Field(description="for wait and hold_key")] = None,
        region: Annotated[
            list[int] | None,
            Field(description="for zoom: [x0, y0, x1, y1], the far corner exclusive"),
        ] = None,
        space_width: Annotated[
            int | None, _bounds("coordinates and screenshots in this space", 1, INT32_MAX)
        ] = None,
        space_height: Annotated[int | None, _bounds("see space_width", 1, INT32_MAX)] = None,
    ) -> Annotated[CallToolResult, DesktopActResult]:
        """One action in an approved desktop run; returns its receipt (and the screenshot)."""
        try:
            for name, number in (("x", x), ("y", y), ("to_x", to_x), ("to_y", to_y),
                                 ("dx", dx), ("dy", dy)):  # fmt: skip
                if number is not None:
                    whole(name, number, -COORDINATE_MAX, COORDINATE_MAX)
            if seconds is not None:
                _wait_checked(seconds)
            for number in region or ():
                whole("region", number, -COORDINATE_MAX, COORDINATE_MAX)
            for name, size in (("space_width", space_width), ("space_height", space_height)):
                if size is not None:
                    whole(name, size, 1)
        except InvalidArgumentError as exc:
            return _error(exc.message)
        args: dict[str, Any] = {
            name: value
            for name, value in (
                ("x", x),
                ("y", y),
                ("to_x", to_x),
                ("to_y", to_y),
                ("text", text),
                ("key", key),
                ("dx", dx),
                ("dy", dy),
                ("seconds", seconds),
                ("region", region),
            )
            if value is not None
        }
        if space_width and space_height:
            args["space"] = {"width": space_width, "height": space_height}
        return await _off_loop(lambda: tools.desktop_act(run_id, action, args))

    @server.tool(annotations=READS)
    async def journal_search(
        run_id: RunId,
        text: Annotated[str, Field(description="text to find in the run's journal")],
        cursor: Annotated[str | None, Field(description="continue from a previous page")] = None,
    ) -> Annotated[CallToolResult, JournalSearchResult]:
        """Search a run's journal; an empty page with hasMore is not an absence."""
        return await _off_loop(lambda: tools.journal_search(run_id, text, cursor))

    @server.tool(annotations=READS)
    async def journal_read(
        run_id: RunId,
        seq: Annotated[int, _bounds("the journal entry's sequence number", 1, INT32_MAX)],
        offset: Annotated[int, _bounds("character offset into it", 0, INT32_MAX)] = 0,
    ) -> Annotated[CallToolResult, JournalEntryResult]:
        """A page of one journal entry's original text (exact; nextOffset -1 at the end)."""
        return await _off_loop(lambda: tools.journal_read(run_id, seq, offset))

    @server.tool(annotations=READS)
    async def run_status(run_id: RunId) -> Annotated[CallToolResult, RunResult]:
        """A run: state, stop or waiting reason, actions and receipts (a research report too)."""
        return await _off_loop(lambda: tools.run_status(run_id))

    @server.resource(
        "deskfleet://runs/{run_id}",
        name="run",
        description="a run: state, stop or waiting reason, actions and receipts",
        mime_type="application/json",
    )
    async def run_resource(run_id: str) -> str:
        return json.dumps(await _resource(lambda: tools.run_doc(run_id)))

    @server.resource(
        "deskfleet://runs/{run_id}/journal",
        name="run journal",
        description="a run's journal events so far, in order, with their hash chain",
        mime_type="application/json",
    )
    async def journal_resource(run_id: str) -> str:
        return json.dumps(await _resource(lambda: tools.journal_events(run_id)))

    return server


async def _resource(body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Read a resource on a worker thread; a coordinator error is the read's one-line error."""
    try:
        return await to_thread.run_sync(body)
    except NotFoundError as exc:  # the run does not exist for this credential
        raise ResourceNotFoundError(exc.message) from exc
    except DeskfleetError as exc:
        raise ResourceError(exc.message) from exc


def serve(client: CoordinatorClient) -> None:
    """Serve the tools on stdin/stdout until the agent application closes them."""
    build_server(client).run("stdio")
