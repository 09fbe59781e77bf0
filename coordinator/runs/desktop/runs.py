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
from coordinator.runs import guidance
from coordinator.runs.desktop import approvals, scope
from coordinator.runs.desktop.admission import (
    DEFAULT_ACT_TIMEOUT,
    checked_args,
    display_size,
    refusal_before_scope,
    refuse,
    secrets_for,
    take_input,
)
from coordinator.runs.desktop.approvals import (
    APPROVED,
    DENIED,
    KIND,
    PENDING,
    approval_waiting,
    ask_again,
    end_expired,
    grant_for,
    granted_scope,
    is_expired,
    new_approval,
    suspend,
)
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
    PrincipalRow,
    RecordingFrameRow,
    RunRow,
    SecretRow,
    WorkerRow,
)
from coordinator.streams.journal_bus import JournalBus
from shared import desktop_scope as contract
from shared.advertisement import Advertisement
from shared.desktop_scope import Refusal, Region
from shared.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)
from shared.ids import new_id
from shared.receipts import artifact_refs, encode_result
from shared.states import ACTIVE, FINISHED, ActionState, ApprovalState, RunState
from shared.text import refuse_control


@dataclass(frozen=True)
class ActResult:
    action: ActionRow
    receipt: dict[str, Any] | None
    artifacts: tuple[tuple[str, ArtifactRow], ...]


RECORDING_PAGE = 500  # frames a ListRecording page holds unless asked for fewer
RECORDING_PAGE_MAX = 2000


@dataclass(frozen=True)
class RecordingPage:
    """A page of a run's recording, frames without their images."""

    frames: tuple[RecordingFrameRow, ...]
    next_seq: int  # the `after_seq` of the next page; 0 on the last one
    total: int


# ------------------------------------------------------------------------------ the ledger


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
        if is_expired(approval, ctx.now):
            end_expired(s, run, approval, ctx)
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
                    f"worker {approval.worker_id}'s desktop is controlled by {holder};"
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


_REASON_SHOWN = 200  # characters of a worker's computer_use reason in a refusal


def _lacks(worker: WorkerRow, asked: Scope) -> str:
    """What the worker's advertisement lacks for `asked`, in one line, or ""."""
    advertised = Advertisement.from_json(worker.advertisement)
    who = f"worker {worker.name} ({worker.id})"
    measured = advertised.capability(capabilities.COMPUTER_USE)
    if measured is not None and not measured.available:
        # The worker wrote the reason (up to the hello's max_reason, 1 KiB by default): a
        # refusal is one line of an owner's terminal, so a longer one is cut.
        said = measured.reason or "it advertised none"
        said = said if len(said) <= _REASON_SHOWN else said[: _REASON_SHOWN - 3] + "..."
        return f"{who} offers no Computer Use: {said}"
    if measured is None:
        return ""  # it has not reported yet: nothing to hold it to
    if not advertised.displays:
        return f"{who} offers no Computer Use: it advertised no display"
    have = {d.index for d in advertised.displays}
    missing = [d for d in asked.displays if d not in have]
    if missing:
        shown = ", ".join(str(d) for d in missing)
        return f"{who} has no display {shown} (it has {len(have)}: {_indexes(sorted(have))})"
    return ""


def _indexes(have: list[int]) -> str:
    return f"display {have[0]}" if len(have) == 1 else f"displays {', '.join(map(str, have))}"


