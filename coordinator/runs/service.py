"""Runs as their owners see them: submit a plan, read it, wait for it, steer it, watch it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import re
import secrets
import time
from asyncio import FIRST_COMPLETED
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.orm import Session

from coordinator.heart import ledger
from coordinator.heart.context import Context
from coordinator.heart.dispatch import Dispatcher
from coordinator.model import capabilities
from coordinator.model.identity import Principal, Role
from coordinator.model.orders import CancelOrder, Order
from coordinator.runs import timeline as timelines
from coordinator.runs.timeline import Timeline
from coordinator.store import (
    Database,
    desktop as desktop_queries,
    journal,
    principals as principal_queries,
    quotas,
    runs as run_queries,
)
from coordinator.store.models import (
    ActionRow,
    ArtifactRow,
    GuidanceRow,
    JournalRow,
    PrincipalRow,
    RunRow,
)
from coordinator.streams.followers import RunFeed, RunFeeds
from coordinator.streams.journal_bus import JournalBus, StopWait
from shared import action_kinds, plans, tracing
from shared.errors import (
    DeskfleetError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
)
from shared.ids import new_id
from shared.receipts import decode_result, encode_result
from shared.search import search_spec
from shared.states import ACTIVE, IN_FLIGHT, STOPPED_FOR_A_PERSON, ActionState, RunState
from shared.text import refuse_control

MAX_ACTIONS_PER_PLAN = 1000
MAX_ARGS_CHARS = 4 * 1024 * 1024  # the server takes messages up to 16 MiB
MAX_PLAN_CHARS = 8 * 1024 * 1024  # all of a plan's arguments, intents, routes and title
DEFAULT_MAX_SECONDS = 3600.0
DEFAULT_ACTION_TIMEOUT = 60.0
GUIDANCE_CHARS = 4000
GUIDANCE_MESSAGES = 16
GUIDANCE_TOTAL_CHARS = 16000
# Explicit bounds on everything a plan carries (`shared/plans.py`, which clients check too):
# past them a request is a mistake or an attack, and a clear INVALID_ARGUMENT beats a store
# error or a run that can never finish.
EVERY_OWNER = "*"  # a list of every owner's runs (admins)
KIND = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}")
# Where a browser may be sent. Every other scheme (file:, chrome:, javascript:, data:, ...)
# reads the worker's own machine or runs code instead of fetching a page: it is refused here,
# before anything is written, and again by the worker's policy on every hop.
URL_SCHEMES = ("http", "https")
MAX_URL_CHARS = 4096
# Browser arguments a plan may set; `visible` (a headed browser on a person's desktop) is set
# by the coordinator only, under a research approval.
BROWSER_ARGS = {
    "browser.fetch": {"url", "policy"},
    "browser.screenshot": {"url", "policy", "full_page"},
    "browser.search": {
        "query", "template", "format", "profile", "result", "link", "snippet", "max_results",
        "policy",
    },
}  # fmt: skip
# A plan narrows the operator's policy: each number at most the worker's own default.
POLICY_NUMBERS: dict[str, tuple[type, float, float]] = {
    "max_redirects": (int, 0, 5),
    "max_bytes": (int, 1, 2 * 1024 * 1024),
    "timeout": (float, 0.1, 120.0),
    "max_text": (int, 0, 100_000),
    "max_links": (int, 0, 100),
}
POLICY_DOMAINS = 100


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
    timeline: Timeline | None = None
    receipt_traces: Mapping[str, str] = dataclasses.field(default_factory=dict)  # id -> W3C


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


_text = plans.check_text


def _route_checked(field: str, route: dict[str, Any]) -> None:
    plans.check_route(
        field,
        str(route.get("worker", "")),
        {str(k): str(v) for k, v in (route.get("labels") or {}).items()},
        str(route.get("capability", "")),
        capabilities.ALL,
    )


def _limits_checked(plan: Plan) -> None:
    plans.check_limits(
        {
            "max_actions": plan.max_actions,
            "max_seconds": plan.max_seconds,
            "estimate_actions": plan.estimate_actions,
            "estimate_seconds": plan.estimate_seconds,
            "action_timeout_seconds": plan.action_timeout,
        }
    )


def _validate(plan: Plan) -> tuple[dict[str, Any], int]:
    """The run's limits, and the bytes its plan stores (ASCII JSON arguments and routes,
    intents, title, and the spec of a research run)."""
    _text("title", plan.title, plans.MAX_TITLE_CHARS)
    if not plan.actions:
        raise InvalidArgumentError("actions: a plan needs at least one action")
    if len(plan.actions) > MAX_ACTIONS_PER_PLAN:
        raise InvalidArgumentError(f"actions: at most {MAX_ACTIONS_PER_PLAN} per plan")
    size = len(plan.title.encode())
    for i, action in enumerate(plan.actions):
        if not KIND.fullmatch(action.kind):
            raise InvalidArgumentError(
                f"actions[{i}].kind: 1-100 letters, digits, '_', '.', ':', '-' (got"
                f" {action.kind[:40]!r})"
            )
        # Unknown kinds and arguments are refused here, not on a worker later.
        action_kinds.check_args(
            f"actions[{i}]", action.kind, action.args, by_coordinator=plan.kind != "plan"
        )
        _text(f"actions[{i}].intent", action.intent, plans.MAX_INTENT_CHARS)
        try:
            args = len(encode_result(action.args))
        except InvalidArgumentError as exc:  # 1e400 parses, as infinity, which JSON cannot hold
            raise InvalidArgumentError(f"actions[{i}].args: {exc.message}") from exc
        if args > MAX_ARGS_CHARS:
            raise InvalidArgumentError(f"actions[{i}].args: larger than {MAX_ARGS_CHARS} bytes")
        _route_checked(f"actions[{i}].route", action.route)
        route = len(encode_result(action.route)) if action.route else 0  # stored per action
        size += args + len(action.intent.encode()) + route
        if size > MAX_PLAN_CHARS:
            raise InvalidArgumentError(
                f"actions: the plan is larger than {MAX_PLAN_CHARS} bytes at actions[{i}]"
                " (arguments, intents, routes and title together): split it into several runs"
            )
    size += len(encode_result(plan.spec)) if plan.spec else 0  # a research run's request
    _limits_checked(plan)
    n = len(plan.actions)
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
    return limits, size


def check_url(field: str, url: object, *, template: bool = False) -> str:
    """`url` if a browser may be sent there: http or https with a host, bounded, no NUL."""
    if not isinstance(url, str) or not url:
        raise InvalidArgumentError(f"{field}: a URL is required (a non-empty string)")
    _text(field, url, MAX_URL_CHARS)
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise InvalidArgumentError(f"{field}: a URL has no spaces or control characters")
    probe = url.replace("{query}", "q") if template else url
    try:
        parts = urlsplit(probe)
        host = parts.hostname
    except ValueError as exc:
        raise InvalidArgumentError(f"{field}: not a URL ({exc})") from exc
    if parts.scheme.lower() not in URL_SCHEMES:
        raise InvalidArgumentError(
            f"{field}: scheme {parts.scheme or '(none)'!r} is not allowed"
            f" ({' and '.join(URL_SCHEMES)} only): {url[:80]!r}"
        )
    if not host:
        raise InvalidArgumentError(f"{field}: the URL has no host: {url[:80]!r}")
    return url


def _policy_checked(field: str, policy: object) -> dict[str, Any]:
    if not isinstance(policy, dict):
        raise InvalidArgumentError(f"{field}: must be an object")
    known = {"allow_domains", "deny_domains", "allow_private", *POLICY_NUMBERS}
    for key, value in policy.items():
        if key not in known:
            raise InvalidArgumentError(
                f"{field}.{key}: not a policy field (known: {', '.join(sorted(known))})"
            )
        if key == "allow_private":  # replaced by the operator's setting whatever it says
            if not isinstance(value, bool):
                raise InvalidArgumentError(f"{field}.{key}: true or false")
        elif key in POLICY_NUMBERS:
            kind, low, high = POLICY_NUMBERS[key]
            ok_type = isinstance(value, int | float) if kind is float else isinstance(value, int)
            if isinstance(value, bool) or not ok_type or not math.isfinite(value):
                raise InvalidArgumentError(f"{field}.{key}: a number between {low:g} and {high:g}")
            if not low <= value <= high:
                raise InvalidArgumentError(f"{field}.{key}: between {low:g} and {high:g}")
        elif not isinstance(value, list) or len(value) > POLICY_DOMAINS:
            raise InvalidArgumentError(f"{field}.{key}: a list of at most {POLICY_DOMAINS} domains")
        else:
            for j, domain in enumerate(value):
                if not isinstance(domain, str) or not domain:
                    raise InvalidArgumentError(f"{field}.{key}[{j}]: a domain name (a string)")
                _text(f"{field}.{key}[{j}]", domain, 253)
    return policy


def _browser_args_checked(field: str, kind: str, args: dict[str, Any]) -> None:
    allowed = BROWSER_ARGS.get(kind)
    if allowed is None:
        return  # a browser kind this coordinator does not know: the worker refuses it
    for key in args:
        if key not in allowed:
            why = "set by the coordinator only" if key == "visible" else "not an argument"
            raise InvalidArgumentError(
                f"{field}.{key}: {why} of {kind} (it takes: {', '.join(sorted(allowed))})"
            )
    if "url" in allowed:
        check_url(f"{field}.url", args.get("url"))
    if kind == "browser.search":
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise InvalidArgumentError(f"{field}.query: a non-empty string")
        _text(f"{field}.query", query, 500)
        if "template" in args:
            template = check_url(f"{field}.template", args["template"], template=True)
            if "{query}" not in template:
                raise InvalidArgumentError(f"{field}.template: needs {{query}}")
        for key in ("format", "profile", "result", "link", "snippet"):
            if key in args and (not isinstance(args[key], str) or len(args[key]) > 200):
                raise InvalidArgumentError(f"{field}.{key}: a string of at most 200 characters")
        try:
            search_spec(args)  # the worker checks the same: a bad profile never gets there
        except ValueError as exc:
            raise InvalidArgumentError(f"{field}.{exc}") from exc
        count = args.get("max_results", 10)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 100:
            raise InvalidArgumentError(f"{field}.max_results: an integer between 1 and 100")
    if "full_page" in args and not isinstance(args["full_page"], bool):
        raise InvalidArgumentError(f"{field}.full_page: true or false")
    if "policy" in args:
        _policy_checked(f"{field}.policy", args["policy"])


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


def with_network_policy(
    action: PlannedAction, allow_private: bool, field: str = "args"
) -> PlannedAction:
    """Browser actions carry the coordinator's network policy, whatever the plan asked for.

    An owner may narrow where the browser goes (allowed and denied domains) but never open
    loopback or private networks: that is the operator's `--allow-private-networks`.
    """
    if action.kind.startswith("desktop."):
        raise InvalidArgumentError(f"{field}: {plans.DESKTOP_KIND.format(kind=action.kind[:40])}")
    if not action.kind.startswith("browser."):
        return action
    _browser_args_checked(field, action.kind, action.args)
    asked = action.args.get("policy") or {}
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
        # One reader per run followed or waited on here, whoever follows it.
        self._feeds: RunFeeds[Event] = RunFeeds(_FeedSource(db), bus)

    async def submit(self, owner: Principal, plan: Plan, *, wait: float = 0.0) -> RunView:
        """Write the run and dispatch what can start; with `wait`, then wait up to that many
        seconds for the run to stop (as `wait` does)."""
        plan = replace(
            plan,
            actions=tuple(
                with_network_policy(a, self._allow_private, f"actions[{i}].args")
                for i, a in enumerate(plan.actions)
            ),
        )
        limits, size = _validate(plan)
        stages = plan.stages or tuple(range(len(plan.actions)))
        now = time.time()
        run_id = new_id("run")

        def unit(s: Session, ctx: Context) -> list[Order]:
            created.clear()
            if plan.kind == "plan":  # research runs journal an absent app as a failed branch
                _apps_offered(s, ctx, plan.actions)
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
            s.flush()  # the actions refer to the run (the models declare no relationship)
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
        self, who: Principal, status: str, limit: int, *, kind: str = "", owner: str = ""
    ) -> list[RunView]:
        """The caller's runs; an admin may name another owner, or `*` for every owner."""

        def unit(s: Session) -> Sequence[RunRow]:
            owner_id = _listed_owner(s, who, owner)
            return run_queries.runs_listed(s, owner_id, status, kind, limit)

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
            return orders

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
            if run.stop_reason.startswith("estimate_exhausted"):
                # A person's "keep working": the run may go on up to its original limits only.
                run.estimate_actions = run.limits["max_actions"]
                run.estimate_seconds = run.limits["max_seconds"]
            for action in run_queries.actions_of(s, run_id):
                if action.status in (ActionState.FAILED, ActionState.UNKNOWN):
                    action.status = ActionState.PENDING
            quotas.admit(s, run.owner_id)  # active again: it needs room under the limits
            ledger.record(s, run, ctx, "run.retry", by=who.id)
            ledger.set_status(s, run, ctx, RunState.RUNNING, cause=f"retry by {who.name}")
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
            return []

        await self._dispatcher.run_unit(unit)
        return await self.get(who, run_id)

    async def guide(self, who: Principal, run_id: str, text: str) -> tuple[str, int, int]:
        """Queue a person's message for the run's next safe boundary (SPEC §4.8)."""
        if not text.strip():
            raise InvalidArgumentError("text: guidance must not be empty")
        refuse_control("text", text, multiline=True)
        if len(text) > GUIDANCE_CHARS:
            raise InvalidArgumentError(
                f"text: guidance is at most {GUIDANCE_CHARS} characters (this is {len(text)})"
            )
        guidance_id = new_id("gdn")
        result: dict[str, int] = {}

        def unit(s: Session, ctx: Context) -> list[Order]:
            run = owned_run(s, who, run_id, lock=True)
            if run.status in (RunState.SUCCEEDED, RunState.CANCELLED):
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
            quotas.charge_text(s, run.owner_id, text)  # the row; its journal event counts too
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

    async def head(self, run_id: str) -> tuple[int, str]:
        found = await self._db.read(run_queries.run_head, run_id)
        if found is None:
            raise NotFoundError(f"no run {run_id!r}")
        return found

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
) -> RunRow:
    """A fresh run row with its budgets at their starting values.

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
    )


def stopped_view(s: Session, run_id: str) -> RunView | None:
    """A run's view for its waiters, in the transaction that stopped it (the run is locked);
    None if the transaction made it active again after stopping it (its waiters read)."""
    run = s.get(RunRow, run_id)
    if run is None or run.status in ACTIVE:
        return None
    return _view(s, run, with_timeline=False)


def _view(s: Session, run: RunRow, *, with_timeline: bool) -> RunView:
    run_id = run.id
    guidance = run_queries.undelivered_guidance(s, run_id)
    return RunView(
        run,
        tuple(run_queries.actions_of(s, run_id)),
        len(guidance),
        tuple(desktop_queries.artifacts_of_run(s, run_id)),
        # Read with the run, so its status and the timeline's agree.
        timelines.of_run(s, run_id, time.time()) if with_timeline else None,
        run_queries.receipt_traces(s, run_id),
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


def parse_plan_actions(
    raw: Sequence[tuple[str, str, bool, dict[str, Any], str]],
) -> list[PlannedAction]:
    """Plan actions from (kind, args_json, idempotent, route, intent), args checked as objects."""
    out = []
    for i, (kind, args_json, idempotent, route, intent) in enumerate(raw):
        if len(args_json) > MAX_ARGS_CHARS:
            raise InvalidArgumentError(f"actions[{i}].args: larger than {MAX_ARGS_CHARS} bytes")
        try:
            # decode_result also refuses NaN and Infinity, and nesting deeper than the parser's
            # recursion limit (a RecursionError would be a crash, not an answer).
            args = decode_result(args_json) if args_json else {}
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"actions[{i}].args: {exc.message}") from exc
        if not isinstance(args, dict):
            raise InvalidArgumentError(f"actions[{i}].args: must be a JSON object")
        out.append(PlannedAction(kind, args, idempotent, route, intent))
    return out
