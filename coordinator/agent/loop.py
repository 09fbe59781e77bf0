"""Goal runs: the coordinator asks a model for the next step and runs it with the fleet's tools.

Every model call and tool call is journaled on the goal's run (`goal.model_call`,
`goal.tool_result`), so the run's history is the conversation. The loop runs as a task on the
replica that started it; a coordinator restart leaves the run HAND_BACK_TO_HUMAN, and `runs
retry` continues it from its journal (screenshots are not replayed: the model is told to take
a new one).

Failures (seed 000): a tool failure goes back to the model, which may correct itself; the
same call three times in a row, or five failing tool calls in a row, stop a stuck loop; a model
call past its time limit is retried once with the finished tool exchanges kept; when recovery
is exhausted the run hands back to a person, who may retry or abandon it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from coordinator.agent import providers
from coordinator.agent.context import SUMMARY_INSTRUCTION, ContextManager
from coordinator.agent.conversation import (
    Content,
    ImagePart,
    Message,
    Model,
    ModelConfigError,
    ModelError,
    ModelSpecError,
    ModelTimeout,
    ModelTurn,
    TextPart,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from coordinator.agent.tools import FleetTools, GoalState, specs
from coordinator.heart import ledger
from coordinator.heart.context import Context, RunKind
from coordinator.heart.dispatch import Dispatcher
from coordinator.model.identity import Principal, Role
from coordinator.model.orders import Order
from coordinator.runs.service import RunView, new_run, owned_run
from coordinator.store import Database, desktop as desktop_queries, quotas, runs as run_queries
from coordinator.store.models import PrincipalRow, RunRow
from shared.errors import FailedPreconditionError, InvalidArgumentError
from shared.ids import new_id
from shared.receipts import content_sha256, encode_result
from shared.states import ACTIVE, RunState
from shared.text import refuse_control

log = logging.getLogger(__name__)

KIND = "goal"
SYSTEM = (
    "You are an agent working through deskfleet, a fleet of real machines. Reach the goal"
    " with the tools given. Prefer research and fetch for reading the web; use the computer"
    " only for what needs a desktop. When the goal is reached, answer without a tool call."
)
MODEL_TIMEOUT = 120.0
MAX_STEPS = 200
REPEAT_LIMIT = 3
ERROR_LIMIT = 5
QUESTION_WAIT = 60.0
POLL = 0.25


def _no_own_advance(s: Session, run: RunRow, ctx: Context) -> list[Order]:
    return []  # the loop moves a goal run; the sweep must not "complete" it for lack of actions


# A goal run's kind (given to the dispatcher at wiring): only the loop moves it.
GOAL_RUNS = RunKind(advance=_no_own_advance)


@dataclass
class Goal:
    """One goal run's loop state on this replica."""

    state: GoalState
    model: Model
    model_spec: str
    text: str
    max_steps: int
    messages: list[Message] = field(default_factory=list)
    step: int = 0
    recent: list[str] = field(default_factory=list)
    errors: int = 0
    seen_guidance: set[str] = field(default_factory=set)


