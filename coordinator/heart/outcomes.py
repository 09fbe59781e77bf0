"""What a worker's messages mean for the ledger: receipts, starts, reconnects, lost claims.

Like `ledger`, each function runs inside one store transaction and returns the orders to
send once it has committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy.orm import Session

from coordinator.heart import postconditions
from coordinator.heart.ledger import (
    ACTIVE,
    ARCHIVE_OVER,
    DISPATCHED,
    FAILED,
    HAND_BACK_TO_HUMAN,
    IN_FLIGHT,
    PENDING,
    PREVIEW_CHARS,
    RUNNING,
    STARTED,
    UNKNOWN,
    UNKNOWN_OUTCOME,
    Context,
    advance,
    dispatched_as,
    label,
    move,
    record,
    record_refusal,
    set_status,
)
from coordinator.model.orders import CancelOrder, Held, IncomingReceipt, Order, ReceiptVerdict
from coordinator.store import (
    deferred,
    desktop as desktop_queries,
    quotas,
    refusals as refusal_queries,
    runs as run_queries,
)
from coordinator.store.models import ActionRow, ArtifactRow, RunRow
from shared.errors import InvalidArgumentError
from shared.ids import new_id
from shared.receipts import (
    artifact_refs,
    content_hash,
    content_sha256,
    decode_result,
    encode_result,
    encode_with,
)
from shared.states import ActionState
from shared.tracing import TraceParent

NOT_THE_CLAIMANT = "this worker does not hold the claim on the attempt"
MAX_RESULT_REASON = 200  # characters of a result's decoding error in its ReceiptAck
# Artifacts this transaction added, by (run, sha256): two receipts of one batch (or one
# receipt naming the same bytes twice) must not insert the same row twice.
_ARTIFACTS_ADDED = "deskfleet.artifacts_added"


def _refused_report(
    s: Session,
    ctx: Context,
    action: ActionRow,
    report: str,
    code: str,
    worker_id: str,
    attempt_id: str,
    event: str,
    data: dict[str, Any],
) -> None:
    """Note a refused report (for the metrics and the sender's stream); journal it (`event`,
    `data`) only the first time this sender's report on this action is refused for this
    reason, uncharged: a worker repeating itself writes nothing into the run."""
    first = refusal_queries.first_refusal(
        s, action.run_id, action.id, worker_id, f"{report}.{code}", ctx.now
    )
    if first:
        run = run_queries.run_for_update(s, action.run_id)
        assert run is not None
        record_refusal(s, run, ctx, event, **data)
    ctx.notes.refused(report, code, worker_id, action.id, attempt_id, journaled=first)


def _retry(s: Session, run: RunRow, action: ActionRow, cause: str, ctx: Context) -> list[Order]:
    """Put the action back in line (its next claim gets a new epoch) and move the run on."""
    ctx.notes.retried(action.kind, action.status, cause)
    move(action, PENDING, ctx)
    record(s, run, ctx, "action.retry", action=action.id, cause=cause, attempts=action.attempts)
    return advance(s, run, ctx)


def outcome_unknown(
    s: Session,
    run: RunRow,
    action: ActionRow,
    cause: str,
    ctx: Context,
    *,
    let_go: bool = False,
) -> list[Order]:
    """An attempt whose result cannot be known: retry it only if that is safe (SPEC §4.3).
    `let_go`: its worker, connected, has said it no longer runs the attempt, so that a
    non-idempotent action's postcondition may be checked there (heart/postconditions.py)."""
    orders: list[Order] = []
    was_check = action.check_state == postconditions.CHECKING
    if was_check:
        # The check's own outcome is unknown: a person decides. What its attempt still
        # reports (a late receipt, "running" at a reconnect) stays the check's.
        action.check_state = postconditions.CHECK_UNKNOWN
    if action.worker_id and action.status in IN_FLIGHT:
        orders.append(CancelOrder(action.worker_id, action.id, action.attempt_id, cause))
    move(action, UNKNOWN, ctx)
    action.error = cause
    action.lease_expires_at = None
    record(
        s,
        run,
        ctx,
        "action.unknown",
        action=action.id,
        attempt=action.attempt_id,
        epoch=action.epoch,
        cause=cause,
    )
    if run.status not in ACTIVE:
        return orders
    if action.idempotent and action.attempts < ctx.max_attempts:
        return orders + _retry(s, run, action, cause, ctx)
    if action.idempotent:
        set_status(
            s,
            run,
            ctx,
            FAILED,
            stop_reason=(
                f"{label(action)} failed: {action.attempts} attempts exhausted (last: {cause})"
            ),
        )
        return orders
    if was_check:
        cause = f"its postcondition check's outcome is unknown too: {cause}"
    elif let_go and postconditions.checkable(action):
        return orders + postconditions.begin(s, run, action, cause, ctx)
    return orders + postconditions.hand_back(s, run, action, cause, ctx)


