"""The run tree: a run a goal starts (research, fetch, desktop) is its child, and what
happens to a run happens to its open descendants. Cancelling or abandoning a run, or a goal
ending, ends every descendant still open: its attempts in flight are cancelled, its pending
approvals withdrawn, the desktop input leases it holds given up, and it stops CANCELLED with a
reason naming the ancestor. A desktop run waiting for a lease given up this way is moved on in
the same transaction.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from coordinator.heart import ledger
from coordinator.heart.context import Context
from coordinator.model.orders import CancelOrder, Order
from coordinator.store import desktop as desktop_queries, runs as run_queries
from coordinator.store.models import RunRow
from shared import desktop_scope
from shared.states import ACTIVE, IN_FLIGHT, ActionState, ApprovalState, RunState


def end_descendants(s: Session, run: RunRow, why: str, ctx: Context) -> list[Order]:
    """End the open runs below `run` (`why` says what happened to it): each is CANCELLED with
    a stop reason naming `run`. Returns the cancel orders of their attempts in flight."""
    below = run_queries.open_descendants(s, run, ACTIVE)
    if not below:
        return []
    orders: list[Order] = []
    reason = f"cancelled with its ancestor run {run.id} ({why})"
    for child in below:
        for action in run_queries.actions_of(s, child.id):
            if action.status in IN_FLIGHT:
                orders.append(CancelOrder(action.worker_id, action.id, action.attempt_id, reason))
            elif action.status == ActionState.PENDING:
                action.status = ActionState.CANCELLED
        for approval in desktop_queries.approvals_with_status(
            s, (ApprovalState.PENDING, ApprovalState.APPROVED), run_id=child.id
        ):
            approval.status = ApprovalState.WITHDRAWN
            approval.answer = reason
            ledger.record(s, child, ctx, "approval.withdrawn", approval=approval.id, reason=reason)
        ledger.set_status(s, child, ctx, RunState.CANCELLED, stop_reason=reason)
    return orders + release_leases(s, [c.id for c in below], ctx)


def release_leases(s: Session, run_ids: list[str], ctx: Context) -> list[Order]:
    """Give up the desktop input leases these runs hold, and move on the desktop runs that
    waited for them (they take a lease at their next advance)."""
    freed = desktop_queries.leases_of_runs(s, run_ids)
    if not freed:
        return []
    workers = {lease.worker_id for lease in freed}
    for lease in freed:
        s.delete(lease)
    s.flush()
    orders: list[Order] = []
    for waiting in run_queries.runs_in(s, (RunState.WAITING_FOR_ENVIRONMENT,)):
        if waiting.waiting_code != desktop_scope.INPUT_LEASE_HELD:
            continue
        approval = desktop_queries.latest_approval(s, waiting.id)
        if approval is not None and approval.worker_id in workers:
            locked = run_queries.run_for_update(s, waiting.id)
            if locked is not None:
                orders += ledger.advance(s, locked, ctx)
    return orders
