"""Desktop runs: a person's scoped approval, then one Computer Use action at a time under it.

A desktop run opens WAITING_FOR_AUTHORITY with a pending approval and stays open between
actions until its approval expires or it is cancelled. Every `act` is written to the ledger
before anything is sent; one the coordinator refuses gets a refusal receipt of its own, so
the run's history shows what was asked and why it did not happen. The worker checks the same
scope again before it touches input.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.orm import Session

from coordinator.heart import ledger
from coordinator.heart.context import Context, RunKind
from coordinator.heart.dispatch import Dispatcher
from coordinator.model import capabilities
from coordinator.model.identity import Principal, Role
from coordinator.model.orders import DispatchOrder, Order
from coordinator.runs.desktop import scope
from coordinator.runs.desktop.scope import Scope
from coordinator.runs.service import RunView, new_run, owned_run
from coordinator.security import audit
from coordinator.security.secret_box import NO_KEY, SecretBox
from coordinator.store import (
    Database,
    desktop as queries,
    journal,
    principals as principal_queries,
    quotas,
    runs as run_queries,
    workers as worker_queries,
)
from coordinator.store.models import (
    ActionRow,
    ApprovalRow,
    ArtifactRow,
    InputLeaseRow,
    PrincipalRow,
    ReceiptRow,
    RunRow,
    SecretRow,
)
from coordinator.streams.journal_bus import JournalBus
from shared import desktop_scope as contract
from shared.desktop_scope import Grant, Refusal, Region
from shared.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)
from shared.ids import new_id
from shared.receipts import artifact_refs, content_hash, decode_result, encode_result
from shared.states import ACTIVE, FINISHED, ActionState, ApprovalState, RunState
from shared.text import refuse_control

KIND = "desktop"
PENDING, APPROVED, DENIED, SUSPENDED, EXPIRED = (
    ApprovalState.PENDING,
    ApprovalState.APPROVED,
    ApprovalState.DENIED,
    ApprovalState.SUSPENDED,
    ApprovalState.EXPIRED,
)
SECRET_REF = re.compile(r"\{\{secret:([A-Za-z0-9_.-]{1,100})\}\}")
MAX_ARGS_CHARS = 64 * 1024
DEFAULT_ACT_TIMEOUT = 60.0
# A caller may not set these: `resume` is the coordinator's to add after `desktop continue` (it
# lifts the worker's human_active pause), and the scope travels apart (`Dispatch.scope`).
RESERVED_ARGS = ("scope", "resume")


@dataclass(frozen=True)
class ActResult:
    action: ActionRow
    receipt: dict[str, Any] | None
    artifacts: tuple[tuple[str, ArtifactRow], ...]


# ------------------------------------------------------------------------------ the ledger


def approval_waiting(approval: ApprovalRow) -> tuple[str, str]:
    return (
        ledger.NEEDS_APPROVAL,
        f"approval {approval.id} waits for an answer: "
        + ("desktop control" if approval.kind == KIND else "research in a visible browser")
        + f" on worker {approval.worker_id}, {Scope.from_json(approval.requested).describe()}"
        f" (deskfleet approvals approve {approval.id})",
    )


def _expired(approval: ApprovalRow, now: float) -> bool:
    return approval.status == EXPIRED or (
        approval.status == APPROVED
        and approval.expires_at is not None
        and now >= approval.expires_at
    )


def _end_expired(s: Session, run: RunRow, approval: ApprovalRow, ctx: Context) -> None:
    approval.status = EXPIRED
    ledger.set_status(
        s,
        run,
        ctx,
        RunState.SUCCEEDED,
        stop_reason="scope_expired: the approved time is over; receipts are saved",
    )


def _holds_input(s: Session, run: RunRow, ctx: Context) -> bool:
    if run.status not in ACTIVE:
        return False
    approval = queries.latest_approval(s, run.id)
    return approval is not None and approval.status == APPROVED and not _expired(approval, ctx.now)


def take_input(s: Session, run: RunRow, worker_id: str, ctx: Context) -> str:
    """Give the run the desktop's input lease; returns the holder's run id when it is taken."""
    lease = queries.input_lease(s, worker_id)
    if lease is None:
        s.add(InputLeaseRow(worker_id=worker_id, run_id=run.id, acquired_at=ctx.now))
        ledger.record(s, run, ctx, "input.lease", worker=worker_id)
        return ""
    if lease.run_id == run.id:
        return ""
    holder = s.get(RunRow, lease.run_id)
    if holder is not None and _holds_input(s, holder, ctx):
        return holder.id
    lease.run_id, lease.acquired_at = run.id, ctx.now
    ledger.record(
        s, run, ctx, "input.lease", worker=worker_id, previous=holder.id if holder else ""
    )
    return ""


def advance(s: Session, run: RunRow, ctx: Context) -> list[Order]:
    """A desktop run never dispatches by itself: it only moves between waiting and ready."""
    approval = queries.latest_approval(s, run.id)
    if approval is None:
        return []
    if approval.status == PENDING:
        ledger.set_status(
            s, run, ctx, RunState.WAITING_FOR_AUTHORITY, waiting=approval_waiting(approval)
        )
    elif approval.status == APPROVED:
        if _expired(approval, ctx.now):
            _end_expired(s, run, approval, ctx)
        elif run.waiting_code == contract.HUMAN_ACTIVE:
            pass  # only `desktop continue` moves it on
        elif holder := take_input(s, run, approval.worker_id, ctx):
            ledger.set_status(
                s,
                run,
                ctx,
                RunState.WAITING_FOR_ENVIRONMENT,
                waiting=(
                    contract.INPUT_LEASE_HELD,
                    f"worker {approval.worker_id}'s desktop is controlled by run {holder};"
                    " this run takes it when that one ends",
                ),
            )
        else:
            ledger.set_status(s, run, ctx, RunState.RUNNING)
    return []


def on_failure(s: Session, run: RunRow, action: ActionRow, ctx: Context) -> list[Order]:
    """A failed or refused desktop action leaves the run open; a person at the desk pauses it."""
    if action.error.startswith(contract.HUMAN_ACTIVE):
        ledger.set_status(
            s,
            run,
            ctx,
            RunState.WAITING_FOR_AUTHORITY,
            waiting=(
                contract.HUMAN_ACTIVE,
                f"a person is using worker {action.worker_id}'s desktop; input is paused"
                f" (deskfleet desktop continue {run.id} when they are done)",
            ),
        )
    return []


# A desktop run's kind (given to the dispatcher at wiring): it stays open between actions.
DESKTOP_RUNS = RunKind(advance=advance, on_failure=on_failure)


def suspend(
    s: Session, run: RunRow, approval: ApprovalRow, why: str, code: str, ctx: Context
) -> None:
    """Take an approval back (a kill switch, a lost connection): the run waits for a person."""
    approval.status = SUSPENDED
    approval.answer = why
    ledger.record(s, run, ctx, "approval.suspended", approval=approval.id, reason=why)
    if run.status in ACTIVE:
        ledger.set_status(s, run, ctx, RunState.WAITING_FOR_AUTHORITY, waiting=(code, why))


def ask_again(
    s: Session, run: RunRow, previous: ApprovalRow, why: str, ctx: Context
) -> ApprovalRow:
    """A new pending approval for what the previous one last allowed: its grant if it was
    answered, else what it asked for. Approved as it stands, it can never be wider than that."""
    asked = dict(previous.granted or previous.requested)
    fresh = new_approval(run, previous.worker_id, asked, previous.reason, ctx.now, previous.kind)
    s.add(fresh)
    ledger.record(
        s, run, ctx, "approval.requested", approval=fresh.id, again=True, why=why, scope=asked
    )
    ledger.set_status(s, run, ctx, RunState.WAITING_FOR_AUTHORITY, waiting=approval_waiting(fresh))
    return fresh


def new_approval(
    run: RunRow,
    worker_id: str,
    requested: dict[str, Any],
    reason: str,
    now: float,
    kind: str = KIND,
) -> ApprovalRow:
    return ApprovalRow(
        id=new_id("apr"),
        run_id=run.id,
        owner_id=run.owner_id,
        kind=kind,
        worker_id=worker_id,
        status=PENDING,
        requested=requested,
        granted={},
        reason=reason,
        answer="",
        answered_by="",
        requested_at=now,
        answered_at=None,
        expires_at=None,
        actions_used=0,
        session_id="",
    )


def _granted(
    run: RunRow,
    approval: ApprovalRow,
    grant: tuple[list[str], list[int], Region | None, float, int],
) -> Scope:
    """What an approver's answer grants: the approval's scope, narrowed by any field given."""
    asked = Scope.from_json(approval.requested)
    if approval.kind != KIND or approval.requested == run.spec.get("scope"):
        return scope.narrowed(asked, *grant)
    # Asked again after a kill switch or a lost connection: the scope is the last grant.
    try:
        return scope.narrowed(asked, *grant, source="previously granted")
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(
            f"{exc.message}; a wider scope needs a new desktop request"
        ) from exc


# ------------------------------------------------------------------------------- acting


def _refusal_before_scope(
    s: Session, run: RunRow, approval: ApprovalRow | None, ctx: Context
) -> Refusal | None:
    if approval is None or approval.status == PENDING:
        detail = f"approval {approval.id} waits for an answer" if approval else "no approval"
        return Refusal(contract.NOT_APPROVED, f"{detail}; nothing runs without one")
    worker_id = approval.worker_id
    kills = queries.kills_applying(s, worker_id, [run.id])
    if kills:
        k = kills[0]
        return Refusal(
            contract.KILL_SWITCH, f"kill switch {k.id} ({k.scope}) is engaged: {k.reason}"
        )
    if approval.status == SUSPENDED:
        return Refusal(contract.REAPPROVAL_NEEDED, f"{approval.answer}; approve the run again")
    if approval.status == DENIED:
        return Refusal(contract.DENIED, f"approval {approval.id} was denied: {approval.answer}")
    if _expired(approval, ctx.now):
        return Refusal(contract.EXPIRED, f"approval {approval.id} has expired")
    if run.waiting_code == contract.HUMAN_ACTIVE:
        return Refusal(contract.HUMAN_ACTIVE, run.waiting_detail)
    granted = Scope.from_json(approval.granted)
    if approval.actions_used >= granted.max_actions:
        return Refusal(
            contract.MAX_ACTIONS_USED, f"the approval's {granted.max_actions} actions are used up"
        )
    return None


def _display_size(s: Session, worker_id: str, index: int) -> tuple[int, int] | None:
    worker = worker_queries.worker_by_id(s, worker_id)
    displays = (worker.advertisement or {}).get("displays", []) if worker else []
    for d in displays:
        if d.get("index") == index:
            return int(d["width"]), int(d["height"])
    return None


def _secrets(
    s: Session, box: SecretBox | None, owner_id: str, args: dict[str, Any]
) -> tuple[dict[str, str], str]:
    text = args.get("text")
    if not isinstance(text, str):
        return {}, ""
    values: dict[str, str] = {}
    for name in SECRET_REF.findall(text):
        row: SecretRow | None = queries.secret(s, owner_id, name)
        if row is None:
            return {}, name
        if box is None:
            raise FailedPreconditionError(NO_KEY)
        values[name] = box.open(owner_id, name, row.value)
    return values, ""


def _validate_args(action: str, args_json: str) -> dict[str, Any]:
    if action not in contract.ACTIONS:
        raise InvalidArgumentError(
            f"action: unknown {action!r} (known: {', '.join(contract.ACTIONS)})"
        )
    if len(args_json) > MAX_ARGS_CHARS:
        raise InvalidArgumentError(f"args: at most {MAX_ARGS_CHARS} characters")
    try:
        args = decode_result(args_json) if args_json else {}
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"args: {exc.message}") from exc
    if not isinstance(args, dict):
        raise InvalidArgumentError("args: a JSON object")
    for key in RESERVED_ARGS:
        if key in args:
            raise InvalidArgumentError(f"args.{key}: set by the coordinator, not by the caller")
    text = args.get("text")
    if text is not None and (not isinstance(text, str) or len(text) > contract.MAX_TEXT):
        raise InvalidArgumentError(f"args.text: a string of at most {contract.MAX_TEXT} characters")
    display = args.get("display", 0)
    if type(display) is not int or not 0 <= display < contract.MAX_DISPLAYS:
        raise InvalidArgumentError(f"args.display: an integer in 0..{contract.MAX_DISPLAYS - 1}")
    scope.points_of(args)  # coordinates are integers, or the caller hears it now
    scope.space_checked(args.get("space"))
    if action == "key":
        scope.check_keys(args.get("key"), "args.key")  # before an approval is even looked at
    return args


def _refuse(s: Session, run: RunRow, action: ActionRow, refusal: Refusal, ctx: Context) -> None:
    """Finish the action with a refusal receipt written by the coordinator itself."""
    error = f"{refusal.code}: {refusal.message}"
    body = encode_result(
        {
            "action": action.id,
            "run": run.id,
            "kind": action.kind,
            "worker": "",
            "refused_by": "coordinator",
            "status": "refused",
            "code": refusal.code,
            "error": error,
            "fingerprint": action.fingerprint,
            "at": ctx.now,
        }
    )
    row = ReceiptRow(
        id=new_id("rcp"),
        run_id=run.id,
        action_id=action.id,
        attempt_id="",
        epoch=0,
        worker_id="",
        status="refused",
        body=body,
        sha256=content_hash(body),
        created_at=ctx.now,
    )
    s.add(row)
    quotas.charge_text(s, run.owner_id, body)
    action.status, action.error, action.receipt_id, action.finished_at = (
        ActionState.FAILED,
        error,
        row.id,
        ctx.now,
    )
    ledger.record(
        s,
        run,
        ctx,
        "action.refused",
        action=action.id,
        kind=action.kind,
        code=refusal.code,
        reason=refusal.message,
        receipt=row.id,
        sha256=row.sha256,
    )


def _grant(granted: Scope, approval: ApprovalRow, now: float) -> Grant:
    assert approval.expires_at is not None
    return granted.grant(
        round(approval.expires_at - now, 3), granted.max_actions - approval.actions_used
    )


class Desktop:
    """Desktop runs, approvals, actions, artifacts and secrets, as people use them."""

    def __init__(
        self,
        db: Database,
        dispatcher: Dispatcher,
        bus: JournalBus,
        box: SecretBox | None = None,
    ) -> None:
        self._box = box  # None: the coordinator has no secrets key, secrets are unavailable
        self._db = db
        self._dispatcher = dispatcher
        self._bus = bus

    async def request(
        self, who: Principal, worker_id: str, asked: Scope, title: str, reason: str
    ) -> RunView:
        if len(reason) > 2000 or len(title) > 500:
            raise InvalidArgumentError("reason, title: at most 2000/500 characters")
        refuse_control("title", title)
        refuse_control("reason", reason)
        run_id = new_id("run")
        now = time.time()
        created: list[RunView] = []

        def unit(s: Session, ctx: Context) -> list[Order]:
            created.clear()
            worker = worker_queries.worker_by_id(s, worker_id)
            if worker is None:
                raise NotFoundError(f"no worker {worker_id!r}")
            if worker.state == "revoked":
                raise FailedPreconditionError(f"worker {worker_id} is revoked")
            granted = worker.allowed_capabilities  # empty: the token granted every capability
            if granted and capabilities.COMPUTER_USE not in granted:
                raise FailedPreconditionError(
                    f"worker {worker_id} was not enrolled for computer_use: a connected machine"
                    " grants no access"
                )
            limits = {
                "max_actions": asked.max_actions,
                "max_seconds": contract.MAX_TTL,
                "estimate_actions": asked.max_actions,
                "estimate_seconds": contract.MAX_TTL,
                "action_timeout_seconds": DEFAULT_ACT_TIMEOUT,
            }
            run = new_run(
                run_id,
                who.id,
                title or f"desktop control of {worker.name}",
                limits,
                kind=KIND,
                spec={"worker": worker_id, "scope": asked.to_json()},
                actions_total=0,
                now=now,
                status=RunState.WAITING_FOR_AUTHORITY,
            )
            s.add(run)
            s.flush()
            quotas.admit(s, who.id)
            approval = new_approval(run, worker_id, asked.to_json(), reason, now)
            s.add(approval)
            scope_text = encode_result(asked.to_json())  # in the run's spec and the approval
            quotas.charge_text(s, who.id, run.title, reason, scope_text, scope_text)
            ledger.record(s, run, ctx, "run.submitted", owner=who.id, title=run.title, kind=KIND)
            ledger.record(
                s,
                run,
                ctx,
                "approval.requested",
                approval=approval.id,
                worker=worker_id,
                scope=asked.to_json(),
                reason=reason,
                by=who.id,
            )
            ledger.set_status(
                s, run, ctx, RunState.WAITING_FOR_AUTHORITY, waiting=approval_waiting(approval)
            )
            created.append(RunView(run))
            return []

        await self._dispatcher.run_unit(unit)
        return created[0]

    async def approvals(self, who: Principal, status: str, limit: int) -> list[ApprovalRow]:
        def unit(s: Session) -> list[ApprovalRow]:
            rows = queries.approvals(s, status or PENDING, limit)
            out = []
            for row in rows:
                run = s.get(RunRow, row.run_id)
                if run is None or (status in ("", PENDING) and run.status not in ACTIVE):
                    continue  # a pending request of a run that ended asks nothing any more
                if who.role is Role.ADMIN or row.owner_id == who.id:
                    out.append(row)
            return out

        return await self._db.read(unit)

    async def answer(
        self,
        who: Principal,
        approval_id: str,
        *,
        grant: tuple[list[str], list[int], Region | None, float, int] | None,
        reason: str,
    ) -> ApprovalRow:
        """Approve (with `grant`, narrowing what was asked) or deny (grant None)."""
        if len(reason) > 2000:
            raise InvalidArgumentError("reason: at most 2000 characters")
        refuse_control("reason", reason)
        answered: list[ApprovalRow] = []
        by = audit.actor(who)

        def unit(s: Session, ctx: Context) -> list[Order]:
            answered.clear()
            approval = queries.approval(s, approval_id)
            if approval is None:
                raise NotFoundError(f"no approval {approval_id!r}")
            run = run_queries.run_for_update(s, approval.run_id)
            assert run is not None
            if approval.status != PENDING:
                raise FailedPreconditionError(
                    f"approval {approval_id} is already {approval.status}; a new request is needed"
                )
            if run.status not in ACTIVE:
                raise FailedPreconditionError(f"run {run.id} is {run.status}: nothing to approve")
            approval.answered_by, approval.answered_at = who.id, ctx.now
            approval.answer = reason
            quotas.charge_text(s, run.owner_id, reason)  # stored with the owner's run
            orders: list[Order] = []
            if grant is None:
                approval.status = DENIED
                audit.record(s, by, "approval.deny", approval.id, run=run.id, reason=reason)
                ledger.record(
                    s, run, ctx, "approval.denied", approval=approval.id, by=who.id, reason=reason
                )
                if approval.kind != KIND:  # another kind of run decides what a "no" means
                    orders = ledger.advance(s, run, ctx)
                else:
                    ledger.set_status(
                        s,
                        run,
                        ctx,
                        RunState.CANCELLED,
                        stop_reason=f"approval_denied by {who.name}: {reason or 'no reason given'}",
                    )
            else:
                granted = _granted(run, approval, grant)
                approval.status = APPROVED
                approval.granted = granted.to_json()
                quotas.charge_text(s, run.owner_id, encode_result(approval.granted))
                approval.expires_at = ctx.now + granted.ttl
                audit.record(
                    s,
                    by,
                    "approval.approve",
                    approval.id,
                    run=run.id,
                    worker=approval.worker_id,
                    scope=granted.to_json(),
                    reason=reason,
                )
                ledger.record(
                    s,
                    run,
                    ctx,
                    "approval.granted",
                    approval=approval.id,
                    by=who.id,
                    scope=granted.to_json(),
                    expires_at=approval.expires_at,
                    reason=reason,
                )
                orders = (
                    advance(s, run, ctx) if approval.kind == KIND else ledger.advance(s, run, ctx)
                )
            s.flush()
            answered.append(approval)
            return orders

        await self._dispatcher.run_unit(unit)
        return answered[0]

    async def act(
        self,
        who: Principal,
        run_id: str,
        action: str,
        args_json: str,
        timeout: float,  # noqa: ASYNC109
    ) -> ActResult:
        args = _validate_args(action, args_json)
        made: list[str] = []

        def unit(s: Session, ctx: Context) -> list[Order]:
            made.clear()
            run = owned_run(s, who, run_id, lock=True)
            if run.kind != KIND:
                raise InvalidArgumentError(f"run {run_id} is a {run.kind} run, not a desktop run")
            if run.status not in ACTIVE:
                raise FailedPreconditionError(
                    f"run {run_id} is {run.status}: {run.stop_reason or 'it has stopped'}"
                )
            approval = queries.latest_approval(s, run.id)
            worker_id = approval.worker_id if approval else run.spec.get("worker", "")
            # The run counts its actions (each Act adds one, under the run's lock): loading
            # every action of a long session to count them cost more with each Act.
            idx = run.actions_total
            row = ledger.new_action(
                run.id,
                idx,
                idx,
                f"desktop.{action}",
                args,
                idempotent=action in contract.IDEMPOTENT,
                route={"worker": worker_id, "capability": capabilities.COMPUTER_USE},
                intent=action,
                timeout=float(run.limits.get("action_timeout_seconds", DEFAULT_ACT_TIMEOUT)),
            )
            s.add(row)
            quotas.charge_text(s, run.owner_id, row.args, row.intent)
            run.actions_total += 1
            made.append(row.id)
            refusal, order = self._admit(s, run, approval, action, args, row, ctx)
            if refusal is not None:
                _refuse(s, run, row, refusal, ctx)
                return []
            assert order is not None
            return [order]

        await self._dispatcher.run_unit(unit)
        return await self._outcome(who, run_id, made[0], timeout or DEFAULT_ACT_TIMEOUT)

    def _admit(
        self,
        s: Session,
        run: RunRow,
        approval: ApprovalRow | None,
        action: str,
        args: dict[str, Any],
        row: ActionRow,
        ctx: Context,
    ) -> tuple[Refusal | None, DispatchOrder | None]:
        refusal = _refusal_before_scope(s, run, approval, ctx)
        if refusal is not None or approval is None:
            if refusal is not None and refusal.code == contract.EXPIRED and approval is not None:
                _end_expired(s, run, approval, ctx)
            return refusal, None
        worker_id = approval.worker_id
        granted = Scope.from_json(approval.granted)
        refusal = scope.check(
            granted, action, args, _display_size(s, worker_id, args.get("display", 0))
        )
        if refusal is not None:
            return refusal, None
        if holder := take_input(s, run, worker_id, ctx):
            held = f"the desktop is controlled by run {holder}"
            return Refusal(contract.INPUT_LEASE_HELD, held), None
        if not ctx.is_online(s, worker_id):
            return Refusal(contract.WORKER_OFFLINE, f"worker {worker_id} is not connected"), None
        session = queries.session_of(s, worker_id)
        if approval.session_id and approval.session_id != session:
            why = f"worker {worker_id} lost its coordinator since the approval"
            suspend(s, run, approval, why, contract.REAPPROVAL_NEEDED, ctx)
            ask_again(s, run, approval, why, ctx)
            return Refusal(contract.REAPPROVAL_NEEDED, f"{why}; approve the run again"), None
        values, missing = _secrets(s, self._box, run.owner_id, args)
        if missing:
            return Refusal(
                contract.UNKNOWN_SECRET, f"no secret named {missing!r} is stored for the owner"
            ), None
        if action == "type":
            # A secret's value is typed as it is: a newline in it presses Return all the same.
            # The refusal never says which secret, or where in it.
            for value in values.values():
                if refusal := scope.keys_in_text(granted, value, "a secret 'text' refers to"):
                    return refusal, None
        approval.session_id = session
        grant = _grant(granted, approval, ctx.now)
        approval.actions_used += 1
        if run.spec.get("resume"):
            row.args = encode_result(dict(args, resume=True))
            run.spec = {k: v for k, v in run.spec.items() if k != "resume"}
        ledger.set_status(s, run, ctx, RunState.RUNNING)
        order = ledger.claim(s, run, row, worker_id, ctx)
        assert isinstance(order, DispatchOrder)
        return None, replace(order, secrets=values, scope=grant)

    async def _outcome(
        self,
        who: Principal,
        run_id: str,
        action_id: str,
        timeout: float,  # noqa: ASYNC109
    ) -> ActResult:
        deadline = time.monotonic() + timeout
        wake = self._bus.subscribe(run_id)
        try:
            while True:
                wake.clear()
                result = await self._db.read(self._read_outcome, who, run_id, action_id)
                remaining = deadline - time.monotonic()
                if result.action.status in (*FINISHED, ActionState.UNKNOWN) or remaining <= 0:
                    return result
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), min(remaining, 1.0))
        finally:
            self._bus.unsubscribe(run_id, wake)

    @staticmethod
    def _read_outcome(s: Session, who: Principal, run_id: str, action_id: str) -> ActResult:
        owned_run(s, who, run_id)
        action = run_queries.action(s, action_id)
        assert action is not None
        receipt = None
        artifacts: list[tuple[str, ArtifactRow]] = []
        if action.receipt_id:
            row = run_queries.receipt(s, action.receipt_id)
            if row is not None:
                receipt = journal.read_receipt(row)
                for role, sha in artifact_refs((receipt or {}).get("result")):
                    art = queries.artifact(s, run_id, sha)
                    if art is not None:
                        artifacts.append((role, art))
        return ActResult(action, receipt, tuple(artifacts))

    async def resume(self, who: Principal, run_id: str) -> RunView:
        """The person at the desk is done: input may go on (the next action says so)."""

        def unit(s: Session, ctx: Context) -> list[Order]:
            run = owned_run(s, who, run_id, lock=True)
            if run.kind != KIND or run.waiting_code != contract.HUMAN_ACTIVE:
                raise FailedPreconditionError(
                    f"run {run_id} is not paused for a person at the desk"
                )
            run.spec = dict(run.spec, resume=True)
            ledger.record(s, run, ctx, "desktop.continue", by=who.id)
            ledger.set_status(s, run, ctx, RunState.RUNNING, cause=f"continue by {who.name}")
            return advance(s, run, ctx)

        await self._dispatcher.run_unit(unit)
        return await self._db.read(lambda s: RunView(owned_run(s, who, run_id)))

    async def artifact(self, who: Principal, run_id: str, sha256: str) -> ArtifactRow:
        def unit(s: Session) -> ArtifactRow:
            owned_run(s, who, run_id)
            row = queries.artifact(s, run_id, sha256)
            if row is None:
                raise NotFoundError(f"run {run_id} has no artifact {sha256}")
            _ = row.data  # deferred: loaded while the session is open
            return row

        return await self._db.read(unit)

    async def set_secret(self, who: Principal, owner: str, name: str, value: str) -> SecretRow:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", name):
            raise InvalidArgumentError("name: 1-100 letters, digits, '_', '.', '-'")
        if not value or len(value) > contract.MAX_TEXT or "\x00" in value:
            raise InvalidArgumentError(f"value: 1-{contract.MAX_TEXT} characters, no NUL")
        if self._box is None:
            raise FailedPreconditionError(NO_KEY)
        box = self._box
        stored: list[SecretRow] = []
        by = audit.actor(who)

        def unit(s: Session) -> None:
            stored.clear()
            owner_id = who.id
            if owner and owner not in (who.id, who.name):
                if who.role is not Role.ADMIN:
                    raise PermissionDeniedError("only an admin stores secrets for another owner")
                target = s.get(PrincipalRow, owner) or principal_queries.principal_by_name(s, owner)
                if target is None:
                    raise NotFoundError(f"no user {owner!r}")
                owner_id = target.id
            row = queries.secret(s, owner_id, name)
            if row is None:
                row = SecretRow(owner_id=owner_id, name=name)
                s.add(row)
                quotas.add_secret(s, owner_id)  # the count limit is checked at commit
            row.value = box.seal(owner_id, name, value)
            row.updated_at, row.updated_by = time.time(), who.id
            # The sealed value and the name count, for a replaced value too (what an owner
            # stored is never subtracted); past the byte limit a secret is refused.
            quotas.charge_text(s, owner_id, name, row.value)
            quotas.check_stored(s, owner_id)
            audit.record(s, by, "secret.set", f"{owner_id}/{name}")  # the name, never the value
            s.flush()
            stored.append(row)

        await self._db.write(unit)
        return stored[0]