def apply_receipt(s: Session, receipt: IncomingReceipt, ctx: Context) -> list[Order]:
    """Record a worker's receipt if its claim is current; then move the run on."""

    def verdict(accepted: bool, reason: str = "") -> ReceiptVerdict:
        ctx.notes.receipt(accepted, reason)
        return ReceiptVerdict(
            receipt.worker_id, receipt.action_id, receipt.attempt_id, accepted, reason
        )

    def refused(reason: str) -> None:
        ctx.notes.refused(
            "receipt", reason, receipt.worker_id, receipt.action_id, receipt.attempt_id
        )

    action = run_queries.action(s, receipt.action_id)
    if action is None or action.run_id != receipt.run_id:
        refused("unknown_action")
        return [verdict(False, "unknown action")]
    run = run_queries.run_for_update(s, action.run_id)
    assert run is not None
    refusal = code = ""
    if action.attempt_id != receipt.attempt_id or action.epoch != receipt.epoch:
        # Fencing: a timed-out or superseded attempt can never write over its successor.
        refusal = f"stale epoch {receipt.epoch}; the current claim is epoch {action.epoch}"
        code = "stale_epoch"
    elif action.worker_id != receipt.worker_id:
        # Attempt ids and epochs are no secret (an owner reads them in GetRun, a worker in its
        # dispatches): only the worker the ledger gave the attempt may report on it.
        refusal, code = NOT_THE_CLAIMANT, "not_claimant"
    if refusal:
        _refused_report(
            s,
            ctx,
            action,
            "receipt",
            code,
            receipt.worker_id,
            receipt.attempt_id,
            "receipt.refused",
            {
                "action": action.id,
                "attempt": receipt.attempt_id,
                "epoch": receipt.epoch,
                "current_epoch": action.epoch,
                "worker": receipt.worker_id,
                "status": receipt.status,
                "reason": refusal,
            },
        )
        return [verdict(False, refusal)]
    if action.receipt_id:
        return [verdict(True, "already recorded")]
    traced = TraceParent.parse(receipt.traceparent) if receipt.traceparent else None
    try:
        # What the coordinator cannot read back (NaN, 1e400, nesting past the parser's
        # depth, an integer of thousands of digits) is this receipt's refusal, never its
        # batch's failure.
        result = decode_result(receipt.result_json) if receipt.result_json else None
        result_text = encode_result(result)  # once, for the body and the journal's size check
        body = encode_with(
            {
                "action": action.id,
                "run": run.id,
                "kind": dispatched_as(action)[0],  # a postcondition's check: the check's kind
                "attempt": action.attempt_id,
                "epoch": action.epoch,
                "worker": receipt.worker_id,
                "status": receipt.status,
                "error": receipt.error,
                "started_at": receipt.started_at,
                "finished_at": receipt.finished_at,
                "fingerprint": action.fingerprint,
                **({"traceparent": traced.header()} if traced is not None else {}),
            },
            "result",
            result_text,
        )
    except InvalidArgumentError as exc:
        refused("bad_result")
        reason = " ".join(f"result_json: {exc.message}".split())
        return [verdict(False, reason[:MAX_RESULT_REASON])]
    receipt_id, sha256 = new_id("rcp"), content_hash(body)
    deferred.add(
        s,
        deferred.RECEIPTS,
        {
            "id": receipt_id,
            "run_id": run.id,
            "action_id": action.id,
            "attempt_id": action.attempt_id,
            "epoch": action.epoch,
            "worker_id": receipt.worker_id,
            "status": receipt.status,
            "body": body,
            "sha256": sha256,
            "created_at": ctx.now,
            "traceparent": traced.header() if traced is not None else "",
        },
    )
    quotas.charge(s, run.owner_id, len(body))
    _keep_artifacts(s, run, receipt, result, ctx)
    entry: dict[str, Any] = {
        "action": action.id,
        "attempt": action.attempt_id,
        "epoch": action.epoch,
        "status": receipt.status,
        "receipt": receipt_id,
        "sha256": sha256,
        "error": receipt.error,
    }
    if traced is not None:
        # The worker's own span of the attempt, to find its side of the trace from here.
        entry["traceId"] = traced.trace_id
        entry["spanId"] = traced.span_id
    if len(result_text) > ARCHIVE_OVER:
        entry["result_preview"] = result_text[:PREVIEW_CHARS]
        entry["incomplete"] = True
        entry["archive"] = {"receipt": receipt_id, "length": len(body)}
    else:
        entry["result"] = result
    action.lease_expires_at = None
    if action.status == ActionState.SKIPPED:
        # Replaced by a revise while its outcome was unknown (only a revise skips a unit that
        # was dispatched): what it did is kept as evidence, but the revised run went on without
        # it. Taken as the action's result, a failure failed the revised run and a success
        # turned the replaced action into a completed one.
        action.receipt_id = receipt_id
        record(s, run, ctx, "receipt", **entry, replaced=True)
        return [verdict(True)]
    if action.check_state in postconditions.CHECK_ATTEMPT:
        # The receipt of its postcondition's check, not of the action: it settles the action.
        action.check_state = postconditions.CHECKING
        record(s, run, ctx, "receipt", **entry, check=True)
        settled = postconditions.settle(
            s, run, action, receipt.status, receipt.error, result, receipt_id, ctx
        )
        return [verdict(True), *settled]
    was_unknown = action.status == UNKNOWN
    succeeded = receipt.status == "succeeded"
    move(action, ActionState.SUCCEEDED if succeeded else ActionState.FAILED, ctx)
    action.finished_at = ctx.now
    action.error = "" if succeeded else (receipt.error or receipt.status)
    action.receipt_id = receipt_id
    ctx.notes.finished(action.kind, receipt.status, ctx.now - (action.dispatched_at or ctx.now))
    record(s, run, ctx, "receipt", **entry)
    if succeeded:
        run.actions_succeeded += 1
    orders: list[Order] = [verdict(True)]
    if was_unknown and run.status == HAND_BACK_TO_HUMAN and run.waiting_code == UNKNOWN_OUTCOME:
        set_status(s, run, ctx, RUNNING, cause=f"the outcome of {label(action)} is now known")
    if run.status not in ACTIVE:
        return orders
    if succeeded:
        hook = ctx.kind(run).on_receipt
        if hook is not None:
            hook(s, run, action, result, ctx)
        return orders + advance(s, run, ctx)
    own = ctx.kind(run).on_failure
    if own is not None:
        return orders + own(s, run, action, ctx)
    retryable = receipt.status != "refused" and action.idempotent
    if retryable and action.attempts < ctx.max_attempts:
        return orders + _retry(s, run, action, action.error, ctx)
    note = f"{action.attempts} attempts" if action.idempotent else "not idempotent: no retry"
    set_status(s, run, ctx, FAILED, stop_reason=f"{label(action)} failed ({note}): {action.error}")
    return orders


