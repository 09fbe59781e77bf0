"""A desktop run's approvals: asked, answered, narrowed, taken back and asked again.

An approval is a person's scoped permission (SPEC §3): it grants what its answer says and
never more, a suspended one is asked again for what it last allowed, and silence never turns
into a yes.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from coordinator.heart import ledger
from coordinator.heart.context import Context
from coordinator.model.identity import Principal
from coordinator.runs import guidance
from coordinator.runs.desktop import scope
from coordinator.runs.desktop.scope import Scope
from coordinator.store.models import ApprovalRow, RunRow
from shared.desktop_scope import Grant, Region
from shared.errors import InvalidArgumentError
from shared.ids import new_id
from shared.states import ACTIVE, ApprovalState, RunState

KIND = "desktop"  # a desktop run's own approval; research asks for a visible browser

PENDING, APPROVED, DENIED, SUSPENDED, EXPIRED = (
    ApprovalState.PENDING,
    ApprovalState.APPROVED,
    ApprovalState.DENIED,
    ApprovalState.SUSPENDED,
    ApprovalState.EXPIRED,
)


def approval_waiting(approval: ApprovalRow) -> tuple[str, str]:
    return (
        ledger.NEEDS_APPROVAL,
        f"approval {approval.id} waits for an answer: "
        + ("desktop control" if approval.kind == KIND else "research in a visible browser")
        + f" on worker {approval.worker_id}, {Scope.from_json(approval.requested).describe()}"
        f" (deskfleet approvals approve {approval.id})",
    )


def is_expired(approval: ApprovalRow, now: float) -> bool:
    return approval.status == EXPIRED or (
        approval.status == APPROVED
        and approval.expires_at is not None
        and now >= approval.expires_at
    )


def end_expired(s: Session, run: RunRow, approval: ApprovalRow, ctx: Context) -> None:
    approval.status = EXPIRED
    ledger.set_status(
        s,
        run,
        ctx,
        RunState.SUCCEEDED,
        stop_reason="scope_expired: the approved time is over; receipts are saved",
    )


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


def guided(
    s: Session,
    run: RunRow,
    parent: RunRow | None,
    approval: ApprovalRow,
    who: Principal,
    text: str,
    ctx: Context,
) -> None:
    """Answer a pending approval with guidance: it grants nothing. The correction goes to the
    run that asked (a goal's desktop run asks for its goal: `parent`), whose next model call
    reads it; the request is asked anew, for its own approval, as it stood."""
    approval.status = ApprovalState.GUIDED
    approval.answer, approval.answered_by, approval.answered_at = text, who.id, ctx.now
    ledger.record(s, run, ctx, "approval.guided", approval=approval.id, by=who.id, text=text)
    target = parent if parent is not None and parent.status in ACTIVE else run
    guidance.queue(
        s,
        target,
        who,
        ctx,
        "The person answered the desktop request with guidance instead of approving it: " + text,
        guidance.APPROVAL_PREFIX + approval.id,
        0,
    )
    ask_again(s, run, approval, "answered with guidance: a corrected request is asked anew", ctx)


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


def granted_scope(
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


def grant_for(granted: Scope, approval: ApprovalRow, now: float) -> Grant:
    assert approval.expires_at is not None
    return granted.grant(
        round(approval.expires_at - now, 3), granted.max_actions - approval.actions_used
    )
