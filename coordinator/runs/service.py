"""Runs as their owners see them: submit a plan, read it, wait for it, steer it, watch it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import secrets
import time
from asyncio import FIRST_COMPLETED
from collections.abc import AsyncGenerator, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.orm import Session

from coordinator.heart import ledger
from coordinator.heart.context import Context
from coordinator.heart.dispatch import Dispatcher
from coordinator.model.identity import Principal, Role
from coordinator.model.orders import CancelOrder, Order
from coordinator.runs import guidance, timeline as timelines, tree
from coordinator.runs.plan import Plan, PlannedAction, validate, with_network_policy
from coordinator.runs.timeline import Timeline
from coordinator.store import (
    Database,
    desktop as desktop_queries,
    journal,
    principals as principal_queries,
    questions as question_queries,
    quotas,
    runs as run_queries,
)
from coordinator.store.models import (
    ActionRow,
    ArtifactRow,
    GuidanceRow,
    JournalRow,
    PrincipalRow,
    QuestionRow,
    RunRow,
)
from coordinator.streams.followers import RunFeed, RunFeeds
from coordinator.streams.journal_bus import JournalBus, StopWait
from shared import action_kinds, faults, tracing
from shared.errors import (
    DeskfleetError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)
from shared.ids import new_id
from shared.states import (
    ACTIVE,
    DONE,
    IN_FLIGHT,
    STOPPED_FOR_A_PERSON,
    ActionState,
    GuidanceState,
    RunState,
)

EVERY_OWNER = "*"  # a list of every owner's runs (admins)
CHILDREN_SHOWN = 100  # children named in a run's view; `runs list --parent` pages the rest
QUESTIONS_SHOWN = 50  # a goal's questions in its view; `questions list --run` has them all


@dataclass(frozen=True)
class RunView:
    run: RunRow
    actions: tuple[ActionRow, ...] = ()
    guidance_queued: int = 0
    guidance: tuple[GuidanceRow, ...] = ()  # every message, oldest first (GetRun)
    questions: tuple[QuestionRow, ...] = ()  # a goal's, oldest first (GetRun)
    artifacts: tuple[ArtifactRow, ...] = ()
    timeline: Timeline | None = None
    receipt_traces: Mapping[str, str] = dataclasses.field(default_factory=dict)  # id -> W3C
    children: tuple[RunRow, ...] = ()  # the first CHILDREN_SHOWN, oldest first (GetRun)
    children_total: int = 0


@dataclass(frozen=True)
class Event:
    run_id: str
    seq: int
    kind: str
    at: float
    data: str
    hash: str
    prev_hash: str
    trace_id: str

    @classmethod
    def of(cls, row: JournalRow) -> Event:
        return cls(
            row.run_id, row.seq, row.kind, row.at, row.data, row.hash, row.prev_hash, row.trace_id
        )


def _apps_offered(s: Session, ctx: Context, actions: Sequence[PlannedAction]) -> None:
    """Every research app a plan names is offered by an enrolled worker (online or not: a run
    for an app only an offline worker offers waits for it, and says so)."""
    if not any(a.kind == action_kinds.APP_RESEARCH for a in actions):
        return  # no need to look at the fleet
    offered = {
        app
        for view in ctx.fleet(s)
        if view.state != "revoked"
        for app in view.advertisement.research_apps
    }
    for i, action in enumerate(actions):
        if action.kind == action_kinds.APP_RESEARCH and action.args["app"] not in offered:
            apps = ", ".join(sorted(offered)) or "none"
            raise InvalidArgumentError(
                f"actions[{i}].args.app: no enrolled worker offers app"
                f" {str(action.args['app'])[:64]!r} (offered: {apps})"
            )


class Runs:
    def __init__(
        self,
        db: Database,
        dispatcher: Dispatcher,
        bus: JournalBus,
        allow_private_networks: bool = False,
    ) -> None:
        self._db = db
        self._dispatcher = dispatcher
        self._bus = bus
        self._allow_private = allow_private_networks
        # One reader per run followed or waited on here, whoever follows it.
        self._feeds: RunFeeds[Event] = RunFeeds(_FeedSource(db), bus)

    async def submit(
        self,
        owner: Principal,
        plan: Plan,
        *,
        wait: float = 0.0,
        parent: str = "",
        origin: str = "",
    ) -> RunView:
        """Write the run and dispatch what can start; with `wait`, then wait up to that many
        seconds for the run to stop (as `wait` does). With `parent`, the run is a child of
        that run of the owner's (in its tree), and `origin` names what in the parent asked
        for it (a goal's tool call): both are journaled on the parent in this transaction."""
        plan = replace(
            plan,
            actions=tuple(
                with_network_policy(a, self._allow_private, f"actions[{i}].args")
                for i, a in enumerate(plan.actions)
            ),
        )
        limits, size = validate(plan)
        stages = plan.stages or tuple(range(len(plan.actions)))
        now = time.time()
        run_id = new_id("run")

        def unit(s: Session, ctx: Context) -> list[Order]:
            created.clear()
            if plan.kind == "plan":  # research runs journal an absent app as a failed branch
                _apps_offered(s, ctx, plan.actions)
            above = owned_run(s, owner, parent, lock=True) if parent else None
            run_queries.refuse_stopped_parent(above)
            run = new_run(
                run_id,
                owner.id,
                plan.title or plan.actions[0].kind,
                limits,
                kind=plan.kind,
                spec={**(plan.spec or {}), **({"origin": origin} if origin else {})},
                actions_total=len(plan.actions),
                now=now,
                parent=above,
            )
            s.add(run)
            s.flush()  # the actions refer to the run (the models declare no relationship)
            if above is not None:
                ledger.record(
                    s, above, ctx, "run.child", child=run_id, kind=plan.kind, origin=origin
                )
            # The owner's limits are checked as this transaction commits (runs/quota.py).
            quotas.admit(s, owner.id)
            quotas.charge(s, owner.id, size)
            rows = [
                ledger.new_action(
                    run_id,
                    i,
                    stages[i],
                    p.kind,
                    p.args,
                    idempotent=p.idempotent,
                    route=p.route,
                    intent=p.intent,
                    timeout=limits["action_timeout_seconds"],
                    postcondition=p.postcondition,
                )
                for i, p in enumerate(plan.actions)
            ]
            # Written with the journal event and the run's place in line by the flush before the
            # line is served: a flush of its own cost the submission a unit-of-work pass.
            s.add_all(rows)
            ledger.new_run_stages(s, run, rows, ctx)
            ledger.record(
                s,
                run,
                ctx,
                "run.submitted",
                owner=owner.id,
                title=run.title,
                limits=limits,
                actions=[
                    {
                        "kind": p.kind,
                        "idempotent": p.idempotent,
                        "route": p.route,
                        "intent": p.intent or p.kind,
                    }
                    for p in plan.actions
                ],
            )
            orders = ledger.advance(s, run, ctx)
            if wait > 0 and run.status in ACTIVE:
                # The caller waits, and answers with what it reads once the run stops: the
                # actions just written need not be read back for an answer nobody sees.
                created.append(RunView(run, ()))
                return orders
            s.flush()
            # The answer comes from this transaction: no second read of what was just written.
            created.append(RunView(run, tuple(run_queries.actions_of(s, run_id))))
            return orders

        created: list[RunView] = []
        if wait <= 0:
            await self._dispatcher.run_unit(unit)
            return created[0]
        # Subscribed before the run exists, so that nothing needs reading until it stops.
        wake = self._bus.subscribe_stop(run_id)
        try:
            await self._dispatcher.run_unit(unit)
            if created[0].run.status not in ACTIVE:
                return created[0]
            return await self._wait(owner, run_id, time.monotonic() + wait, wake, woken=False)
        finally:
            self._bus.unsubscribe(run_id, wake)

    async def get(self, owner: Principal, run_id: str, *, with_timeline: bool = False) -> RunView:
        def unit(s: Session) -> RunView:
            return _view(s, owned_run(s, owner, run_id), with_timeline=with_timeline)

        return await self._db.read(unit)

    async def list(
        self,
        who: Principal,
        status: str,
        limit: int,
        *,
        kind: str = "",
        owner: str = "",
        parent: str = "",
    ) -> list[RunView]:
        """The caller's runs; an admin may name another owner, or `*` for every owner; with
        `parent`, the children of that run."""

        def unit(s: Session) -> Sequence[RunRow]:
            owner_id = _listed_owner(s, who, owner)
            if parent:
                above = s.get(RunRow, parent)
                if above is None or (owner_id is not None and above.owner_id != owner_id):
                    # Children of a run the caller cannot list are not an empty list: the
                    # run is not theirs to name (an admin names another owner, or '*').
                    raise NotFoundError(f"no run {parent!r} among the runs listed")
            return run_queries.runs_listed(s, owner_id, status, kind, limit, parent)

        return [RunView(r) for r in await self._db.read(unit)]

    async def wait(self, owner: Principal, run_id: str, timeout: float) -> RunView:  # noqa: ASYNC109
        # Subscribed before reading, so a change between the read and the wait still wakes us;
        # only the run's end wakes it, not each start and receipt on the way.
        wake = self._bus.subscribe_stop(run_id)
        try:
            return await self._wait(owner, run_id, time.monotonic() + timeout, wake, woken=True)
        finally:
            self._bus.unsubscribe(run_id, wake)

    async def _wait(
        self, owner: Principal, run_id: str, deadline: float, wake: StopWait, *, woken: bool
    ) -> RunView:
        """The run's view once it has stopped or at `deadline` (monotonic), whichever is first.

        `woken`: read at once (False: the caller knows the run is active and subscribed `wake`
        before it could stop). Each read is one transaction: the run's status (by primary key)
        and, only when it has stopped or the time is up, its whole view. Many waiters polling
        whole views had cost the coordinator a third of its time, and a status read followed
        by a view read cost a stopped run's waiter two hops to the store instead of one.
        """

        def unit(s: Session) -> RunView | None:
            run = owned_run(s, owner, run_id)
            if run.status in ACTIVE and time.monotonic() < deadline:
                return None
            return _view(s, run, with_timeline=False)

        with contextlib.ExitStack() as joined:
            feed: RunFeed[Event] | None = None  # joined only once there is something to wait for
            trust_feed = True
            while True:
                handed: RunView | None = wake.view
                if handed is not None and handed.run.owner_id == owner.id:
                    return handed  # read by the transaction that stopped the run
                if woken:
                    wake.clear()
                    view = await self._db.read(unit)
                    if view is not None:
                        return view
                    trust_feed = False  # it read the run active: only a newer look counts
                woken = True
                if feed is None:
                    feed = joined.enter_context(self._feeds.joined(run_id, follower=False))
                # Woken by the run's stop (here, or through the relay), by the deadline, or
                # by the feed seeing it stopped: the feed's look serves all of the run's
                # waiters, where each waiter once looked every 2 s for itself.
                await _stopped_or_timeout(wake, feed, deadline, trust=trust_feed)

    async def cancel(self, who: Principal, run_id: str) -> RunView:
        def unit(s: Session, ctx: Context) -> list[Order]:
            run = owned_run(s, who, run_id, lock=True)
            if run.status in (RunState.SUCCEEDED, RunState.CANCELLED):
                raise FailedPreconditionError(f"run {run_id} is already {run.status}")
            orders: list[Order] = []
            for action in run_queries.actions_of(s, run_id):
                if action.status in IN_FLIGHT:
                    orders.append(
                        CancelOrder(
                            action.worker_id,
                            action.id,
                            action.attempt_id,
                            f"run cancelled by {who.name}",
                        )
                    )
                elif action.status == ActionState.PENDING:
                    action.status = ActionState.CANCELLED
            ledger.set_status(
                s, run, ctx, RunState.CANCELLED, stop_reason=f"cancelled by {who.name}"
            )
            orders += tree.release_leases(s, [run.id], ctx)
            return orders + tree.end_descendants(s, run, f"cancelled by {who.name}", ctx)

        await self._dispatcher.run_unit(unit)
        return await self.get(who, run_id)

    async def retry(self, who: Principal, run_id: str) -> RunView:
        """Continue a stopped run from its checkpoint: the unfinished action runs again."""

        def unit(s: Session, ctx: Context) -> list[Order]:
            run = owned_run(s, who, run_id, lock=True)
            if run.status not in STOPPED_FOR_A_PERSON:
                raise FailedPreconditionError(
                    f"run {run_id} is {run.status}; only a FAILED or HAND_BACK_TO_HUMAN run"
                    " can be retried"
                )
            if run.stop_reason.startswith("budget_exhausted"):
                raise FailedPreconditionError(
                    f"run {run_id} reached a hard limit ({run.stop_reason.split(';')[0]}); a retry"
                    " grants no budget: abandon it, or submit a new run"
                )
            return _continue(s, run, who, ctx, "retry")

        await self._dispatcher.run_unit(unit)
        return await self.get(who, run_id)

    async def revise(self, who: Principal, run_id: str, plan: Plan) -> RunView:
        """Replace what a stopped plan run has not finished with `plan`, once: the actions that
        succeeded and their receipts stay as they are (a completed action is never edited),
        and the run goes on with its usage, attempts and limits as they were."""
        plan = replace(
            plan,
            actions=tuple(
                with_network_policy(a, self._allow_private, f"actions[{i}].args")
                for i, a in enumerate(plan.actions)
            ),
        )
        _, size = validate(plan)

        def unit(s: Session, ctx: Context) -> list[Order]:
            run = owned_run(s, who, run_id, lock=True)
            if run.kind != "plan":
                raise FailedPreconditionError(
                    f"run {run_id} is a {run.kind} run: only a plan can be revised (a goal"
                    " changes direction through guidance: deskfleet runs guide)"
                )
            if run.spec.get("revised_by"):
                raise FailedPreconditionError(
                    f"run {run_id} was revised already (by {run.spec['revised_by']}): a run is"
                    " revised once; submit a new run"
                )
            if run.status not in STOPPED_FOR_A_PERSON:
                raise FailedPreconditionError(
                    f"run {run_id} is {run.status}; only a FAILED or HAND_BACK_TO_HUMAN run,"
                    " whose automatic recovery is spent, can be revised"
                )
            if run.stop_reason.startswith("budget_exhausted"):
                raise FailedPreconditionError(
                    f"run {run_id} reached a hard limit ({run.stop_reason.split(';')[0]}); a"
                    " revise grants no budget: abandon it, or submit a new run"
                )
            # As a submission is checked: a revise naming an app nobody offers was taken, and
            # the run waited for it.
            _apps_offered(s, ctx, plan.actions)
            actions = list(run_queries.actions_of(s, run_id))
            replaced = [a for a in actions if a.status not in DONE]
            for action in replaced:
                was = action.status
                # Counted as done, so that the run goes on past it; its error says what it was.
                action.status = ActionState.SKIPPED
                action.error = (
                    f"replaced by the revised plan of {who.name} (it was {was}"
                    + (
                        "; its outcome is unknown: it may have taken effect"
                        if was == "UNKNOWN"
                        else ""
                    )
                    + ")"
                )
            next_idx = max((a.idx for a in actions), default=-1) + 1
            next_stage = max((a.stage for a in actions), default=-1) + 1
            stages = plan.stages or tuple(range(len(plan.actions)))
            rows = [
                ledger.new_action(
                    run_id,
                    next_idx + i,
                    next_stage + stages[i],
                    p.kind,
                    p.args,
                    idempotent=p.idempotent,
                    route=p.route,
                    intent=p.intent,
                    timeout=run.limits["action_timeout_seconds"],
                    postcondition=p.postcondition,
                )
                for i, p in enumerate(plan.actions)
            ]
            s.add_all(rows)
            quotas.admit(s, run.owner_id)
            quotas.charge(s, run.owner_id, size)
            run.actions_total = len(actions) - len(replaced) + len(rows)
            run.execution += 1
            run.spec = dict(run.spec, revised_by=who.id)
            if run.stop_reason.startswith("estimate_exhausted"):
                run.estimate_actions = run.limits["max_actions"]
                run.estimate_seconds = run.limits["max_seconds"]
            s.flush()
            ledger.record(
                s,
                run,
                ctx,
                "run.revised",
                by=who.id,
                replaced=[{"id": a.id, "index": a.idx, "kind": a.kind} for a in replaced],
                actions=[
                    {"id": r.id, "index": r.idx, "kind": r.kind, "intent": r.intent} for r in rows
                ],
                execution=run.execution,
            )
            ledger.set_status(s, run, ctx, RunState.RUNNING, cause=f"revised by {who.name}")
            return ledger.advance(s, run, ctx)

        await self._dispatcher.run_unit(unit)
        return await self.get(who, run_id)

    async def abandon(self, who: Principal, run_id: str) -> RunView:
        def unit(s: Session, ctx: Context) -> list[Order]:
            run = owned_run(s, who, run_id, lock=True)
            if run.status in (RunState.SUCCEEDED, RunState.CANCELLED):
                raise FailedPreconditionError(f"run {run_id} is already {run.status}")
            if run.status == RunState.RUNNING:
                raise FailedPreconditionError(f"run {run_id} is running: cancel it instead")
            for action in run_queries.actions_of(s, run_id):
                if action.status == ActionState.PENDING:
                    action.status = ActionState.CANCELLED
            ledger.set_status(
                s,
                run,
                ctx,
                RunState.CANCELLED,
                stop_reason=f"abandoned by {who.name}; results are saved",
            )
            orders = tree.release_leases(s, [run.id], ctx)
            return orders + tree.end_descendants(s, run, f"abandoned by {who.name}", ctx)

        await self._dispatcher.run_unit(unit)
        return await self.get(who, run_id)

    async def guide(
        self,
        who: Principal,
        run_id: str,
        text: str,
        *,
        message_id: str = "",
        expected_execution: int = 0,
    ) -> guidance.Queued:
        """Queue a person's message for the run's next safe boundary (SPEC §4.8); a send
        repeated with its message id is answered with the message it queued."""
        guidance.check_text(text, message_id, expected_execution)
        result: list[guidance.Queued] = []

        def unit(s: Session, ctx: Context) -> list[Order]:
            result.clear()
            run = owned_run(s, who, run_id, lock=True)
            queued = guidance.queue(s, run, who, ctx, text, message_id, expected_execution)
            result.append(queued)
            if queued.repeated_send:
                return []
            if run.status == RunState.HAND_BACK_TO_HUMAN and run.stop_reason.startswith(
                "estimate_exhausted"
            ):
                # The third answer to a spent estimate: change direction and go on.
                return _continue(s, run, who, ctx, "guidance")
            return ledger.advance(s, run, ctx)

        await self._dispatcher.run_unit(unit)
        faults.crash(faults.EXIT_AFTER_GUIDANCE_COMMIT)
        return result[0]

    async def verify(self, who: Principal, run_id: str) -> journal.Verification:
        def unit(s: Session) -> journal.Verification:
            return journal.verify(s, owned_run(s, who, run_id))

        return await self._db.read(unit)

    async def watch(
        self, who: Principal, run_id: str, after_seq: int, follow: bool
    ) -> AsyncGenerator[Event, None]:
        """History after `after_seq` from the store, then live events, each exactly once.

        The history is the caller's own reads (the first one checks that the run is theirs);
        live events come from the run's feed (`coordinator/streams/followers.py`), which reads them
        once for everyone following the run on this replica.
        """
        last = after_seq
        while True:
            rows, status = await self._db.read(_journal_page, who, run_id, last)
            for row in rows:
                yield Event.of(row)
                last = row.seq
            if len(rows) < FEED_PAGE:
                break
        if not follow or status not in ACTIVE:
            return
        with self._feeds.joined(run_id, follower=True) as feed:
            while True:
                if feed.error is not None:
                    raise _again(feed.error)
                events = feed.after(last)
                if events is None:  # older than what the feed keeps: read them here
                    rows, _ = await self._db.read(_journal_page, who, run_id, last)
                    events = [Event.of(row) for row in rows]
                for event in events:
                    yield event
                    last = event.seq
                if events:
                    continue
                if feed.head is not None and last >= feed.head and feed.status not in ACTIVE:
                    return
                await feed.changed()


FEED_PAGE = 500  # journal events read at once by a watcher


def _journal_page(
    s: Session, who: Principal, run_id: str, after_seq: int
) -> tuple[Sequence[JournalRow], str]:
    """The caller's run's events after `after_seq` (a page) and its status, in one read."""
    run = owned_run(s, who, run_id)
    return run_queries.journal_after(s, run_id, after_seq, FEED_PAGE), run.status


def _again(error: BaseException) -> Exception:
    """The feed's failure, raised afresh in each of its followers."""
    if isinstance(error, DeskfleetError):
        return type(error)(error.message)
    return RuntimeError(f"reading the run for its followers failed: {error!r}")


async def _stopped_or_timeout(
    wake: StopWait, feed: RunFeed[Event], deadline: float, *, trust: bool
) -> None:
    """Until the run's stop wakes `wake`, the feed reads it stopped, or `deadline` (monotonic)
    passes. `trust`: whether the feed's last look counts (not when the waiter's own read came
    after it and found the run active again: then only the feed's next look does)."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or wake.is_set():
            return
        if feed.error is not None:
            raise _again(feed.error)
        if trust and feed.head is not None and feed.status not in ACTIVE:
            return
        stop = asyncio.ensure_future(wake.wait())
        moved = asyncio.ensure_future(feed.changed())
        try:
            await asyncio.wait((stop, moved), timeout=remaining, return_when=FIRST_COMPLETED)
        finally:
            stop.cancel()
            moved.cancel()
        trust = True


class _FeedSource:
    """How the feeds read runs (`followers.FeedSource`): one transaction a look."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def heads(self, run_ids: Collection[str]) -> Mapping[str, tuple[int, str]]:
        return await self._db.read(run_queries.run_heads, run_ids)

    async def after(self, run_id: str, seq: int, limit: int) -> tuple[Sequence[Event], str]:
        def unit(s: Session) -> tuple[Sequence[Event], str]:
            found = run_queries.run_head(s, run_id)
            if found is None:
                raise NotFoundError(f"no run {run_id!r}")
            rows = run_queries.journal_after(s, run_id, seq, limit)
            return [Event.of(row) for row in rows], found[1]

        return await self._db.read(unit)


def new_run(
    run_id: str,
    owner_id: str,
    title: str,
    limits: dict[str, Any],
    *,
    kind: str,
    spec: dict[str, Any],
    actions_total: int,
    now: float,
    status: str = RunState.RUNNING,
    parent: RunRow | None = None,
) -> RunRow:
    """A fresh run row with its budgets at their starting values, a child of `parent` when
    given (in its tree: the same root).

    The run's trace is the caller's when the RPC came with one (the CLI always sends one).
    """
    caller = tracing.current()
    trace_id = caller.trace_id if caller is not None else secrets.token_hex(16)
    tracing.record_run(run_id, kind, trace_id)
    return RunRow(
        id=run_id,
        owner_id=owner_id,
        title=title,
        status=status,
        stop_reason="",
        waiting_code="",
        waiting_detail="",
        limits=limits,
        estimate_actions=limits["estimate_actions"],
        estimate_seconds=limits["estimate_seconds"],
        extensions=0,
        successes_at_extension=0,
        actions_total=actions_total,
        actions_succeeded=0,
        attempts_used=0,
        last_seq=0,
        last_hash="",
        trace_id=trace_id,
        created_at=now,
        updated_at=now,
        # It entered its first state now: its first change of state measures from here, with no
        # look through the journal for a `run.state` event that a new run does not have.
        state_since=now,
        kind=kind,
        spec=spec,
        parent_id=parent.id if parent is not None else None,
        root_id=(parent.root_id or parent.id) if parent is not None else run_id,
    )


def _continue(s: Session, run: RunRow, who: Principal, ctx: Context, how: str) -> list[Order]:
    """A stopped run goes on from its checkpoint: its unfinished action runs again."""
    if run.stop_reason.startswith("estimate_exhausted"):
        # A person's "keep working": the run may go on up to its original limits only.
        run.estimate_actions = run.limits["max_actions"]
        run.estimate_seconds = run.limits["max_seconds"]
    for action in run_queries.actions_of(s, run.id):
        if action.status in (ActionState.FAILED, ActionState.UNKNOWN):
            action.status = ActionState.PENDING
    quotas.admit(s, run.owner_id)  # active again: it needs room under the limits
    run.execution += 1
    ledger.record(s, run, ctx, "run.retry", by=who.id, execution=run.execution, how=how)
    ledger.set_status(s, run, ctx, RunState.RUNNING, cause=f"{how} by {who.name}")
    return ledger.advance(s, run, ctx)


def stopped_view(s: Session, run_id: str) -> RunView | None:
    """A run's view for its waiters, in the transaction that stopped it (the run is locked);
    None if the transaction made it active again after stopping it (its waiters read)."""
    run = s.get(RunRow, run_id)
    if run is None or run.status in ACTIVE:
        return None
    return _view(s, run, with_timeline=False)


def _view(s: Session, run: RunRow, *, with_timeline: bool) -> RunView:
    run_id = run.id
    messages = tuple(run_queries.guidance_of(s, run_id))
    children, total = run_queries.children_of(s, run_id, CHILDREN_SHOWN)
    return RunView(
        run,
        tuple(run_queries.action_views_of(s, run_id)),
        sum(m.status == GuidanceState.QUEUED for m in messages),
        messages,
        tuple(question_queries.of_run(s, run_id, QUESTIONS_SHOWN)) if run.kind == "goal" else (),
        tuple(desktop_queries.artifacts_of_run(s, run_id)),
        # Read with the run, so its status and the timeline's agree.
        timelines.of_run(s, run_id, time.time(), run.last_seq) if with_timeline else None,
        run_queries.receipt_traces(s, run_id),
        tuple(children),
        total,
    )


def _listed_owner(s: Session, who: Principal, owner: str) -> str | None:
    """Whose runs a list shows (None: everyone's). Owners list their own only: naming anyone
    else is NOT_FOUND, as if that user did not exist."""
    if not owner or owner in (who.id, who.name):
        return who.id
    if who.role is not Role.ADMIN:
        if owner == EVERY_OWNER:
            raise PermissionDeniedError("owner '*': only admins list every owner's runs")
        raise NotFoundError(f"no user {owner!r}")
    if owner == EVERY_OWNER:
        return None
    row = s.get(PrincipalRow, owner) or principal_queries.principal_by_name(s, owner)
    if row is None:
        raise NotFoundError(f"no user {owner!r}")
    return row.id


def owned_run(s: Session, who: Principal, run_id: str, *, lock: bool = False) -> RunRow:
    """The caller's run (locked for writing if asked); NOT_FOUND for anyone else's."""
    run = (
        run_queries.run_for_update(s, run_id)
        if lock
        else run_queries.run_of_owner(s, run_id, who.id)
    )
    if run is None or run.owner_id != who.id:
        # Another owner's run is indistinguishable from one that does not exist.
        raise NotFoundError(f"no run {run_id!r}")
    return run
