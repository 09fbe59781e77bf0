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
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from coordinator.agent import providers, rebuild
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
from coordinator.agent.tools import (
    APPROVAL,
    DELEGATED,
    FleetTools,
    GoalState,
    GuidedInstead,
    intent,
    specs,
)
from coordinator.heart import ledger
from coordinator.heart.context import Context, RunKind
from coordinator.heart.dispatch import Dispatcher
from coordinator.model.identity import Principal, Role
from coordinator.model.orders import Order
from coordinator.runs import guidance, questions, tree
from coordinator.runs.service import RunView, new_run, owned_run
from coordinator.store import (
    Database,
    desktop as desktop_queries,
    journal,
    questions as question_queries,
    quotas,
    runs as run_queries,
    workers as worker_queries,
)
from coordinator.store.models import JournalRow, PrincipalRow, QuestionRow, RunRow
from shared.errors import DataIntegrityError, FailedPreconditionError, InvalidArgumentError
from shared.ids import new_id
from shared.receipts import content_sha256, encode_result
from shared.states import ACTIVE, STOPPED_FOR_A_PERSON, QuestionState, RunState
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


REPLAY_PAGE = 500  # journal events a rebuild reads at once


def _failed_calls(messages: list[Message]) -> list[str]:
    """The calls whose results, in the turn before the model's last answer, were errors."""
    for message in reversed(messages[:-1]):
        if message.tool_results:
            calls = {c.id: c.name for m in messages if m.role == "assistant" for c in m.tool_calls}
            return [
                f"{calls.get(r.call_id, '?')} {r.call_id}"
                for r in message.tool_results
                if r.is_error
            ]
        if message.role == "assistant":
            return []
    return []


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
    # Calls of the last turn a rebuild found without a result, and what to do with each
    # (rebuild.resolve); settled before the next model call.
    open: tuple[rebuild.Open, ...] = ()
    # The run each call started (its `run.child` event): what a research or fetch call became.
    child_runs: dict[str, str] = field(default_factory=dict)
    recovering: bool = False  # rebuilt after a restart, adoption or retry: settle first


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

        worker = [desktop]  # as the unit resolves it

        def unit(s: Session, ctx: Context) -> list[Order]:
            created.clear()
            # A worker given by its name is kept by its id, as kill switches and approvals name it.
            desktop = (
                worker_queries.resolve(
                    s, worker[0], ctx.now, revoked_names=who.role is Role.ADMIN
                ).id
                if worker[0]
                else ""
            )
            worker[0] = desktop
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
        goal = Goal(GoalState(run_id, who, worker[0]), model, model_spec, text, steps)
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
            if goal.recovering:
                await self._settle(goal)
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
        given = await self._take_guidance(goal)
        tools = specs(bool(goal.state.desktop_worker), goal.state.space)
        await self._fit(goal, tools)
        turn = await self._call_model(goal, tools)
        await self._check(goal)  # stopped or switched off while the model thought: nothing runs
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
            intents=[intent(c) for c in turn.tool_calls],
            usage={"input": turn.usage.input_tokens, "output": turn.usage.output_tokens},
            guidance=[g for g, _ in given],
        )
        for guidance_id, _ in given:
            await self._journal(
                goal,
                "guidance.delivered",
                guidance=guidance_id,
                model_call=seq,
                to=f"model call {goal.step} (journal #{seq})",
            )
        earlier = [c.id for m in goal.messages for c in m.tool_calls]
        goal.messages.append(Message("assistant", turn.text, turn.tool_calls))
        problem = rebuild.call_id_problem(turn.tool_calls, earlier)
        if problem:
            raise _Stop(
                RunState.HAND_BACK_TO_HUMAN, f"model_error: {problem}; none of its calls ran"
            )
        if not turn.tool_calls:
            failed = _failed_calls(goal.messages)
            if failed:
                # A finished turn does not make every tool call a success: a person looks.
                raise _Stop(
                    RunState.HAND_BACK_TO_HUMAN,
                    f"unverified: the model stopped after calls that failed ({', '.join(failed)}):"
                    f" {turn.text[:300] or 'the model finished'}",
                )
            raise _Stop(RunState.SUCCEEDED, f"completed: {turn.text[:500] or 'the model finished'}")
        results: list[ToolResult] = []
        for call in turn.tool_calls:
            if results and await self._guidance_waits(goal):
                # A person's correction came in while an earlier call of this turn ran: the
                # calls not started wait for a model call that has read it.
                results.append(await self._not_started(goal, call))
            else:
                results.append(await self._tool(goal, call))
        goal.messages.append(Message("user", "", tool_results=tuple(results)))

    async def _guidance_waits(self, goal: Goal, prefix: str = "") -> bool:
        """Whether a message this loop has not seen waits for the goal (one whose message id
        starts with `prefix`: an approver's answer, say)."""

        def unit(s: Session) -> bool:
            return any(
                m.id not in goal.seen_guidance and (m.message_id or "").startswith(prefix)
                for m in run_queries.undelivered_guidance(s, goal.state.run_id)
            )

        return await self._db.read(unit)

    async def _not_started(self, goal: Goal, call: ToolCall) -> ToolResult:
        """A call left for the next model call: its result says so, in the journal, so that a
        rebuild reads it as not run (it never ran) instead of guessing."""
        result = ToolResult(
            call.id,
            (
                TextPart(
                    "not run: a person's guidance arrived before this call started; read it"
                    " and call again if it still applies"
                ),
            ),
        )
        await self._journal_result(goal, call, result, skipped="guidance")
        return result

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
        await self._journal_result(goal, call, result)
        if goal.errors >= ERROR_LIMIT:
            raise _Stop(
                RunState.HAND_BACK_TO_HUMAN,
                f"stuck: {ERROR_LIMIT} tool calls failed in a row; the last: {call.name}",
            )
        await self._check(goal)
        return result

    async def _journal_result(
        self,
        goal: Goal,
        call: ToolCall,
        result: ToolResult,
        *,
        recovered: str = "",
        skipped: str = "",
    ) -> None:
        """The call's result in the journal: what a rebuild gives the model again. `recovered`
        names the action or run it was read from after a restart (it did not run again);
        `skipped` why it was never started."""
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
            **({"recovered": recovered} if recovered else {}),
            **({"skipped": skipped} if skipped else {}),
        )

    async def _ask(self, goal: Goal, call: ToolCall) -> ToolResult:
        """The call's question, as a row: asked once per call, so that a goal rebuilt after a
        restart (or adopted) finds it, answered or still open, instead of asking again."""
        text = str(call.arguments.get("question", "")).strip()
        required = bool(call.arguments.get("required"))
        asked: list[QuestionRow] = []

        def ask(s: Session, ctx: Context) -> list[Order]:
            asked.clear()
            run = run_queries.run_for_update(s, goal.state.run_id)
            assert run is not None
            asked.append(
                questions.ask(
                    s, run, ctx, call.id, text, required=required, wait=self._question_wait
                )
            )
            return []

        try:
            await self._dispatcher.run_unit(ask)
        except questions.TooManyQuestions as exc:
            return ToolResult(call.id, (TextPart(exc.message),), is_error=True)
        question = asked[0]
        found: list[QuestionRow | None] = []

        def take(s: Session, ctx: Context) -> list[Order]:
            found.clear()
            run = run_queries.run_for_update(s, goal.state.run_id)
            assert run is not None
            found.append(
                questions.take_answer(s, run, ctx, question.id, sorted(goal.seen_guidance))
            )
            return []

        async def settled() -> bool:
            await self._dispatcher.run_unit(take)
            return found[0] is not None and found[0].status != QuestionState.OPEN

        if question.required:
            await self._waiter(goal)(
                "question",
                f"the goal asks: {question.text} (answer with deskfleet questions answer"
                f" {question.id} TEXT)",
                settled,
            )
        else:
            # Polled: the answer arrives through the store, possibly from another replica.
            while not await settled() and time.time() < (question.expires_at or 0):  # noqa: ASYNC110
                await asyncio.sleep(POLL)
        final = found[0] if found else None
        if final is not None and final.status == QuestionState.ANSWERED:
            return ToolResult(call.id, (TextPart(f"the person answered: {final.answer}"),))

        def expire(s: Session, ctx: Context) -> list[Order]:
            run = run_queries.run_for_update(s, goal.state.run_id)
            row = question_queries.question_for_update(s, question.id)
            if run is not None and row is not None:
                ledger.expire_question(s, run, ctx, row, "no answer in its time")
            return []

        await self._dispatcher.run_unit(expire)
        return ToolResult(
            call.id,
            (
                TextPart(
                    f"no answer within {self._question_wait:g} s; go on, a later answer will"
                    f" arrive (question {question.id})"
                ),
            ),
        )

    def _waiter(
        self, goal: Goal
    ) -> Callable[[str, str, Callable[[], Awaitable[bool]]], Awaitable[None]]:
        async def wait(code: str, detail: str, done: Callable[[], Awaitable[bool]]) -> None:
            if await done():
                return
            # Waiting on a child run of its own is DELEGATED; on a person, waiting for authority.
            delegated = code in (DELEGATED, APPROVAL)
            status = RunState.DELEGATED if delegated else RunState.WAITING_FOR_AUTHORITY
            await self._status(goal, status, waiting=(DELEGATED if delegated else code, detail))
            while not await done():
                await self._check(goal)
                if code == APPROVAL and await self._guidance_waits(goal, guidance.APPROVAL_PREFIX):
                    await self._status(goal, RunState.RUNNING)
                    raise GuidedInstead
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

    async def _take_guidance(self, goal: Goal) -> list[tuple[str, str]]:
        """Guidance not yet seen by this loop: it joins the next model call, and is marked
        delivered once a call used it (an answer to a question is taken by `_ask`)."""

        def unit(s: Session) -> list[tuple[str, str]]:
            return [
                (message.id, message.text)
                for message in run_queries.undelivered_guidance(s, goal.state.run_id)
                if message.id not in goal.seen_guidance
            ]

        taken = await self._db.read(unit)
        goal.seen_guidance.update(g for g, _ in taken)
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
                        ledger.delivered(message, data["to"], ctx.now)
            run.spec = dict(run.spec, step=goal.step, desktop_run=goal.state.desktop_run)
            return []

        await self._dispatcher.run_unit(unit)
        return seqs[0]

    async def _status(
        self,
        goal: Goal,
        status: str,
        *,
        waiting: tuple[str, str] = ("", ""),
        reason: str = "",
        cause: str = "",
    ) -> None:
        def unit(s: Session, ctx: Context) -> list[Order]:
            run = run_queries.run_for_update(s, goal.state.run_id)
            assert run is not None
            if run.status in ACTIVE:
                ledger.set_status(
                    s, run, ctx, status, stop_reason=reason, waiting=waiting, cause=cause
                )
            return []

        await self._dispatcher.run_unit(unit)

    async def _finish(self, goal: Goal, status: str, reason: str) -> None:
        """Stop the goal, and with it what its children still hold: a goal that ends for good
        ends its open child runs (their approvals withdrawn, their input leases given up). One
        handed to a person keeps them, for the retry that continues it."""

        def unit(s: Session, ctx: Context) -> list[Order]:
            run = run_queries.run_for_update(s, goal.state.run_id)
            if run is None:
                return []
            if run.status in ACTIVE:
                ledger.set_status(s, run, ctx, status, stop_reason=reason)
            if run.status in (*ACTIVE, *STOPPED_FOR_A_PERSON):
                return []
            why = f"the goal ended {run.status}"
            return tree.end_descendants(s, run, why, ctx) + tree.release_leases(s, [run.id], ctx)

        try:
            await self._dispatcher.run_unit(unit)
        except Exception:
            log.exception("goal %s: its end could not be recorded", goal.state.run_id)

    # ---------------------------------------------------------------- restart and retry

    def _orphans(self, s: Session, ctx: Context) -> list[Order]:
        """Goal runs whose loop died with this replica's previous process are RECOVERING: the
        resume loop rebuilds each from its journal and the ledger and goes on. (Goals of other
        replicas are theirs, or adopted when they stop.)"""
        for run in run_queries.runs_in(s, ACTIVE):
            if run.kind == KIND and run.spec.get("driver", "") in ("", self._replica):
                locked = run_queries.run_for_update(s, run.id)
                if locked is not None and locked.status != RunState.RECOVERING:
                    locked.execution += 1  # the loop that ran it died with the process
                    ledger.set_status(
                        s,
                        locked,
                        ctx,
                        RunState.RECOVERING,
                        cause="the coordinator restarted: rebuilding the goal from its journal",
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
                    if driver in ("", self._replica) or (
                        driver not in live and await self._adopt(run.id, driver)
                    ):
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
            run.execution += 1
            ledger.record(
                s,
                run,
                ctx,
                "goal.adopted",
                replica=self._replica,
                previous=driver,
                execution=run.execution,
            )
            adopted.append(True)
            return []

        await self._dispatcher.run_unit(unit)
        if adopted:
            log.info("goal %s adopted from replica %s, which stopped", run_id, driver)
        return bool(adopted)

    async def _resume(self, run: RunRow) -> None:
        """Rebuild a goal from its journal and the ledger (RECOVERING meanwhile), then go on."""
        owner = await self._db.read(lambda s: s.get(PrincipalRow, run.owner_id))
        if owner is None:
            return
        who = Principal(owner.id, owner.name, Role(owner.role))
        spec = run.spec
        stub = Goal(GoalState(run.id, who, ""), model=None, model_spec="", text="", max_steps=0)  # type: ignore[arg-type]
        try:
            model = await asyncio.to_thread(self._open_model, spec["model"])
        except ModelConfigError as exc:
            await self._status(
                stub, RunState.HAND_BACK_TO_HUMAN, reason=f"model {spec['model']!r}: {exc}"
            )
            return
        goal = Goal(
            GoalState(run.id, who, spec.get("desktop", ""), spec.get("desktop_run", "")),
            model,
            spec["model"],
            spec["goal"],
            int(spec.get("max_steps", 50)),
        )
        goal.step = int(spec.get("step", 0))
        if run.status != RunState.RECOVERING:
            await self._status(
                goal, RunState.RECOVERING, cause="rebuilding the goal from its journal"
            )
        try:
            await self._rebuild(goal)
        except DataIntegrityError as exc:
            await self._finish(goal, RunState.HAND_BACK_TO_HUMAN, f"journal_altered: {exc}")
            return
        log.info(
            "goal %s continues from step %d (%d open calls)", run.id, goal.step, len(goal.open)
        )
        self._launch(goal)

    async def _rebuild(self, goal: Goal) -> None:
        """The conversation from the journal (read page by page, its hash chain checked), and
        what each open call of the last turn became, read from the ledger."""
        run_id = goal.state.run_id

        def page(s: Session, after: int) -> list[JournalRow]:
            owned_run(s, goal.state.owner, run_id)
            return list(run_queries.journal_after(s, run_id, after, REPLAY_PAGE))

        chain = journal.Chain(run_id)
        events: list[tuple[str, dict[str, Any]]] = []
        after = 0
        while True:
            rows = await self._db.read(page, after)
            for row in rows:
                chain.follow(row)
                events.append((row.kind, json.loads(row.data)))
            if len(rows) < REPLAY_PAGE:
                break
            after = rows[-1].seq
        for kind, data in events:
            if kind == "run.child":
                if data.get("origin"):
                    goal.child_runs[str(data["origin"])] = str(data.get("child", ""))
                if data.get("kind") == "desktop" and not goal.state.desktop_run:
                    goal.state.desktop_run = str(data.get("child", ""))
        wanted = sorted(
            {
                str(g)
                for kind, d in events
                if kind == "goal.model_call"
                for g in d.get("guidance") or ()
            }
        )
        texts = await self._db.read(run_queries.guidance_texts, run_id, wanted)
        last = rebuild.last_calls(events)
        children: dict[str, rebuild.Child] = {}
        for call in last:
            child = await self._tools.became(goal.state, call, goal.child_runs.get(call.id, ""))
            if child is not None:
                children[call.id] = child
        rebuilt = rebuild.resolve(events, children, texts)
        goal.messages = list(rebuilt.messages)
        goal.seen_guidance.update(rebuilt.guidance_seen)
        goal.open = rebuilt.open
        goal.recovering = True

    async def _settle(self, goal: Goal) -> None:
        """Settle the open calls of a rebuilt goal in the order the model asked for them:
        journal the results read from the ledger, wait for what is in flight, run what never
        ran, hand back what may have acted and cannot be known; then the turn is whole."""
        results: list[ToolResult] = []
        goal.recovering = False
        for item in goal.open:
            call, decision = item.call, item.decision
            if decision is rebuild.Decision.AWAIT:
                item = await self._await_child(goal, item)
                decision = item.decision
            if decision is rebuild.Decision.HAND_BACK:
                raise _Stop(RunState.HAND_BACK_TO_HUMAN, item.reason)
            if decision is rebuild.Decision.RESULT:
                assert item.child is not None and item.child.result is not None
                result = item.child.result
                await self._journal_result(goal, call, result, recovered=item.child.id)
            else:
                result = await self._tool(goal, call)
            results.append(result)
        if goal.open:
            goal.messages.append(Message("user", "", tool_results=tuple(results)))
        goal.open = ()
        await self._status(goal, RunState.RUNNING, cause="the goal was rebuilt from its journal")

    async def _await_child(self, goal: Goal, item: rebuild.Open) -> rebuild.Open:
        """Wait until what an open call became is no longer in flight, then decide again."""
        while True:
            await self._check(goal)
            child = await self._tools.became(
                goal.state, item.call, goal.child_runs.get(item.call.id, "")
            )
            decided = rebuild.resolve_one(item.call, child)
            if decided.decision is not rebuild.Decision.AWAIT:
                return decided
            await asyncio.sleep(POLL)
