"""Research's last route: the same fetches in a visible browser on an enrolled desktop.

A connected desktop grants nothing by itself. The first unit that reaches this route asks for
an approval (kind `research`) for one eligible desktop; while it waits, the run waits for
authority. Once approved, units go to that desktop with `visible: true` until the approval
expires, is used up, is taken back by a kill switch, or was denied: then the units left are
skipped with the reason and the report keeps what the run gathered.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from coordinator.heart import ledger
from coordinator.heart.context import Context
from coordinator.model import capabilities
from coordinator.model.workers import WorkerView
from coordinator.runs.desktop import approvals as desktop
from coordinator.runs.desktop.scope import Scope
from coordinator.store import desktop as queries, runs as run_queries
from coordinator.store.models import ActionRow, ApprovalRow, RunRow
from shared.advertisement import HEADLESS_NOT_GRANTED
from shared.receipts import decode_result, encode_result
from shared.states import ActionState

KIND = "research"
DEFAULT_TTL = 1800.0
DEFAULT_UNITS = 50
Route = tuple[str | None, str, str]


def _desktops(s: Session, labels: dict[str, str], ctx: Context) -> list[WorkerView]:
    return sorted(
        (
            v
            for v in ctx.fleet(s)
            if v.offers(capabilities.COMPUTER_USE)
            and _has_browser(v)
            and all(v.labels.get(k) == val for k, val in labels.items())
        ),
        key=lambda v: (not v.online, v.id),
    )


def _has_browser(view: WorkerView) -> bool:
    """Whether Chromium launches on this desktop, as its headless probe measured: the visible
    browser is the same one. Measured, not granted: a token may grant a desktop Computer Use
    only and the fallback still uses its browser (such a worker does not launch Chromium to
    measure what it may not offer, and says that Chromium is installed); one run with
    --no-headless has none."""
    measured = view.advertisement.capability(capabilities.HEADLESS)
    return measured is not None and (measured.available or measured.reason == HEADLESS_NOT_GRANTED)


def _research_approval(s: Session, run: RunRow) -> ApprovalRow | None:
    approval = queries.latest_approval(s, run.id)
    return approval if approval is not None and approval.kind == KIND else None


def route(
    s: Session, run: RunRow, action: ActionRow, wanted: dict[str, Any], ctx: Context
) -> Route:
    """A desktop worker for the unit, or why not yet (waiting) or never (skipped)."""
    approval = _research_approval(s, run)
    if approval is None:
        found = _desktops(s, wanted.get("labels") or {}, ctx)
        if not found:
            why = "no desktop offers computer_use with a working browser for the fallback"
            return None, "no_eligible_worker", why
        asked = Scope(("browser",), (0,), None, DEFAULT_TTL, DEFAULT_UNITS)
        approval = desktop.new_approval(
            run,
            found[0].id,
            asked.to_json(),
            f"research fallback for {run.title!r}: no browser route could take the fetches",
            ctx.now,
            KIND,
        )
        s.add(approval)
        ledger.record(
            s, run, ctx, "approval.requested", approval=approval.id, worker=found[0].id, kind=KIND
        )
        return None, ledger.NEEDS_APPROVAL, desktop.approval_waiting(approval)[1]
    if approval.status == desktop.PENDING:
        return None, ledger.NEEDS_APPROVAL, desktop.approval_waiting(approval)[1]
    if approval.status == desktop.SUSPENDED:
        return None, "kill_switch", approval.answer
    if approval.status == desktop.DENIED:
        return _skip(s, run, action, f"the desktop fallback was denied: {approval.answer}", ctx)
    kills = queries.kills_applying(s, approval.worker_id, run_queries.lineage(s, run))
    if kills:
        return None, "kill_switch", f"kill switch {kills[0].id} is engaged: {kills[0].reason}"
    granted = Scope.from_json(approval.granted)
    if approval.expires_at is not None and ctx.now >= approval.expires_at:
        approval.status = desktop.EXPIRED
        return _skip(s, run, action, "the desktop fallback's approval has expired", ctx)
    if approval.actions_used >= granted.max_actions:
        return _skip(
            s, run, action, f"the desktop fallback's {granted.max_actions} pages are used up", ctx
        )
    if not ctx.is_online(s, approval.worker_id):
        return None, "no_eligible_worker", f"the approved desktop {approval.worker_id} is offline"
    approval.actions_used += 1
    args = decode_result(action.args)
    if not args.get("visible"):
        action.args = encode_result({**args, "visible": True})
    action.route = {"worker": approval.worker_id, "capability": capabilities.COMPUTER_USE}
    return approval.worker_id, "", ""


def _skip(s: Session, run: RunRow, action: ActionRow, why: str, ctx: Context) -> Route:
    action.status, action.error, action.finished_at = ActionState.SKIPPED, why, ctx.now
    ledger.record(s, run, ctx, "research.skipped", work_unit=action.id, reason=why)
    return None, ActionState.SKIPPED, why
