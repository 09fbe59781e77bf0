"""The fleet's tools as a goal's model sees them, executed through the coordinator's own domain.

Nothing here reaches past the rules people are held to: the computer tool acts only through a
desktop run that a person approved, under the kill switch; research and fetch are ordinary
runs of the goal's owner; recall reads only the owner's journals.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from coordinator.agent import rebuild
from coordinator.agent.conversation import (
    ComputerSpec,
    Content,
    ImagePart,
    TextPart,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from coordinator.heart import ledger
from coordinator.model.identity import Principal
from coordinator.runs.desktop.runs import ActResult, Desktop
from coordinator.runs.desktop.scope import Scope
from coordinator.runs.plan import Plan, PlannedAction
from coordinator.runs.recall import Recall
from coordinator.runs.research.routing import RoutingPolicy
from coordinator.runs.research.runs import ResearchRequest, research_plan
from coordinator.runs.service import Runs, RunView
from coordinator.store import Database, journal, runs as run_queries
from shared import desktop_scope
from shared.errors import DeskfleetError, FailedPreconditionError
from shared.states import ACTIVE, FINISHED, RunState

MAX_TEXT = 20_000  # characters of a page or report handed back; the rest stays in the journal
RUN_TIMEOUT = 300.0
COMPUTER_ACTIONS = desktop_scope.ACTIONS
# The neutral computer arguments (providers/computer.py); the worker checks each action's own.
COMPUTER_FIELDS = (
    "action", "x", "y", "to_x", "to_y", "text", "key", "dx", "dy", "seconds", "region",
)  # fmt: skip
DEFAULT_SPACE = ComputerSpec(1280, 800)


def specs(desktop: bool, space: ComputerSpec = DEFAULT_SPACE) -> tuple[ToolSpec, ...]:
    tools = [
        ToolSpec(
            "research",
            "Research a question on the fleet's browsers: search (or fetch the given URLs) and"
            " return an evidence report with excerpts, URLs and receipt ids.",
            {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "urls": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["query"],
            },
        ),
        ToolSpec(
            "fetch",
            "Fetch one URL and return its readable text (UTF-8 text only; binary content is"
            " reported as unsupported_content).",
            {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
        ),
        ToolSpec(
            "recall",
            "Search this goal's journal for text, or read one entry exactly (archived tool"
            " results are there in full).",
            {
                "type": "object",
                "properties": {
                    "text": {"type": "string"},
                    "seq": {"type": "integer"},
                    "offset": {"type": "integer"},
                    "cursor": {"type": "string"},
                },
            },
        ),
        ToolSpec(
            "ask_human",
            "Ask the person who set the goal. Optional questions: work goes on after 60 s and"
            " a late answer arrives later. required=true waits for the answer.",
            {
                "type": "object",
                "properties": {"question": {"type": "string"}, "required": {"type": "boolean"}},
                "required": ["question"],
            },
        ),
    ]
    if desktop:
        tools.insert(
            0,
            ToolSpec(
                "computer",
                "Use the desktop: screenshot, mouse and keyboard, under a person's approval.",
                {
                    "type": "object",
                    "properties": {
                        "action": {"type": "string", "enum": list(COMPUTER_ACTIONS)},
                        "x": {"type": "integer"},
                        "y": {"type": "integer"},
                        "to_x": {"type": "integer"},
                        "to_y": {"type": "integer"},
                        "text": {"type": "string"},
                        "key": {"type": "string"},
                        "dx": {"type": "integer"},
                        "dy": {"type": "integer"},
                        "seconds": {"type": "number"},
                        "region": {"type": "array", "items": {"type": "integer"}},
                    },
                    "required": ["action"],
                },
                computer=space,
            ),
        )
    return tuple(tools)


def _text(value: Any, limit: int = MAX_TEXT) -> TextPart:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=1)
    if len(text) > limit:
        text = text[:limit] + f"\n[... {len(text) - limit} more characters in the journal]"
    return TextPart(text)


def _error(message: str) -> tuple[tuple[Content, ...], bool]:
    return (TextPart(message),), True


@dataclass
class GoalState:
    """What the tools remember between calls (also kept in the run's spec)."""

    run_id: str
    owner: Principal
    desktop_worker: str
    desktop_run: str = ""
    space: ComputerSpec = DEFAULT_SPACE


# Waits for a person or a child run: (code, detail, done?) -> polls until done() says so. The
# goal is DELEGATED meanwhile when it waits on a child, WAITING_FOR_AUTHORITY otherwise.
Waiter = Callable[[str, str, Callable[[], Awaitable[bool]]], Awaitable[None]]
DELEGATED = "delegated"  # the waiting code of a goal waiting on a child run
# A call waiting for its desktop run's approval (DELEGATED too): it has not run, so a person's
# guidance ends the wait (`GuidedInstead`) and the model reads it before anything runs.
APPROVAL = "approval"


class GuidedInstead(Exception):
    """Guidance came while a call waited for an approval: the call did not run."""


# Refusals a person answers by approving the desktop run again: the call waits, then runs.
ASK_AGAIN = (ledger.NEEDS_APPROVAL, desktop_scope.REAPPROVAL_NEEDED)
ASK_AGAIN_LIMIT = 3


def intent(call: ToolCall) -> dict[str, Any]:
    """What a call asks for in the fleet's own words (a desktop action kind, a run kind), not
    a provider's tool name: journaled with the model's turn before anything runs, so that any
    toolset's calls read back alike."""
    if call.name == "computer":
        args = {k: v for k, v in call.arguments.items() if k != "action"}
        return {
            "call": call.id,
            "does": f"desktop.{call.arguments.get('action', '')}",
            "args": args,
        }
    return {"call": call.id, "does": call.name, "args": dict(call.arguments)}


def origin(state: GoalState, call: ToolCall) -> str:
    """What a call's desktop action records as its origin (`ActionRow.origin`)."""
    return f"{state.run_id}/{call.id}"


class FleetTools:
    def __init__(
        self,
        db: Database,
        runs: Runs,
        desktop: Desktop,
        recall: Recall,
        routing: RoutingPolicy,
    ) -> None:
        self._db = db
        self._runs = runs
        self._desktop = desktop
        self._recall = recall
        self._routing = routing

    async def call(self, state: GoalState, call: ToolCall, wait_for: Waiter) -> ToolResult:
        """Run one tool call; any refusal or failure becomes an error result for the model."""
        try:
            handler = {
                "computer": self._computer,
                "research": self._research,
                "fetch": self._fetch,
                "recall": self._recall_tool,
            }.get(call.name)
            if handler is None:
                content, is_error = _error(f"unknown tool {call.name!r}")
            else:
                content, is_error = await handler(state, call, wait_for)
        except DeskfleetError as exc:
            content, is_error = _error(f"{call.name} failed: {exc.message}")
        return ToolResult(call.id, content, is_error)

    async def became(
        self, state: GoalState, call: ToolCall, child_run: str = ""
    ) -> rebuild.Child | None:
        """What a call became, as the ledger has it now (None: nothing yet), with its result
        for the model once it has finished. `child_run` is the run the call started (its
        `run.child` event in the goal's journal), for research and fetch."""
        if call.name == "computer":
            if not state.desktop_run:
                return None
            act = await self._desktop.by_origin(state.owner, state.desktop_run, origin(state, call))
            if act is None:
                return None
            receipt = act.receipt or {}
            if receipt.get("status") == "refused" and receipt.get("code") in ASK_AGAIN:
                return rebuild.Child("action", act.action.id, act.action.status, never_ran=True)
            finished = act.action.status in FINISHED and act.receipt is not None
            return rebuild.Child(
                "action",
                act.action.id,
                act.action.status,
                act.action.idempotent,
                ToolResult(call.id, *await self._act_content(state, act)) if finished else None,
            )
        if call.name in ("research", "fetch") and child_run:
            view = await self._runs.get(state.owner, child_run)
            if view.run.status in ACTIVE:
                return rebuild.Child("run", child_run, view.run.status)
            read = self._research_result if call.name == "research" else self._fetch_result
            return rebuild.Child(
                "run",
                child_run,
                view.run.status,
                True,
                ToolResult(call.id, *await read(state, view)),
            )
        return None

    # ------------------------------------------------------------------------- computer

    async def _computer(
        self, state: GoalState, call: ToolCall, wait_for: Waiter
    ) -> tuple[tuple[Content, ...], bool]:
        args = call.arguments
        if not state.desktop_worker:
            return _error("this goal has no desktop (start it with --desktop WORKER)")
        action = str(args.get("action", ""))
        if action not in COMPUTER_ACTIONS:
            return _error(
                f"computer: unknown action {action!r} (known: {', '.join(COMPUTER_ACTIONS)})"
            )
        unknown = sorted(k for k, v in args.items() if k not in COMPUTER_FIELDS and v is not None)
        if unknown:
            # Refused, not dropped: a ctrl+click whose held keys were dropped would land as a
            # plain click, and the model would never learn it cannot hold them.
            return _error(
                f"computer: {action} takes no {unknown[0]!r}"
                f" (the fields are: {', '.join(COMPUTER_FIELDS)})"
            )
        if not state.desktop_run:
            asked = Scope(COMPUTER_ACTIONS, (0,), None, 1800.0, 500)
            view = await self._desktop.request(
                state.owner,
                state.desktop_worker,
                asked,
                f"goal {state.run_id}: desktop",
                f"the goal {state.run_id} needs the desktop",
                parent=state.run_id,
                origin=call.id,
            )
            state.desktop_run = view.run.id
        sent = {k: v for k, v in args.items() if k in COMPUTER_FIELDS and v is not None}
        sent.pop("action", None)
        if any(k in sent for k in ("x", "y", "to_x", "to_y", "region")):
            sent["space"] = {"width": state.space.width, "height": state.space.height}
        if action == "screenshot":
            sent["space"] = {"width": state.space.width, "height": state.space.height}
        for _ in range(ASK_AGAIN_LIMIT):
            try:
                await wait_for(
                    APPROVAL,
                    f"waits for its desktop run {state.desktop_run}, which waits for approval"
                    " (deskfleet approvals list)",
                    lambda: self._approved(state),
                )
            except GuidedInstead:
                return _error(
                    "not run: a person answered with guidance while this call waited for"
                    " approval (it follows); a request made again needs its own approval"
                )
            result = await self._desktop.act(
                state.owner,
                state.desktop_run,
                action,
                json.dumps(sent, ensure_ascii=True),
                120.0,
                origin=origin(state, call),
            )
            receipt = result.receipt or {}
            if receipt.get("status") != "refused" or receipt.get("code") not in ASK_AGAIN:
                break
            # Refused by the coordinator before dispatch (the worker reconnected since the
            # approval, say): it never ran, so once a person approves again it runs then.
        return await self._act_content(state, result)

    async def _act_content(
        self, state: GoalState, result: ActResult
    ) -> tuple[tuple[Content, ...], bool]:
        """An act's outcome as the model is given it: its receipt's status, error and result,
        and its screenshots."""
        receipt = result.receipt or {}
        status = str(receipt.get("status") or result.action.status.lower())
        content: list[Content] = []
        summary = {k: receipt.get(k) for k in ("status", "error") if receipt.get(k)}
        res = receipt.get("result")
        if isinstance(res, dict):
            summary["result"] = {k: v for k, v in res.items() if k not in ("timings",)}
        content.append(_text(summary))
        for _, artifact in result.artifacts:
            row = await self._desktop.artifact(state.owner, state.desktop_run, artifact.sha256)
            content.append(ImagePart(row.media_type, row.data))
        return tuple(content), status != "succeeded"

    async def _approved(self, state: GoalState) -> bool:
        view = await self._runs.get(state.owner, state.desktop_run)
        if view.run.status not in ACTIVE:
            raise _Stopped(
                f"the desktop run {state.desktop_run} is {view.run.status}: {view.run.stop_reason}"
            )
        return view.run.waiting_code not in (
            ledger.NEEDS_APPROVAL,
            desktop_scope.KILL_SWITCH,
            desktop_scope.REAPPROVAL_NEEDED,
        )

    # ------------------------------------------------------------------- research, fetch

    async def _research(
        self, state: GoalState, call: ToolCall, wait_for: Waiter
    ) -> tuple[tuple[Content, ...], bool]:
        args = call.arguments
        urls = tuple(str(u) for u in args.get("urls") or ())
        plan = research_plan(
            ResearchRequest(str(args.get("query", "")), urls, max_sources=5),
            self._routing.research_routes(state.owner.id, state.owner.name),
        )
        view = await self._runs.submit(state.owner, plan, parent=state.run_id, origin=call.id)
        done = await self._child(state, view.run.id, "research", wait_for)
        return await self._research_result(state, done)

    async def _child(self, state: GoalState, child: str, what: str, wait_for: Waiter) -> RunView:
        """Wait for a child run to stop (the goal is DELEGATED meanwhile), up to RUN_TIMEOUT."""
        stopped: list[RunView] = []
        deadline = time.monotonic() + RUN_TIMEOUT

        async def done() -> bool:
            view = await self._runs.wait(state.owner, child, 0.5)
            if view.run.status not in ACTIVE or time.monotonic() > deadline:
                stopped.append(view)
                return True
            return False

        await wait_for(DELEGATED, f"waits for its {what} run {child}", done)
        return stopped[-1]

    async def _research_result(
        self, state: GoalState, done: RunView
    ) -> tuple[tuple[Content, ...], bool]:
        report = await self._event(state, done.run.id, "research.report")
        if report is None:
            return _error(
                f"research run {done.run.id} is {done.run.status}:"
                f" {done.run.stop_reason or done.run.waiting_detail}"
            )
        return (
            _text({"run": done.run.id, "report": report}),
        ), done.run.status != RunState.SUCCEEDED

    async def _fetch(
        self, state: GoalState, call: ToolCall, wait_for: Waiter
    ) -> tuple[tuple[Content, ...], bool]:
        url = str(call.arguments.get("url", ""))
        plan = Plan(
            (PlannedAction("browser.fetch", {"url": url}, True, {"capability": "headless"}),),
            title=f"goal {state.run_id}: fetch",
        )
        view = await self._runs.submit(state.owner, plan, parent=state.run_id, origin=call.id)
        done = await self._child(state, view.run.id, "fetch", wait_for)
        return await self._fetch_result(state, done)

    async def _fetch_result(
        self, state: GoalState, done: RunView
    ) -> tuple[tuple[Content, ...], bool]:
        if done.run.status != RunState.SUCCEEDED or not done.actions:
            return _error(
                f"fetch run {done.run.id} is {done.run.status}:"
                f" {done.run.stop_reason or done.run.waiting_detail}"
            )
        receipt_id = done.actions[0].receipt_id

        def read(s: Any) -> Any:
            row = run_queries.receipt(s, receipt_id)
            return journal.read_receipt(row) if row is not None else None

        body = await self._db.read(read)
        result = (body or {}).get("result") or {}
        keep = ("outcome", "status", "final_url", "title", "content_type", "reason", "text")
        return (_text({k: result.get(k) for k in keep if k in result}),), result.get(
            "outcome"
        ) not in ("ok", None)

    async def _event(self, state: GoalState, run_id: str, kind: str) -> Any:
        async for event in self._runs.watch(state.owner, run_id, 0, follow=False):
            if event.kind == kind:
                return json.loads(event.data)
        return None

    # ------------------------------------------------------------------------- recall

    async def _recall_tool(
        self, state: GoalState, call: ToolCall, wait_for: Waiter
    ) -> tuple[tuple[Content, ...], bool]:
        args = call.arguments
        if args.get("seq") is not None:
            page = await self._recall.read(
                state.owner, state.run_id, int(args["seq"]), int(args.get("offset") or 0), 16384
            )
            return (
                _text(
                    {
                        "seq": page.seq,
                        "kind": page.kind,
                        "text": page.text,
                        "next_offset": page.next_offset,
                        "total_length": page.total_length,
                    }
                ),
            ), False
        text = str(args.get("text") or "")
        if not text:
            return _error("recall: give `text` to search for, or `seq` to read")
        found = await self._recall.search(
            state.owner, state.run_id, text, str(args.get("cursor") or ""), 10
        )
        return (
            _text(
                {
                    "matches": [
                        {"seq": m.seq, "kind": m.kind, "offset": m.offset, "excerpt": m.excerpt}
                        for m in found.matches
                    ],
                    "cursor": found.cursor,
                    "has_more": found.has_more,
                }
            ),
        ), False


class _Stopped(FailedPreconditionError):
    """What the tool waited for can no longer come (the desktop run ended)."""