def _keep_artifacts(
    s: Session, run: RunRow, receipt: IncomingReceipt, result: Any, ctx: Context
) -> None:
    """Store the receipt's artifacts by sha256, each checked against its bytes."""
    roles = {sha: role for role, sha in artifact_refs(result)}
    added: set[tuple[str, str]] = s.info.setdefault(_ARTIFACTS_ADDED, set())
    for artifact in receipt.artifacts:
        if content_sha256(artifact.data) != artifact.sha256:
            record(
                s,
                run,
                ctx,
                "artifact.refused",
                action=receipt.action_id,
                sha256=artifact.sha256,
                reason="the bytes do not match their sha256",
            )
            continue
        if (run.id, artifact.sha256) in added:
            continue  # added by this transaction, not flushed yet: the store cannot tell
        if desktop_queries.artifact(s, run.id, artifact.sha256) is None:
            added.add((run.id, artifact.sha256))
            s.add(
                ArtifactRow(
                    run_id=run.id,
                    sha256=artifact.sha256,
                    action_id=receipt.action_id,
                    role=roles.get(artifact.sha256, "artifact"),
                    media_type=artifact.media_type,
                    size=len(artifact.data),
                    width=artifact.width,
                    height=artifact.height,
                    data=artifact.data,
                    created_at=ctx.now,
                )
            )
            quotas.charge(s, run.owner_id, len(artifact.data))


