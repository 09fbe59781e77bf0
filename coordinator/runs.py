"""Runs as their owners see them: submit a plan, read it, wait for it, steer it, watch it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.orm import Session

from coordinator import capabilities, journal, ledger
from coordinator.dispatch import Dispatcher
from coordinator.journal import JournalBus
from coordinator.ledger import CancelOrder, Context, Order
from coordinator.principals import Principal
from coordinator.store import Database
from coordinator.store import desktop as desktop_queries
from coordinator.store import runs as run_queries
from coordinator.store.models import ActionRow, ArtifactRow, GuidanceRow, JournalRow, RunRow
from shared.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
)
from shared.ids import new_id
from shared.receipts import encode_result

MAX_ACTIONS_PER_PLAN = 1000
MAX_ARGS_CHARS = 4 * 1024 * 1024  # the server takes messages up to 16 MiB
DEFAULT_MAX_SECONDS = 3600.0
DEFAULT_ACTION_TIMEOUT = 60.0
GUIDANCE_CHARS = 4000
GUIDANCE_MESSAGES = 16
GUIDANCE_TOTAL_CHARS = 16000


@dataclass(frozen=True)
class PlannedAction:
    kind: str
    args: dict[str, Any]
    idempotent: bool
    route: dict[str, Any]
    intent: str = ""


@dataclass(frozen=True)
class Plan:
    actions: tuple[PlannedAction, ...]
    title: str = ""
    max_actions: int = 0
    max_seconds: float = 0.0
    estimate_actions: int = 0
    estimate_seconds: float = 0.0
    action_timeout: float = 0.0
    kind: str = "plan"
    spec: dict[str, Any] | None = None
    # Stage of each action; None: one after another (a plan runs in order).
    stages: tuple[int, ...] | None = None


@dataclass(frozen=True)
class RunView:
    run: RunRow
    actions: tuple[ActionRow, ...] = ()
    guidance_queued: int = 0
    artifacts: tuple[ArtifactRow, ...] = ()


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


def _no_nul(field: str, text: str) -> None:
    # Arguments and results travel as escaped JSON; free text is stored as text, and
    # PostgreSQL text cannot hold NUL.
    if "\x00" in text:
        raise InvalidArgumentError(f"{field}: must not contain NUL characters")


def _validate(plan: Plan) -> dict[str, Any]:
    _no_nul("title", plan.title)
    if not plan.actions:
        raise InvalidArgumentError("actions: a plan needs at least one action")
    if len(plan.actions) > MAX_ACTIONS_PER_PLAN:
        raise InvalidArgumentError(f"actions: at most {MAX_ACTIONS_PER_PLAN} per plan")
    for i, action in enumerate(plan.actions):
        if not action.kind or len(action.kind) > 100:
            raise InvalidArgumentError(f"actions[{i}].kind: 1-100 characters")
        _no_nul(f"actions[{i}].kind", action.kind)
        _no_nul(f"actions[{i}].intent", action.intent)
        if len(encode_result(action.args)) > MAX_ARGS_CHARS:
            raise InvalidArgumentError(f"actions[{i}].args: larger than {MAX_ARGS_CHARS} bytes")
        cap = action.route.get("capability", "")
        if cap and cap not in capabilities.ALL:
            raise InvalidArgumentError(
                f"actions[{i}].route.capability: unknown {cap!r}"
                f" (known: {', '.join(capabilities.ALL)})"
            )
    n = len(plan.actions)
    if (
        min(plan.max_actions, plan.estimate_actions) < 0
        or min(plan.max_seconds, plan.estimate_seconds, plan.action_timeout) < 0
    ):
        raise InvalidArgumentError("limits: must not be negative")
    max_actions = plan.max_actions or max(3 * n, n + 10)
    if max_actions < n:
        raise InvalidArgumentError(
            f"limits.max_actions: {max_actions} is fewer than the {n} actions"
        )
    max_seconds = plan.max_seconds or DEFAULT_MAX_SECONDS
    limits = {
        "max_actions": max_actions,
        "max_seconds": max_seconds,
        "estimate_actions": min(plan.estimate_actions or max_actions, max_actions),
        "estimate_seconds": min(plan.estimate_seconds or max_seconds, max_seconds),
        "action_timeout_seconds": plan.action_timeout or DEFAULT_ACTION_TIMEOUT,
    }
    return limits


def with_network_policy(action: PlannedAction, allow_private: bool) -> PlannedAction:
    """Browser actions carry the coordinator's network policy, whatever the plan asked for.

    An owner may narrow where the browser goes (allowed and denied domains) but never open
    loopback or private networks: that is the operator's `--allow-private-networks`.
    """
    if not action.kind.startswith("browser."):
        return action
    asked = action.args.get("policy") or {}
    if not isinstance(asked, dict):
        raise InvalidArgumentError(f"{action.kind}: args.policy must be an object")
    policy = {**asked, "allow_private": allow_private}
    return PlannedAction(
        action.kind,
        {**action.args, "policy": policy},
        action.idempotent,
        action.route,
        action.intent,
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

    async def submit(self, owner: Principal, plan: Plan) -> RunView:
        plan = replace(
            plan, actions=tuple(with_network_policy(a, self._allow_private) for a in plan.actions)
        )
        limits = _validate(plan)
        stages = plan.stages or tuple(range(len(plan.actions)))
        now = time.time()
        run_id = new_id("run")

        def unit(s: Session, ctx: Context) -> list[Order]:
            run = new_run(
                run_id,
                owner.id,
                plan.title or plan.actions[0].kind,
                limits,
                kind=plan.kind,
                spec=plan.spec or {},
                actions_total=len(plan.actions),
                now=now,
            )
            s.add(run)
            s.flush()
            for i, p in enumerate(plan.actions):
                s.add(
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
                    )
                )
            s.flush()
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
            s.flush()
            # The answer comes from this transaction: no second read of what was just written.
            created.append(RunView(run, tuple(run_queries.actions_of(s, run_id))))
            return orders

        created: list[RunView] = []
        await self._dispatcher.run_unit(unit)
        return created[0]

    async def get(self, owner: Principal, run_id: str) -> RunView:
        def unit(s: Session) -> RunView:
            run = owned_run(s, owner, run_id)
            guidance = run_queries.undelivered_guidance(s, run_id)
            return RunView(
                run,
                tuple(run_queries.actions_of(s, run_id)),
                len(guidance),
                tuple(desktop_queries.artifacts_of_run(s, run_id)),
            )

        return await self._db.read(unit)

    async def list(self, owner: Principal, status: str, limit: int) -> list[RunView]:
        rows = await self._db.read(run_queries.runs_of_owner, owner.id, status, limit)
        return [RunView(r) for r in rows]

    async def wait(self, owner: Principal, run_id: str, timeout: float) -> RunView:  # noqa: ASYNC109
        deadline = time.monotonic() + timeout
        # Subscribed before reading, so a change between the read and the wait still wakes us.
        wake = self._bus.subscribe(run_id)
        try:
            while True:
                wake.clear()
                view = await self.get(owner, run_id)
                remaining = deadline - time.monotonic()
                if view.run.status not in ledger.ACTIVE or remaining <= 0:
                    return view
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), min(remaining, 1.0))
        finally:
            self._bus.unsubscribe(run_id, wake)

    async def cancel(self, who: Principal, run_id: str) -> RunView:
        def unit(s: Session, ctx: Context) -> list[Order]:
            run = owned_run(s, who, run_id, lock=True)
            if run.status in (ledger.SUCCEEDED, ledger.CANCELLED):
                raise FailedPreconditionError(f"run {run_id} is already {run.status}")
            orders: list[Order] = []
            for action in run_queries.actions_of(s, run_id):
                if action.status in ledger.IN_FLIGHT:
                    orders.append(
                        CancelOrder(
                            action.worker_id,
                            action.id,
                            action.attempt_id,
                            f"run cancelled by {who.name}",
                        )
                    )
                elif action.status == ledger.PENDING:
                    action.status = "CANCELLED"
            ledger.set_status(s, run, ctx, ledger.CANCELLED, stop_reason=f"cancelled by {who.name}")
            return orders

        await self._dispatcher.run_unit(unit)
        return await self.get(who, run_id)

    async def retry(self, who: Principal, run_id: str) -> RunView:
        """Continue a stopped run from its checkpoint: the unfinished action runs again."""

        def unit(s: Session, ctx: Context) -> list[Order]:
            run = owned_run(s, who, run_id, lock=True)
            if run.status not in ledger.STOPPED_FOR_A_PERSON:
                raise FailedPreconditionError(
                    f"run {run_id} is {run.status}; only a FAILED or HAND_BACK_TO_HUMAN run"
                    " can be retried"
                )
            if run.stop_reason.startswith("budget_exhausted"):
                raise FailedPreconditionError(
                    f"run {run_id} reached a hard limit ({run.stop_reason.split(';')[0]}); a retry"
                    " grants no budget: abandon it, or submit a new run"
                )
            if run.stop_reason.startswith("estimate_exhausted"):
                # A person's "keep working": the run may go on up to its original limits only.
                run.estimate_actions = run.limits["max_actions"]
                run.estimate_seconds = run.limits["max_seconds"]
            for action in run_queries.actions_of(s, run_id):
                if action.status in ("FAILED", ledger.UNKNOWN):
                    action.status = ledger.PENDING
            ledger.record(s, run, ctx, "run.retry", by=who.id)
            ledger.set_status(s, run, ctx, ledger.RUNNING, cause=f"retry by {who.name}")
            return ledger.advance(s, run, ctx)

        await self._dispatcher.run_unit(unit)
        return await self.get(who, run_id)

    async def abandon(self, who: Principal, run_id: str) -> RunView:
        def unit(s: Session, ctx: Context) -> list[Order]:
            run = owned_run(s, who, run_id, lock=True)
            if run.status in (ledger.SUCCEEDED, ledger.CANCELLED):
                raise FailedPreconditionError(f"run {run_id} is already {run.status}")
            if run.status == ledger.RUNNING:
                raise FailedPreconditionError(f"run {run_id} is running: cancel it instead")
            for action in run_queries.actions_of(s, run_id):
                if action.status == ledger.PENDING:
                    action.status = "CANCELLED"
            ledger.set_status(
                s,
                run,
                ctx,
                ledger.CANCELLED,
                stop_reason=f"abandoned by {who.name}; results are saved",
            )
            return []

        await self._dispatcher.run_unit(unit)
        return await self.get(who, run_id)

    async def guide(self, who: Principal, run_id: str, text: str) -> tuple[str, int, int]:
        """Queue a person's message for the run's next safe boundary (SPEC §4.8)."""
        if not text.strip():
            raise InvalidArgumentError("text: guidance must not be empty")
        _no_nul("text", text)
        if len(text) > GUIDANCE_CHARS:
            raise InvalidArgumentError(
                f"text: guidance is at most {GUIDANCE_CHARS} characters (this is {len(text)})"
            )
        guidance_id = new_id("gdn")
        result: dict[str, int] = {}

        def unit(s: Session, ctx: Context) -> list[Order]:
            run = owned_run(s, who, run_id, lock=True)
            if run.status in (ledger.SUCCEEDED, ledger.CANCELLED):
                raise FailedPreconditionError(f"run {run_id} is {run.status}: nothing to guide")
            count, chars = run_queries.guidance_totals(s, run_id)
            if count >= GUIDANCE_MESSAGES:
                raise ResourceExhaustedError(
                    f"run {run_id} already has {count} guidance messages (at most"
                    f" {GUIDANCE_MESSAGES} per run)"
                )
            if chars + len(text) > GUIDANCE_TOTAL_CHARS:
                raise ResourceExhaustedError(
                    f"run {run_id} would exceed {GUIDANCE_TOTAL_CHARS} characters of guidance"
                    f" ({chars} used, {len(text)} more asked)"
                )
            s.add(
                GuidanceRow(
                    id=guidance_id,
                    run_id=run_id,
                    author_id=who.id,
                    text=text,
                    created_at=ctx.now,
                    delivered_at=None,
                )
            )
            result["seq"] = ledger.record(
                s, run, ctx, "guidance.queued", guidance=guidance_id, by=who.id, text=text
            )
            result["queued"] = len(run_queries.undelivered_guidance(s, run_id))  # incl. this one
            return ledger.advance(s, run, ctx)

        await self._dispatcher.run_unit(unit)
        return guidance_id, result["seq"], result["queued"]

    async def verify(self, who: Principal, run_id: str) -> journal.Verification:
        def unit(s: Session) -> journal.Verification:
            return journal.verify(s, owned_run(s, who, run_id))

        return await self._db.read(unit)

    async def watch(
        self, who: Principal, run_id: str, after_seq: int, follow: bool
    ) -> AsyncIterator[Event]:
        """History after `after_seq` from the store, then live events, each exactly once."""
        await self.get(who, run_id)  # owner check before anything is sent
        wake = self._bus.subscribe(run_id)
        last = after_seq
        try:
            while True:
                wake.clear()

                def unit(s: Session, last_seq: int = last) -> tuple[Sequence[JournalRow], str]:
                    run = owned_run(s, who, run_id)
                    return run_queries.journal_after(s, run_id, last_seq, 500), run.status

                rows, status = await self._db.read(unit)
                for row in rows:
                    yield Event.of(row)
                    last = row.seq
                if len(rows) == 500:
                    continue
                if not follow or status not in ledger.ACTIVE:
                    return
                # The poll bounds the wait when the wake-up comes from another replica.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), 1.0)
        finally:
            self._bus.unsubscribe(run_id, wake)


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
    status: str = ledger.RUNNING,
) -> RunRow:
    """A fresh run row with its budgets at their starting values."""
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
        trace_id=secrets.token_hex(16),
        created_at=now,
        updated_at=now,
        kind=kind,
        spec=spec,
    )


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


def parse_plan_actions(
    raw: Sequence[tuple[str, str, bool, dict[str, Any], str]],
) -> list[PlannedAction]:
    """Plan actions from (kind, args_json, idempotent, route, intent), args checked as objects."""
    out = []
    for i, (kind, args_json, idempotent, route, intent) in enumerate(raw):
        try:
            args = json.loads(args_json) if args_json else {}
        except ValueError as exc:
            raise InvalidArgumentError(f"actions[{i}].args: not JSON ({exc})") from exc
        if not isinstance(args, dict):
            raise InvalidArgumentError(f"actions[{i}].args: must be a JSON object")
        out.append(PlannedAction(kind, args, idempotent, route, intent))
    return out
