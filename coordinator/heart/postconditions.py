"""Postconditions: a read-only check that settles a non-idempotent action's unknown outcome
instead of a person (the seed's ledger: "if it can be queried, observe the postcondition").

A plan action may carry `{"kind", "args", "expect"}` with a read-only kind
(`shared.action_kinds.READ_ONLY_KINDS`, checked at submit). When its outcome becomes unknown
because its worker said it no longer runs the attempt (the worker restarted mid-action, or
does not know the attempt), the check is claimed on that same worker as the action's next
attempt (a new epoch fences off the old one):

- its result holds `expect` (`action_kinds.expected`): the effect is there, the action counts
  as SUCCEEDED, journaled `action.observed`, never run again;
- it does not: the effect never happened (`action.absent`) and the action goes back in line to
  run once more;
- the check fails, or its own outcome is unknown: the run is handed back as before, saying so.

An outcome unknown for any other reason (a lease that lapsed, a timeout) is not checked: the
attempt may still be running there, and a check could look before it acts. A person decides,
as without a postcondition.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from coordinator.heart import ledger
from coordinator.heart.context import Context
from coordinator.model.orders import Order
from coordinator.store.models import ActionRow, RunRow
from shared import action_kinds
from shared.receipts import decode_result
from shared.states import ActionState, RunState

CHECKING = ledger.CHECKING  # the check's attempt is the action's current claim
CHECK_UNKNOWN = ledger.CHECK_UNKNOWN  # ... and its outcome is unknown
CHECK_ATTEMPT = (CHECKING, CHECK_UNKNOWN)  # the action's claim is its check's attempt
OBSERVED = "observed"  # the check found the effect: done, not run again
ABSENT = "absent"  # the check found no effect: it may run once more


def of(action: ActionRow) -> dict[str, Any] | None:
    """The action's postcondition, or None."""
    if not action.postcondition:
        return None
    found: dict[str, Any] = decode_result(action.postcondition)
    return found


def begin(s: Session, run: RunRow, action: ActionRow, cause: str, ctx: Context) -> list[Order]:
    """Claim the action's check on the worker that had it (the caller knows that worker has
    let the attempt go and is connected)."""
    check = of(action)
    assert check is not None
    action.check_state = CHECKING
    ledger.record(
        s,
        run,
        ctx,
        "action.check",
        action=action.id,
        kind=check["kind"],
        worker=action.worker_id,
        cause=cause,
    )
    return [ledger.claim(s, run, action, action.worker_id, ctx)]


def checkable(action: ActionRow) -> bool:
    return bool(action.postcondition) and action.check_state not in CHECK_ATTEMPT


def settle(
    s: Session,
    run: RunRow,
    action: ActionRow,
    status: str,
    error: str,
    result: Any,
    receipt_id: str,
    ctx: Context,
) -> list[Order]:
    """The check's receipt is in: the action is observed done, goes back to run once, or the
    run is handed back because the check could not tell."""
    check = of(action)
    assert check is not None
    expect = check["expect"]
    if status != "succeeded":
        action.check_state = ""
        ledger.move(action, ActionState.UNKNOWN, ctx)
        action.error = f"its postcondition check {check['kind']} {status}: {error or status}"
        return hand_back(s, run, action, action.error, ctx)
    if action_kinds.expected(expect, result):
        action.check_state = OBSERVED
        ledger.move(action, ActionState.SUCCEEDED, ctx)
        action.finished_at = ctx.now
        action.error = ""
        action.receipt_id = receipt_id
        run.actions_succeeded += 1
        ledger.record(
            s,
            run,
            ctx,
            "action.observed",
            action=action.id,
            kind=check["kind"],
            result=result,
            expect=expect,
            receipt=receipt_id,
        )
        if run.status == RunState.HAND_BACK_TO_HUMAN and run.waiting_code == ledger.UNKNOWN_OUTCOME:
            ledger.set_status(s, run, ctx, RunState.RUNNING, cause="its postcondition held")
        return ledger.advance(s, run, ctx) if run.status in ledger.ACTIVE else []
    action.check_state = ABSENT
    ledger.move(action, ActionState.PENDING, ctx)
    action.error = ""
    ledger.record(
        s,
        run,
        ctx,
        "action.absent",
        action=action.id,
        kind=check["kind"],
        result=result,
        expect=expect,
        receipt=receipt_id,
    )
    return ledger.advance(s, run, ctx) if run.status in ledger.ACTIVE else []


def hand_back(s: Session, run: RunRow, action: ActionRow, cause: str, ctx: Context) -> list[Order]:
    """The unknown outcome goes to a person, as it does without a postcondition."""
    if run.status not in ledger.ACTIVE:
        return []
    what = ledger.label(action)
    ledger.set_status(
        s,
        run,
        ctx,
        RunState.HAND_BACK_TO_HUMAN,
        stop_reason=(
            f"{ledger.UNKNOWN_OUTCOME}: {what} is not idempotent and its outcome is unknown"
            f" ({cause}); it is not retried blindly"
        ),
        waiting=(
            ledger.UNKNOWN_OUTCOME,
            f"check whether {what} took effect, then retry or abandon the run",
        ),
    )
    return []