def apply_started(
    s: Session, worker_id: str, action_id: str, attempt_id: str, ctx: Context
) -> list[Order]:
    """A worker has recorded its attempt and is about to act: the claim's lease runs on. A
    start of an attempt that has moved on since changes nothing (it arrived late); one from a
    worker that does not hold the claim is journaled as refused (the first time) and changes
    nothing either. Each is noted as a refused report."""
    action = run_queries.action(s, action_id)
    if action is None:
        ctx.notes.refused("start", "unknown_action", worker_id, action_id, attempt_id)
        return []
    if action.worker_id != worker_id:
        _refused_report(
            s,
            ctx,
            action,
            "start",
            "not_claimant",
            worker_id,
            attempt_id,
            "started.refused",
            {
                "action": action.id,
                "attempt": attempt_id,
                "worker": worker_id,
                "reason": NOT_THE_CLAIMANT,
            },
        )
        return []
    if action.attempt_id != attempt_id or action.status != DISPATCHED:
        ctx.notes.refused("start", "not_in_flight", worker_id, action_id, attempt_id)
        return []
    run = run_queries.run_for_update(s, action.run_id)
    assert run is not None
    move(action, STARTED, ctx)
    action.lease_expires_at = ctx.now + ctx.lease_ttl
    record(s, run, ctx, "action.started", action=action.id, attempt=attempt_id, worker=worker_id)
    return []


def _send_again(
    s: Session, run: RunRow, action: ActionRow, cause: str, ctx: Context
) -> list[Order]:
    move(action, PENDING, ctx)
    action.lease_expires_at = None
    record(
        s, run, ctx, "action.redispatch", action=action.id, attempt=action.attempt_id, cause=cause
    )
    return advance(s, run, ctx)


def resend_unsent(
    s: Session, run: RunRow, action_id: str, attempt_id: str, ctx: Context
) -> list[Order]:
    """An attempt claimed before its worker's current stream opened was not sent on it: send
    it again, unless it has moved on since (the connect's reconcile sent it again already, or
    it finished): the attempt id says which."""
    action = s.get(ActionRow, action_id)
    if action is None or action.status != DISPATCHED or action.attempt_id != attempt_id:
        return []
    return _send_again(s, run, action, "the attempt was claimed before the worker reconnected", ctx)


class Reconnect(NamedTuple):
    """A worker's connect, as the ledger reconciles it."""

    worker_id: str
    held: Sequence[Held]  # what its hello says it holds
    opened_at: float  # when its new stream began taking orders (see `Presence.send`)


def reconcile_workers(s: Session, connects: Sequence[Reconnect], ctx: Context) -> list[Order]:
    """Compare the ledger with what (re)connecting workers say they hold (at most one entry
    per worker). What the ledger holds for all of them is locked and read at once, then each
    is reconciled in turn."""
    ledger = run_queries.lock_for_reconnects(s, [c.worker_id for c in connects])
    orders: list[Order] = []
    for connect in connects:
        orders += _reconcile_worker(s, connect, ctx, ledger[connect.worker_id])
    return orders