# A desktop run's kind (given to the dispatcher at wiring): it stays open between actions.
DESKTOP_RUNS = RunKind(advance=advance, on_failure=on_failure)


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
        self,
        who: Principal,
        worker_ref: str,
        asked: Scope,
        title: str,
        reason: str,
        *,
        parent: str = "",
        origin: str = "",
    ) -> RunView:
        """A desktop run waiting for a person's approval; with `parent`, a child of that run of
        the owner's (a goal's desktop), `origin` naming the call that asked for it."""
        if len(reason) > 2000 or len(title) > 500:
            raise InvalidArgumentError("reason, title: at most 2000/500 characters")
        refuse_control("title", title)
        refuse_control("reason", reason)
        run_id = new_id("run")
        now = time.time()
        created: list[RunView] = []

        def unit(s: Session, ctx: Context) -> list[Order]:
            created.clear()
            worker = worker_queries.resolve(
                s, worker_ref, ctx.now, revoked_names=who.role is Role.ADMIN
            )
            worker_id = worker.id
            if worker.state == "revoked":
                raise FailedPreconditionError(f"worker {worker_id} is revoked")
            granted = worker.allowed_capabilities  # empty: the token granted every capability
            if granted and capabilities.COMPUTER_USE not in granted:
                raise FailedPreconditionError(
                    f"worker {worker_id} was not enrolled for computer_use: a connected machine"
                    " grants no access"
                )
            # What a connected worker advertised is current: a request it cannot serve is
            # refused now, not approved to fail at the first action. An offline worker's last
            # advertisement may be stale (it can come back with its display): it waits.
            if worker_queries.is_online(s, worker_id, ctx.now):
                lacks = _lacks(worker, asked)
                if lacks:
                    raise FailedPreconditionError(lacks)
            above = owned_run(s, who, parent, lock=True) if parent else None
            run_queries.refuse_stopped_parent(above)
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
                spec={
                    "worker": worker_id,
                    "scope": asked.to_json(),
                    **({"origin": origin} if origin else {}),
                },
                actions_total=0,
                now=now,
                status=RunState.WAITING_FOR_AUTHORITY,
                parent=above,
            )
            s.add(run)
            s.flush()
            if above is not None:
                ledger.record(s, above, ctx, "run.child", child=run_id, kind=KIND, origin=origin)
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
            # Read again under the run's lock: another answer may have committed meanwhile.
            s.refresh(approval)
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
                granted = granted_scope(run, approval, grant)
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

    async def guide_approval(self, who: Principal, approval_id: str, text: str) -> ApprovalRow:
        """Answer a pending approval with guidance, not a grant; the same guidance again from
        the same person is that answer, never a second one."""
        guidance.check_text(text, "", 0)
        answered: list[ApprovalRow] = []
        by = audit.actor(who)

        def unit(s: Session, ctx: Context) -> list[Order]:
            answered.clear()
            approval = queries.approval(s, approval_id)
            if approval is None:
                raise NotFoundError(f"no approval {approval_id!r}")
            asking = s.get(RunRow, approval.run_id)
            # The tree's locks are taken root first, as ending a goal takes them.
            parent_id = asking.parent_id if asking is not None else None
            parent = run_queries.run_for_update(s, parent_id) if parent_id else None
            run = run_queries.run_for_update(s, approval.run_id)
            assert run is not None
            s.refresh(approval)  # under the run's lock: another answer may have committed
            answered.append(approval)
            if (approval.status, approval.answer, approval.answered_by) == (
                ApprovalState.GUIDED,
                text,
                who.id,
            ):
                return []  # sent again: the saved answer stands
            if approval.status != PENDING:
                raise FailedPreconditionError(
                    f"approval {approval_id} is already {approval.status}; a new request is needed"
                )
            if run.status not in ACTIVE:
                raise FailedPreconditionError(f"run {run.id} is {run.status}: nothing to guide")
            audit.record(s, by, "approval.guide", approval.id, run=run.id, text=text)
            approvals.guided(s, run, parent, approval, who, text, ctx)
            s.flush()
            return []

        await self._dispatcher.run_unit(unit)
        return answered[0]

    async def act(
        self,
        who: Principal,
        run_id: str,
        action: str,
        args_json: str,
        timeout: float,  # noqa: ASYNC109
        *,
        origin: str = "",
    ) -> ActResult:
        args = checked_args(action, args_json)
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
                origin=origin,
            )
            s.add(row)
            quotas.charge_text(s, run.owner_id, row.args, row.intent)
            run.actions_total += 1
            made.append(row.id)
            refusal, order = self._admit(s, run, approval, action, args, row, ctx)
            if refusal is not None:
                refuse(s, run, row, refusal, ctx)
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
        refusal = refusal_before_scope(s, run, approval, ctx)
        if refusal is not None or approval is None:
            if refusal is not None and refusal.code == contract.EXPIRED and approval is not None:
                end_expired(s, run, approval, ctx)
            return refusal, None
        worker_id = approval.worker_id
        granted = Scope.from_json(approval.granted)
        refusal = scope.check(
            granted, action, args, display_size(s, worker_id, args.get("display", 0))
        )
        if refusal is not None:
            return refusal, None
        if holder := take_input(s, run, worker_id, ctx):
            held = f"the desktop is controlled by {holder}"
            return Refusal(contract.INPUT_LEASE_HELD, held), None
        if not ctx.is_online(s, worker_id):
            return Refusal(contract.WORKER_OFFLINE, f"worker {worker_id} is not connected"), None
        session = queries.session_of(s, worker_id)
        if approval.session_id and approval.session_id != session:
            why = f"worker {worker_id} lost its coordinator since the approval"
            suspend(s, run, approval, why, contract.REAPPROVAL_NEEDED, ctx)
            ask_again(s, run, approval, why, ctx)
            return Refusal(contract.REAPPROVAL_NEEDED, f"{why}; approve the run again"), None
        values, missing = secrets_for(s, self._box, run.owner_id, args)
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
        grant = grant_for(granted, approval, ctx.now)
        approval.actions_used += 1
        if run.spec.get("resume"):
            row.args = encode_result(dict(args, resume=True))
            run.spec = {k: v for k, v in run.spec.items() if k != "resume"}
        ledger.set_status(s, run, ctx, RunState.RUNNING)
        order = ledger.claim(s, run, row, worker_id, ctx)
        assert isinstance(order, DispatchOrder)
        return None, replace(order, secrets=values, scope=grant)

    async def by_origin(self, who: Principal, run_id: str, origin: str) -> ActResult | None:
        """The act made in the run for `origin` (a goal's tool call), as the ledger has it
        now; None if there is none (the call never became an action)."""

        def unit(s: Session) -> ActResult | None:
            owned_run(s, who, run_id)
            action = run_queries.action_of_origin(s, run_id, origin)
            if action is None:
                return None
            return self._read_outcome(s, who, run_id, action.id)

        return await self._db.read(unit)

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
            approval = queries.latest_approval(s, run.id)
            person = queries.active_takeover(s, approval.worker_id) if approval else None
            if person is not None:
                raise FailedPreconditionError(
                    f"{person.by_name} holds worker {person.worker_id}'s desktop (takeover"
                    f" {person.id}): it goes on when they hand it back (deskfleet desktop"
                    f" handback {person.id})"
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

    async def recording(
        self, who: Principal, run_id: str, after_seq: int, limit: int
    ) -> RecordingPage:
        """The run's recorded frames after `after_seq`, for its owner (as `artifact`)."""
        if after_seq < 0 or limit < 0:
            raise InvalidArgumentError("after_seq, limit: 0 or more")
        size = min(limit or RECORDING_PAGE, RECORDING_PAGE_MAX)

        def unit(s: Session) -> RecordingPage:
            owned_run(s, who, run_id)
            # One more than asked says whether another page follows, without a second count.
            rows = queries.recording_frames(s, run_id, after_seq, size + 1)
            more = len(rows) > size
            shown = tuple(rows[:size])
            return RecordingPage(
                shown, shown[-1].seq if more else 0, queries.recording_count(s, run_id)
            )

        return await self._db.read(unit)

    async def recording_frame(self, who: Principal, run_id: str, seq: int) -> RecordingFrameRow:
        """One recorded frame with its image, for the run's owner (as `artifact`)."""

        def unit(s: Session) -> RecordingFrameRow:
            owned_run(s, who, run_id)
            row = queries.recording_frame(s, run_id, seq)
            if row is None:
                raise NotFoundError(f"run {run_id} has no recorded frame {seq}")
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