class _Stop(Exception):
    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class Goals:
    """Starts, runs and resumes goal loops."""

    def __init__(
        self,
        db: Database,
        dispatcher: Dispatcher,
        tools: FleetTools,
        open_model: Callable[[str], Model] = providers.open_model,
        *,
        context_budget: int = 20_000,
        model_timeout: float = MODEL_TIMEOUT,
        question_wait: float = QUESTION_WAIT,
        replica: str = "",
        live_replicas: Callable[[], Awaitable[set[str]]] | None = None,
    ) -> None:
        # A goal loop lives on one replica (the run's `driver`); when that replica stops, a
        # live one adopts the run and continues it from the journal.
        self._replica = replica
        self._live_replicas = live_replicas
        self._context_budget = context_budget
        self._model_timeout = model_timeout
        self._question_wait = question_wait
        self._db = db
        self._dispatcher = dispatcher
        self._tools = tools
        self._open_model = open_model
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._watch: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Goals:
        await self._dispatcher.run_unit(self._orphans)
        self._watch = asyncio.create_task(self._resume_loop(), name="goal-resume")
        return self

    async def __aexit__(self, *exc: object) -> None:
        tasks = [*self._tasks.values(), *([self._watch] if self._watch else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def start(
        self, who: Principal, text: str, desktop: str, model_spec: str, max_steps: int
    ) -> RunView:
        text = text.strip()
        if not text or len(text) > 20_000:
            raise InvalidArgumentError("text: the goal, 1-20000 characters")
        refuse_control("text", text, multiline=True)
        if not 0 <= max_steps <= MAX_STEPS:
            raise InvalidArgumentError(f"max_steps: between 1 and {MAX_STEPS}")
        try:
            # Off the loop: opening a model may read the operator's script file.
            model = await asyncio.to_thread(self._open_model, model_spec)
        except ModelSpecError as exc:
            raise InvalidArgumentError(f"model: {exc}") from exc
        except ModelConfigError as exc:  # a missing key is said now, not mid-run
            raise FailedPreconditionError(f"model {model_spec!r}: {exc}") from exc
        run_id = new_id("run")
        now = time.time()
        steps = max_steps or 50
        created: list[RunView] = []

        def unit(s: Session, ctx: Context) -> list[Order]:
            created.clear()
            limits = {
                "max_actions": steps,
                "max_seconds": 24 * 3600.0,
                "estimate_actions": steps,
                "estimate_seconds": 24 * 3600.0,
                "action_timeout_seconds": self._model_timeout,
            }
            spec = {
                "goal": text,
                "model": model_spec,
                "desktop": desktop,
                "max_steps": steps,
                "driver": self._replica,
            }
            run = new_run(
                run_id, who.id, text[:200], limits, kind=KIND, spec=spec, actions_total=0, now=now
            )
            s.add(run)
            s.flush()
            quotas.admit(s, who.id)
            quotas.charge_text(s, who.id, run.title, encode_result(spec))
            ledger.record(s, run, ctx, "run.submitted", owner=who.id, title=run.title, kind=KIND)
            ledger.record(s, run, ctx, "goal.request", text=text, model=model_spec, desktop=desktop)
            created.append(RunView(run))
            return []

        await self._dispatcher.run_unit(unit)
        goal = Goal(GoalState(run_id, who, desktop), model, model_spec, text, steps)
        goal.messages.append(Message("user", text, kind="request"))
        self._launch(goal)
        return created[0]

    # ------------------------------------------------------------------------ the loop

    def _launch(self, goal: Goal) -> None:
        task = asyncio.create_task(self._drive(goal), name=f"goal-{goal.state.run_id}")
        self._tasks[goal.state.run_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(goal.state.run_id, None))

    async def _drive(self, goal: Goal) -> None:
        try:
            while True:
                await self._step(goal)
        except _Stop as stop:
            await self._finish(goal, stop.status, stop.reason)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a defect: the run must not hang in RUNNING
            log.exception("goal %s broke down", goal.state.run_id)
            await self._finish(goal, RunState.HAND_BACK_TO_HUMAN, f"internal_error: {exc}")

    async def _step(self, goal: Goal) -> None:
        await self._check(goal)
        if goal.step >= goal.max_steps:
            raise _Stop(
                RunState.FAILED,
                f"budget_exhausted: {goal.max_steps} model steps; results are saved",
            )
        guidance = await self._take_guidance(goal)
        tools = specs(bool(goal.state.desktop_worker), goal.state.space)
        await self._fit(goal, tools)
        turn = await self._call_model(goal, tools)
        goal.step += 1
        seq = await self._journal(
            goal,
            "goal.model_call",
            step=goal.step,
            model=goal.model_spec,
            text=turn.text,
            stop=turn.stop,
            tool_calls=[
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in turn.tool_calls
            ],
            usage={"input": turn.usage.input_tokens, "output": turn.usage.output_tokens},
            guidance=[g for g, _ in guidance],
        )
        for guidance_id, _ in guidance:
            await self._journal(goal, "guidance.delivered", guidance=guidance_id, model_call=seq)
        goal.messages.append(Message("assistant", turn.text, turn.tool_calls))
        if not turn.tool_calls:
            raise _Stop(RunState.SUCCEEDED, f"completed: {turn.text[:500] or 'the model finished'}")
        results = [await self._tool(goal, call) for call in turn.tool_calls]
        goal.messages.append(Message("user", "", tool_results=tuple(results)))

    async def _fit(self, goal: Goal, tools: tuple[ToolSpec, ...]) -> None:
        """Keep the working set under its budget: archive big results, then checkpoint."""
        loop = asyncio.get_running_loop()

        def archive(content: tuple[Content, ...], call_id: str) -> str:
            texts = [p.text for p in content if isinstance(p, TextPart)]
            images = [
                {"media_type": p.media_type, "sha256": content_sha256(p.data), "bytes": len(p.data)}
                for p in content
                if isinstance(p, ImagePart)
            ]
            seq = asyncio.run_coroutine_threadsafe(
                self._journal(
                    goal, "goal.archive", call=call_id, text="\n".join(texts), images=images
                ),
                loop,
            ).result(timeout=30)
            return f"journal:{goal.state.run_id}#{seq}"

        def summarize(messages: tuple[Message, ...]) -> str:
            turn = goal.model.complete(
                SUMMARY_INSTRUCTION,
                (*messages, Message("user", "Write the checkpoint now.")),
                (),
                timeout=self._model_timeout,
            )
            return turn.text

        manager = ContextManager(archive, summarize, budget=self._context_budget)
        fitted = await asyncio.to_thread(manager.fit, SYSTEM, tuple(goal.messages), tools)
        report = fitted.report
        if report.changed or report.over_budget:
            goal.messages = list(fitted.messages)
            await self._journal(
                goal,
                "goal.context",
                tokens_before=report.tokens_before,
                tokens_after=report.tokens_after,
                budget=report.budget,
                archived=[a.reference for a in report.archived],
                checkpoint=bool(report.checkpoint),
                incomplete=bool(report.checkpoint and report.checkpoint.incomplete),
                over_budget=report.over_budget,
                error=report.error or "",
            )

    async def _call_model(self, goal: Goal, tools: Any) -> ModelTurn:
        messages = tuple(goal.messages)
        for attempt in (1, 2):
            try:
                return await asyncio.to_thread(
                    goal.model.complete, SYSTEM, messages, tools, timeout=self._model_timeout
                )
            except ModelTimeout as exc:
                await self._journal(goal, "goal.model_timeout", attempt=attempt, error=str(exc))
                if attempt == 2:
                    raise _Stop(
                        RunState.HAND_BACK_TO_HUMAN,
                        f"model_timeout: two calls ran past {self._model_timeout:g} s;"
                        " retry to go on",
                    ) from exc
            except ModelError as exc:
                await self._journal(goal, "goal.model_error", error=str(exc))
                raise _Stop(
                    RunState.HAND_BACK_TO_HUMAN, f"model_error: {exc}; retry to go on"
                ) from exc
        raise AssertionError("unreachable")

    async def _tool(self, goal: Goal, call: ToolCall) -> ToolResult:
        signature = json.dumps([call.name, call.arguments], sort_keys=True)
        goal.recent = [*goal.recent[-(REPEAT_LIMIT - 1) :], signature]
        if len(goal.recent) == REPEAT_LIMIT and len(set(goal.recent)) == 1:
            raise _Stop(
                RunState.HAND_BACK_TO_HUMAN,
                f"stuck: the same {call.name} call {REPEAT_LIMIT} times in a row",
            )
        if call.name == "ask_human":
            result = await self._ask(goal, call)
        else:
            result = await self._tools.call(goal.state, call, self._waiter(goal))
        goal.errors = goal.errors + 1 if result.is_error else 0
        await self._journal(
            goal,
            "goal.tool_result",
            call=call.id,
            name=call.name,
            arguments=call.arguments,
            is_error=result.is_error,
            text="\n".join(p.text for p in result.content if isinstance(p, TextPart)),
            images=[
                {"media_type": p.media_type, "bytes": len(p.data)}
                for p in result.content
                if isinstance(p, ImagePart)
            ],
            # Where the computer's steps and screenshots are (the console's replay).
            **(
                {"desktop_run": goal.state.desktop_run}
                if call.name == "computer" and goal.state.desktop_run
                else {}
            ),
        )
        if goal.errors >= ERROR_LIMIT:
            raise _Stop(
                RunState.HAND_BACK_TO_HUMAN,
                f"stuck: {ERROR_LIMIT} tool calls failed in a row; the last: {call.name}",
            )
        await self._check(goal)
        return result

    async def _ask(self, goal: Goal, call: ToolCall) -> ToolResult:
        question = str(call.arguments.get("question", "")).strip()
        required = bool(call.arguments.get("required"))
        await self._journal(
            goal, "goal.question", call=call.id, question=question, required=required
        )
        answer: list[tuple[str, str]] = []

        async def answered() -> bool:
            answer.extend(await self._take_guidance(goal, mark=True))
            return bool(answer)

        if required:
            await self._waiter(goal)(
                "question",
                f"the goal asks: {question} (answer with deskfleet runs guide)",
                answered,
            )
        else:
            deadline = time.monotonic() + self._question_wait
            # Polled: guidance arrives through the store, possibly from another replica.
            while time.monotonic() < deadline and not await answered():  # noqa: ASYNC110
                await asyncio.sleep(POLL)
        if answer:
            text = "\n".join(t for _, t in answer)
            return ToolResult(call.id, (TextPart(f"the person answered: {text}"),))
        return ToolResult(
            call.id,
            (
                TextPart(
                    f"no answer within {self._question_wait:g} s; go on, a later answer will arrive"
                ),
            ),
        )

    def _waiter(
        self, goal: Goal
    ) -> Callable[[str, str, Callable[[], Awaitable[bool]]], Awaitable[None]]:
        async def wait(code: str, detail: str, done: Callable[[], Awaitable[bool]]) -> None:
            if await done():
                return
            await self._status(goal, RunState.WAITING_FOR_AUTHORITY, waiting=(code, detail))
            while not await done():
                await self._check(goal)
                await asyncio.sleep(POLL)
            await self._status(goal, RunState.RUNNING)

        return wait

    # ----------------------------------------------------------------- run bookkeeping

    async def _check(self, goal: Goal) -> RunRow:
        """Stop when a person stopped the run or a kill switch covers it."""

        def unit(s: Session) -> tuple[RunRow, str]:
            run = owned_run(s, goal.state.owner, goal.state.run_id)
            runs = [
                goal.state.run_id,
                *([goal.state.desktop_run] if goal.state.desktop_run else []),
            ]
            kills = desktop_queries.kills_applying(s, goal.state.desktop_worker or "-", runs)
            why = f"kill switch {kills[0].id} is engaged: {kills[0].reason}" if kills else ""
            return run, why

        run, killed = await self._db.read(unit)
        if run.status not in ACTIVE:
            raise _Stop(run.status, run.stop_reason)  # cancelled by a person: leave it as it is
        if killed:
            raise _Stop(RunState.HAND_BACK_TO_HUMAN, f"kill_switch: {killed}; release it and retry")
        return run

    async def _take_guidance(self, goal: Goal, *, mark: bool = False) -> list[tuple[str, str]]:
        """Guidance not yet seen by this loop. Without `mark` it joins the next model call and
        is marked delivered once a call used it; with `mark` (an answer to ask_human) it is
        delivered now, as the tool's result."""

        def unit(s: Session, ctx: Context) -> list[Order]:
            taken.clear()
            for message in run_queries.undelivered_guidance(s, goal.state.run_id):
                if message.id in goal.seen_guidance:
                    continue
                taken.append((message.id, message.text))
                if mark:
                    message.delivered_at = ctx.now
            return []

        taken: list[tuple[str, str]] = []
        await self._dispatcher.run_unit(unit)
        goal.seen_guidance.update(g for g, _ in taken)
        if not mark:
            goal.messages.extend(Message("user", text, kind="guidance") for _, text in taken)
        return taken

    async def _journal(self, goal: Goal, event: str, **data: Any) -> int:
        seqs: list[int] = []

        def unit(s: Session, ctx: Context) -> list[Order]:
            seqs.clear()
            run = run_queries.run_for_update(s, goal.state.run_id)
            assert run is not None
            seqs.append(ledger.record(s, run, ctx, event, **data))
            if event == "guidance.delivered":
                for message in run_queries.undelivered_guidance(s, run.id):
                    if message.id == data["guidance"]:
                        message.delivered_at = ctx.now
            run.spec = dict(run.spec, step=goal.step, desktop_run=goal.state.desktop_run)
            return []

        await self._dispatcher.run_unit(unit)
        return seqs[0]

    async def _status(
        self, goal: Goal, status: str, *, waiting: tuple[str, str] = ("", ""), reason: str = ""
    ) -> None:
        def unit(s: Session, ctx: Context) -> list[Order]:
            run = run_queries.run_for_update(s, goal.state.run_id)
            assert run is not None
            if run.status in ACTIVE:
                ledger.set_status(s, run, ctx, status, stop_reason=reason, waiting=waiting)
            return []

        await self._dispatcher.run_unit(unit)

    async def _finish(self, goal: Goal, status: str, reason: str) -> None:
        with contextlib.suppress(Exception):
            await self._status(goal, status, reason=reason)

    # ---------------------------------------------------------------- restart and retry

    def _orphans(self, s: Session, ctx: Context) -> list[Order]:
        """Goal runs whose loop died with this replica's previous process: a person decides
        to go on. (Goals of other replicas are theirs, or adopted when they stop.)"""
        for run in run_queries.runs_in(s, ACTIVE):
            if run.kind == KIND and run.spec.get("driver", "") in ("", self._replica):
                locked = run_queries.run_for_update(s, run.id)
                if locked is not None:
                    ledger.set_status(
                        s,
                        locked,
                        ctx,
                        RunState.HAND_BACK_TO_HUMAN,
                        stop_reason="coordinator_restarted: the goal loop stopped with its"
                        " coordinator; retry to continue from the journal",
                    )
        return []

    async def _resume_loop(self) -> None:
        """Goal runs with no loop continue from their journal here: a retried run of this
        replica, or any active run whose replica stopped (adopted)."""
        while True:
            await asyncio.sleep(1.0)
            try:
                rows = await self._db.read(lambda s: list(run_queries.runs_in(s, ACTIVE)))
                goals = [r for r in rows if r.kind == KIND and r.id not in self._tasks]
                live = await self._live_replicas() if goals and self._live_replicas else set()
                for run in goals:
                    driver = run.spec.get("driver", "")
                    if driver in ("", self._replica):
                        if run.status == RunState.RUNNING:
                            await self._resume(run)
                    elif driver not in live and await self._adopt(run.id, driver):
                        await self._resume(run)
            except Exception as exc:
                log.warning("could not resume goal runs: %s", exc)

    async def _adopt(self, run_id: str, driver: str) -> bool:
        """Take over a goal whose replica stopped; False if another replica was first."""
        adopted: list[bool] = []

        def unit(s: Session, ctx: Context) -> list[Order]:
            adopted.clear()
            run = run_queries.run_for_update(s, run_id)
            if run is None or run.status not in ACTIVE or run.spec.get("driver") != driver:
                return []
            run.spec = dict(run.spec, driver=self._replica)
            ledger.record(s, run, ctx, "goal.adopted", replica=self._replica, previous=driver)
            adopted.append(True)
            return []

        await self._dispatcher.run_unit(unit)
        if adopted:
            log.info("goal %s adopted from replica %s, which stopped", run_id, driver)
        return bool(adopted)

    async def _resume(self, run: RunRow) -> None:
        owner = await self._db.read(lambda s: s.get(PrincipalRow, run.owner_id))
        if owner is None:
            return
        who = Principal(owner.id, owner.name, Role(owner.role))
        spec = run.spec
        try:
            model = await asyncio.to_thread(self._open_model, spec["model"])
        except ModelConfigError as exc:
            await self._status(
                Goal(GoalState(run.id, who, ""), model=None, model_spec="", text="", max_steps=0),  # type: ignore[arg-type]
                RunState.HAND_BACK_TO_HUMAN,
                reason=f"model {spec['model']!r}: {exc}",
            )
            return
        goal = Goal(
            GoalState(run.id, who, spec.get("desktop", ""), spec.get("desktop_run", "")),
            model,
            spec["model"],
            spec["goal"],
            int(spec.get("max_steps", 50)),
        )
        goal.messages = await self._replay(who, run.id)
        goal.step = int(spec.get("step", 0))
        log.info("goal %s continues from step %d", run.id, goal.step)
        self._launch(goal)

    async def _replay(self, who: Principal, run_id: str) -> list[Message]:
        """The conversation, rebuilt from the journal (screenshots become a note)."""

        def unit(s: Session) -> list[tuple[str, dict[str, Any]]]:
            owned_run(s, who, run_id)
            rows = run_queries.journal_after(s, run_id, 0, 100_000)
            return [(r.kind, json.loads(r.data)) for r in rows]

        events = await self._db.read(unit)
        messages: list[Message] = []
        pending: list[ToolResult] = []
        for kind, data in events:
            if kind == "goal.request":
                messages.append(Message("user", data["text"], kind="request"))
            elif kind == "goal.model_call":
                if pending:
                    messages.append(Message("user", "", tool_results=tuple(pending)))
                    pending = []
                calls = tuple(
                    ToolCall(c["id"], c["name"], c["arguments"]) for c in data["tool_calls"]
                )
                messages.append(Message("assistant", data.get("text", ""), calls))
            elif kind == "goal.tool_result":
                parts: list[Any] = [TextPart(data.get("text", ""))]
                if data.get("images"):
                    parts.append(
                        TextPart("[a screenshot was here: take a new one to see the screen]")
                    )
                pending.append(ToolResult(data["call"], tuple(parts), bool(data.get("is_error"))))
        if pending:
            messages.append(Message("user", "", tool_results=tuple(pending)))
        if messages and messages[-1].role == "assistant" and messages[-1].tool_calls:
            # The calls of the last turn had no results when the loop stopped: say so.
            messages.append(
                Message(
                    "user",
                    "",
                    tool_results=tuple(
                        ToolResult(c.id, (TextPart("not run: the loop stopped before it"),), True)
                        for c in messages[-1].tool_calls
                    ),
                )
            )
        return messages