def _reconcile_worker(
    s: Session, connect: Reconnect, ctx: Context, ledger: run_queries.HeldByWorker
) -> list[Order]:
    worker_id, held, opened_at = connect
    by_action = {h.action_id: h for h in held}
    orders: list[Order] = []
    current: set[tuple[str, str]] = set()
    # Read before the workers reconciled ahead of this one: what they changed (a run handed
    # back, its attempts ended) is in these same rows, and is skipped. Attempts claimed after
    # the new stream opened were sent on it (`Presence.send`): the hello could not list them,
    # sending them again would run them twice, and there is nothing to recover (nor to count).
    in_flight = [
        a
        for a in ledger.in_flight
        if a.worker_id == worker_id
        and a.status in IN_FLIGHT
        and (a.dispatched_at is None or a.dispatched_at < opened_at)
    ]
    unknown = [a for a in ledger.unknown if a.worker_id == worker_id and a.status == UNKNOWN]
    for action in in_flight:
        run = run_queries.run_for_update(s, action.run_id)
        assert run is not None
        h = by_action.get(action.id)
        if h is not None and h.attempt_id == action.attempt_id:
            current.add((h.action_id, h.attempt_id))
            if h.state == "interrupted":
                orders += outcome_unknown(
                    s, run, action, "the worker stopped during the attempt", ctx, let_go=True
                )
            else:
                action.lease_expires_at = ctx.now + ctx.lease_ttl
            continue
        if action.status == DISPATCHED:
            # The worker never recorded this attempt, so it never acted on it: send it again.
            orders += _send_again(s, run, action, "the worker never received the attempt", ctx)
        else:
            why = "the worker no longer knows the attempt"
            orders += outcome_unknown(s, run, action, why, ctx, let_go=True)
    ctx.notes.recovered("reconnect", [a.status for a in in_flight])
    for action in unknown:
        # The ledger gave up on an attempt that the worker still runs: the outcome will be
        # known after all, so take the attempt back instead of cancelling it.
        h = by_action.get(action.id)
        if h is None or h.attempt_id != action.attempt_id or h.state != "running":
            continue
        run = run_queries.run_for_update(s, action.run_id)
        assert run is not None
        current.add((h.action_id, h.attempt_id))
        move(action, STARTED, ctx)
        if action.check_state == postconditions.CHECK_UNKNOWN:
            action.check_state = postconditions.CHECKING  # the check runs after all
        action.lease_expires_at = ctx.now + ctx.lease_ttl
        ctx.notes.recovered("reconnect", [action.status])
        record(
            s,
            run,
            ctx,
            "action.resumed",
            action=action.id,
            attempt=action.attempt_id,
            cause="the worker still runs the attempt",
        )
        if run.status == HAND_BACK_TO_HUMAN and run.waiting_code == UNKNOWN_OUTCOME:
            set_status(s, run, ctx, RUNNING, cause=f"{label(action)} is running after all")
    for h in held:
        if h.state == "running" and (h.action_id, h.attempt_id) not in current:
            orders.append(
                CancelOrder(
                    worker_id,
                    h.action_id,
                    h.attempt_id,
                    "a newer claim or a decision supersedes this attempt",
                )
            )
    return orders


def expire(
    s: Session, action: ActionRow, cause: str, ctx: Context, *, recovery: str = ""
) -> list[Order]:
    """Finalize an attempt whose lease or timeout ran out, if it is still the current one;
    `recovery` names the recovery path that found it, for the metrics."""
    run = run_queries.run_for_update(s, action.run_id)
    assert run is not None
    s.refresh(action)
    if action.status not in IN_FLIGHT:
        return []
    orders = outcome_unknown(s, run, action, cause, ctx)
    if recovery:
        ctx.notes.recovered(recovery, [action.status])
    return orders
