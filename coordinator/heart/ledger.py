"""The action ledger's rules, applied inside one store transaction each.

Everything here is synchronous and runs on a store thread with the run row locked. Each
function returns the orders (dispatches, cancels, receipt verdicts) to send once the
transaction has committed: nothing reaches a worker before the ledger says so durably.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from coordinator.heart.context import (
    ACTIVE as ACTIVE,
    ARCHIVE_OVER as ARCHIVE_OVER,
    CANCELLED as CANCELLED,
    DISPATCHED as DISPATCHED,
    DONE as DONE,
    FAILED as FAILED,
    FINISHED as FINISHED,
    HAND_BACK_TO_HUMAN as HAND_BACK_TO_HUMAN,
    IN_FLIGHT as IN_FLIGHT,
    MAX_PER_WORKER as MAX_PER_WORKER,
    NEEDS_APPROVAL as NEEDS_APPROVAL,
    PENDING as PENDING,
    PREVIEW_CHARS as PREVIEW_CHARS,
    RUNNING as RUNNING,
    SKIPPED as SKIPPED,
    STARTED as STARTED,
    STOPPED_FOR_A_PERSON as STOPPED_FOR_A_PERSON,
    SUCCEEDED as SUCCEEDED,
    UNKNOWN as UNKNOWN,
    UNKNOWN_OUTCOME as UNKNOWN_OUTCOME,
    WAITING_FOR_AUTHORITY as WAITING_FOR_AUTHORITY,
    WAITING_FOR_ENVIRONMENT as WAITING_FOR_ENVIRONMENT,
    WORKERS_BUSY as WORKERS_BUSY,
    Context as Context,
    OpenStage,
)
from coordinator.model.orders import (
    DispatchOrder,
    Order,
)
from coordinator.model.workers import WorkerView, view_of
from coordinator.store import (
    journal,
    questions as question_queries,
    runs as run_queries,
    workers as worker_queries,
)
from coordinator.store.models import ActionRow, GuidanceRow, QuestionRow, RunRow
from coordinator.streams import worker_index
from shared.action_kinds import APP_RESEARCH
from shared.ids import new_id
from shared.receipts import decode_result, encode_result, fingerprint
from shared.states import GuidanceState, QuestionState


def record(s: Session, run: RunRow, ctx: Context, event: str, **data: Any) -> int:
    ctx.touched.add(run.id)
    return journal.append(s, run, event, data)


def record_refusal(s: Session, run: RunRow, ctx: Context, event: str, **data: Any) -> int:
    """Journal a worker's refused report: a worker's doing, so not charged to the run's owner
    (who can do nothing about it)."""
    ctx.touched.add(run.id)
    return journal.append(s, run, event, data, charge=False)


def set_status(
    s: Session,
    run: RunRow,
    ctx: Context,
    status: str,
    *,
    stop_reason: str = "",
    waiting: tuple[str, str] = ("", ""),
    cause: str = "",
) -> None:
    if (run.status, run.stop_reason, run.waiting_code, run.waiting_detail) == (
        status,
        stop_reason,
        *waiting,
    ):
        return
    ctx.notes.state_change(s, run, status, stop_reason, waiting[0], ctx.now)
    if status not in ACTIVE:
        run.queued_at = None  # a stopped run leaves the line
        ctx.stopped.add(run.id)
        _not_received(s, run, ctx, status)
        if run.kind == "goal":
            for question in question_queries.open_of_run(s, run.id):
                expire_question(s, run, ctx, question, f"the goal stopped {status}")
    run.status, run.stop_reason = status, stop_reason
    run.waiting_code, run.waiting_detail = waiting
    run.state_since = ctx.now
    record(
        s,
        run,
        ctx,
        "run.state",
        status=status,
        stop_reason=stop_reason,
        waiting={"code": waiting[0], "detail": waiting[1]},
        cause=cause,
    )


def label(action: ActionRow) -> str:
    return f"action {action.idx} ({action.kind}, {action.id})"


def move(action: ActionRow, status: str, ctx: Context) -> None:
    """Change an action's status; an attempt leaving or entering flight frees or takes its
    worker's slot in the transaction's count, so that the slot is given out at once."""
    was, now = action.status in IN_FLIGHT, status in IN_FLIGHT
    action.status = status
    if was and not now:
        ctx.slot_changed(action.worker_id, -1)
    elif now and not was:
        ctx.slot_changed(action.worker_id, +1)


def queue(run: RunRow, ctx: Context) -> None:
    """Put the run in line for a worker slot; a run already in line keeps its place."""
    if run.queued_at is None:
        run.queued_at = ctx.next_position()
    ctx.queued[run.id] = None


# ---------------------------------------------------------------------------------- advancing


@dataclass(frozen=True)
class Stage:
    """The run's current stage: the units that can be dispatched now, and what came before."""

    pending: list[ActionRow]
    in_flight: int
    ready_at: float  # when the stage could start: for the dispatch latency metric


def read_stages_ahead(s: Session, run_ids: Collection[str], ctx: Context) -> None:
    """Read the open stage, and the stage after it, of many runs at once (the runs a batch of
    receipts names, the runs the line serves next): their `open_stage` calls in this
    transaction then read nothing. Runs whose stage this transaction knows are not read."""
    added = run_queries.units_added(s)
    unknown = [r for r in run_ids if (k := ctx._stages.get(r)) is None or k.added != added]
    for run_id, found in run_queries.open_stages_of(s, unknown).items():
        ctx._stages[run_id] = OpenStage(
            found.stage,
            found.rows,
            found.finished_before or 0.0,
            added,
            (found.next_stage, found.next_rows),
        )


def new_run_stages(s: Session, run: RunRow, rows: Sequence[ActionRow], ctx: Context) -> None:
    """A run written in this transaction: its open stage is its lowest, read from the rows
    just added instead of from the store (two statements saved on every submission), and the
    run neither locked nor looked up for guidance again (`run_queries.hold_new_run`)."""
    run_queries.hold_new_run(s, run)
    stages = sorted({a.stage for a in rows})
    if not stages:
        return
    of = {
        stage: sorted((a for a in rows if a.stage == stage), key=lambda a: a.idx)
        for stage in stages[:2]
    }
    following = (stages[1], of[stages[1]]) if len(stages) > 1 else (None, ())
    ctx._stages[run.id] = OpenStage(
        stages[0], of[stages[0]], 0.0, run_queries.units_added(s), following
    )


def open_stage(s: Session, run: RunRow, ctx: Context) -> Stage | None:
    """The run's current stage if it has units to dispatch; otherwise finish or stop the run
    when that is due, and None.

    Reads one stage's rows, not the whole run: the store names the lowest stage it has not seen
    done, and stages are then checked upwards on the session's rows, which hold this
    transaction's own changes (a batch of receipts runs without autoflush).

    Within a transaction the stage found is kept (`Context._stages`) and checked upwards from
    there the next time: the run is locked, so its rows change only through this session, and a
    unit that is done stays done. A receipt's `advance` and the run's turn in line then share
    one read, and a batch of receipts reads its runs' stages ahead, all at once
    (`read_stages_ahead`). A unit added to the session makes what was kept stale.
    """
    stage, rows, ready = _current_stage(s, run, ctx)
    if stage is None:
        hook = ctx.kind(run).on_completion
        said = hook(s, run, run_queries.actions_of(s, run.id), ctx) if hook is not None else None
        set_status(s, run, ctx, SUCCEEDED, stop_reason=said or "completed: every action succeeded")
        return None
    current = [a for a in rows if a.status not in DONE]
    stuck = next((a for a in current if a.status not in (PENDING, *IN_FLIGHT)), None)
    if stuck is not None:  # an UNKNOWN or FAILED unit left in an active run: stop safely
        set_status(s, run, ctx, FAILED, stop_reason=f"{label(stuck)} is {stuck.status.lower()}")
        return None
    pending = [a for a in current if a.status == PENDING]
    if not pending:
        return None
    return Stage(pending, len(current) - len(pending), ready)


def _current_stage(
    s: Session, run: RunRow, ctx: Context
) -> tuple[int | None, Sequence[ActionRow], float]:
    """The run's lowest stage with a unit not done, its rows, and when the stages before it
    were done."""
    added = run_queries.units_added(s)
    known = ctx._stages.get(run.id)
    following: tuple[int | None, Sequence[ActionRow]] | None = None
    if known is not None and known.added == added:
        stage, rows, ready, following = known.stage, known.rows, known.ready, known.next
    else:
        stage, finished_before = run_queries.first_open_stage(s, run.id)
        ready = finished_before or 0.0
        rows = run_queries.stage_actions(s, run.id, stage) if stage is not None else ()
    ready = max(run.created_at, ready)
    while stage is not None and all(a.status in DONE for a in rows):
        ready = max([ready, *(a.finished_at or 0.0 for a in rows)])
        if following is not None:  # read ahead: the store's next stage, no unit added since
            (stage, rows), following = following, None
            continue
        stage = run_queries.next_stage(s, run.id, stage)
        rows = run_queries.stage_actions(s, run.id, stage) if stage is not None else ()
    ctx._stages[run.id] = OpenStage(stage, rows, ready, added, following)
    return stage, rows, ready


def advance(s: Session, run: RunRow, ctx: Context) -> list[Order]:
    """Move the run on: finish it, stop it at a limit, or put it in line for worker slots.

    Slots are given out by `slots.serve` at the end of the transaction, oldest place in line
    first, so that a run whose receipt just came in does not take the slot it freed ahead of
    runs that have waited longer.
    """
    if run.status not in ACTIVE:
        return []
    own = ctx.kind(run).advance
    if own is not None:
        return own(s, run, ctx)
    if open_stage(s, run, ctx) is None or _budget_stop(s, run, ctx):
        run.queued_at = None
        return []
    _deliver_guidance(s, run, ctx)
    queue(run, ctx)
    return []


def dispatch_one(s: Session, run: RunRow, ctx: Context) -> tuple[list[Order], bool]:
    """Dispatch one pending unit of the run's stage, if a worker can take it: the run's turn
    in line. Returns the orders and whether the run still has units waiting for a slot."""
    if run.status not in ACTIVE:
        return [], False
    stage = open_stage(s, run, ctx)
    if stage is None or _budget_stop(s, run, ctx):
        run.queued_at = None
        return [], False
    route = ctx.kind(run).route or _plain_route
    skipped = False
    for i, action in enumerate(stage.pending):
        worker, code, detail = route(s, run, action, ctx)
        if code == SKIPPED:
            skipped = True
            continue
        if worker is None:
            if not stage.in_flight:
                set_status(
                    s,
                    run,
                    ctx,
                    WAITING_FOR_AUTHORITY if code == NEEDS_APPROVAL else WAITING_FOR_ENVIRONMENT,
                    waiting=(code, detail),
                    cause=f"no route for {label(action)}",
                )
            if skipped:  # hooks may have finished the stage or added units: look again
                return dispatch_one(s, run, ctx)
            return [], True
        order = claim(s, run, action, worker, ctx, max(stage.ready_at, action.finished_at or 0.0))
        set_status(s, run, ctx, RUNNING)
        # Later stages wait for this one's receipts, which put the run in line again.
        return [order], i < len(stage.pending) - 1
    # Every pending unit was skipped: the stage may be over now, or hooks may have added units.
    return dispatch_one(s, run, ctx) if skipped else ([], False)


def new_action(
    run_id: str,
    idx: int,
    stage: int,
    kind: str,
    args: dict[str, Any],
    *,
    idempotent: bool,
    route: dict[str, Any],
    intent: str,
    timeout: float,
    origin: str = "",
    postcondition: dict[str, Any] | None = None,
) -> ActionRow:
    """A PENDING ledger entry: written before anything is sent anywhere; `origin` names what
    asked for it beyond its run (a goal's tool call, `GOAL_RUN/CALL_ID`), `postcondition` the
    check that settles its unknown outcome (heart/postconditions.py)."""
    return ActionRow(
        id=new_id("act"),
        run_id=run_id,
        idx=idx,
        stage=stage,
        kind=kind,
        intent=intent or kind,
        args=encode_result(args),
        fingerprint=fingerprint(kind, args),
        idempotent=idempotent,
        route=route,
        status=PENDING,
        worker_id="",
        attempt_id="",
        epoch=0,
        attempts=0,
        timeout_seconds=timeout,
        error="",
        origin=origin,
        receipt_id="",
        postcondition=encode_result(postcondition) if postcondition else "",
        check_state="",
    )


# An action whose current attempt runs its postcondition's check (heart/postconditions.py).
CHECKING = "checking"
# The check's attempt is the action's claim, and its outcome is not known: a person decides,
# but the check's late receipt (or its worker still running it) is the check's, never the
# action's.
CHECK_UNKNOWN = "check_unknown"


def dispatched_as(action: ActionRow) -> tuple[str, str, bool]:
    """What an attempt of the action sends, (kind, args JSON, idempotent): the action's, or
    its postcondition's check while it is checking (read-only, so harmless to run again)."""
    if action.check_state not in (CHECKING, CHECK_UNKNOWN) or not action.postcondition:
        return action.kind, action.args, action.idempotent
    check = decode_result(action.postcondition)
    return str(check["kind"]), encode_result(check["args"]), True


def claim(
    s: Session,
    run: RunRow,
    action: ActionRow,
    worker_id: str,
    ctx: Context,
    ready_at: float | None = None,
) -> Order:
    action.attempt_id = new_id("att")
    action.epoch += 1
    action.attempts += 1
    action.worker_id = worker_id
    move(action, DISPATCHED, ctx)
    action.dispatched_at = ctx.now
    action.lease_expires_at = ctx.now + ctx.lease_ttl
    action.error = ""
    action.receipt_id = ""  # the receipt of an earlier attempt stays in the receipts table
    action.finished_at = None
    run.attempts_used += 1
    kind, args, idempotent = dispatched_as(action)
    record(
        s,
        run,
        ctx,
        "action.dispatched",
        action=action.id,
        index=action.idx,
        kind=kind,
        attempt=action.attempt_id,
        epoch=action.epoch,
        worker=worker_id,
        attempt_number=action.attempts,
    )
    return DispatchOrder(
        worker_id,
        action.id,
        run.id,
        action.attempt_id,
        action.epoch,
        action.attempts,
        kind,
        args,
        idempotent,
        action.timeout_seconds,
        ctx.now if ready_at is None else ready_at,
        trace_id=run.trace_id,
        dispatched_at=ctx.now,
    )


def _budget_stop(s: Session, run: RunRow, ctx: Context) -> bool:
    """Apply the hard limits and the extendable estimate; True when the run had to stop."""
    limits = run.limits
    elapsed = ctx.now - run.created_at
    if run.attempts_used >= limits["max_actions"]:
        set_status(
            s,
            run,
            ctx,
            FAILED,
            stop_reason=(
                f"budget_exhausted: the action limit ({limits['max_actions']} attempts) is reached;"
                " results are saved"
            ),
        )
        return True
    if elapsed >= limits["max_seconds"]:
        set_status(
            s,
            run,
            ctx,
            FAILED,
            stop_reason=(
                f"budget_exhausted: the time limit ({limits['max_seconds']:.0f} s) is reached;"
                " results are saved"
            ),
        )
        return True
    over_actions = run.attempts_used >= run.estimate_actions
    over_time = elapsed >= run.estimate_seconds
    if not (over_actions or over_time):
        return False
    progress = run.actions_succeeded > run.successes_at_extension
    if run.extensions < 3 and progress:
        run.extensions += 1
        run.successes_at_extension = run.actions_succeeded
        if over_actions:
            run.estimate_actions = min(
                limits["max_actions"], run.estimate_actions + limits["estimate_actions"]
            )
        if over_time:
            run.estimate_seconds = min(
                limits["max_seconds"], run.estimate_seconds + limits["estimate_seconds"]
            )
        record(
            s,
            run,
            ctx,
            "budget.extended",
            extension=run.extensions,
            estimate_actions=run.estimate_actions,
            estimate_seconds=run.estimate_seconds,
            succeeded=run.actions_succeeded,
        )
        return False
    why = (
        "3 extensions are spent"
        if run.extensions >= 3
        else "no new successful receipt since the last extension"
    )
    set_status(
        s,
        run,
        ctx,
        HAND_BACK_TO_HUMAN,
        stop_reason=f"estimate_exhausted: the estimate is spent and {why}",
        waiting=(
            "estimate_exhausted",
            "continue (runs continue) to keep working within the original limits, guide it"
            " (runs guide) to change direction and go on, or stop (runs stop) here;"
            " results are saved",
        ),
    )
    return True


def _deliver_guidance(s: Session, run: RunRow, ctx: Context) -> None:
    """Queued guidance reaches the run at this boundary: before its next dispatch."""
    pending: Sequence[GuidanceRow] = run_queries.undelivered_guidance(s, run.id)
    for message in pending:
        to = f"the action boundary after {run.actions_succeeded} of {run.actions_total} actions"
        seq = record(
            s, run, ctx, "guidance.delivered", guidance=message.id, text=message.text, to=to
        )
        delivered(message, f"{to} (journal #{seq})", ctx.now)


def delivered(message: GuidanceRow, to: str, now: float) -> None:
    """The message reached the run through `to` (what took it: a boundary, a model call)."""
    message.status, message.delivered_at, message.delivered_to = GuidanceState.DELIVERED, now, to


def expire_question(s: Session, run: RunRow, ctx: Context, question: QuestionRow, why: str) -> None:
    """An open question no answer can reach any more: its time passed, or its goal stopped."""
    if question.status != QuestionState.OPEN:
        return
    question.status = QuestionState.EXPIRED
    record(s, run, ctx, "question.expired", question=question.id, why=why)


def _not_received(s: Session, run: RunRow, ctx: Context, status: str) -> None:
    """The run stopped before any boundary took these messages: they say so, rather than
    wait for a later execution written after them (a message sent to a stopped run waits
    for its retry)."""
    for message in run_queries.undelivered_guidance(s, run.id):
        why = f"the run stopped {status} before a boundary took it"
        message.status, message.delivered_to = GuidanceState.NOT_RECEIVED, why
        record(s, run, ctx, "guidance.not_received", guidance=message.id, why=why)


def _plain_route(
    s: Session, run: RunRow, action: ActionRow, ctx: Context
) -> tuple[str | None, str, str]:
    return choose_worker(s, action, ctx)


def choose_worker(s: Session, action: ActionRow, ctx: Context) -> tuple[str | None, str, str]:
    """The least busy eligible online worker (on any replica), or why there is none."""
    route: dict[str, Any] = action.route
    wanted_worker = route.get("worker") or ""
    labels: dict[str, str] = route.get("labels") or {}
    capability = route.get("capability") or ""
    # A research app is offered by the workers that advertise it, not by every worker.
    app = str(decode_result(action.args).get("app", "")) if action.kind == APP_RESEARCH else ""
    fleet = ctx.fleet(s)
    if wanted_worker:
        view = fleet.get(wanted_worker) or _enrolled(s, wanted_worker, ctx)
        if view is None:
            return None, "no_eligible_worker", f"worker {wanted_worker} is not enrolled"
        if view.state == "revoked":
            return None, "no_eligible_worker", f"worker {wanted_worker} is revoked"
        if view.state == "draining":
            return None, "worker_draining", f"worker {wanted_worker} is draining"
        eligible: Sequence[WorkerView] = (
            [view] if worker_index.routable(view, capability, labels, app) else []
        )
        online = int(view.online)
    else:
        eligible = fleet.eligible(capability, labels, app)
        online = fleet.online
    busy = ctx.busy(s)
    # Eligible workers come by id: the first idle one is the least busy (ties go to the
    # lowest id), found without looking at the rest when the fleet has room.
    best = next((v for v in eligible if not busy.get(v.id)), None)
    if best is None and eligible:
        least = min(eligible, key=lambda v: (busy.get(v.id, 0), v.id))
        best = least if busy.get(least.id, 0) < MAX_PER_WORKER else None
    if best is None:
        needs = []
        if capability:
            needs.append(f"capability {capability}")
        if labels:
            needs.append("labels " + ",".join(f"{k}={v}" for k, v in sorted(labels.items())))
        if app:
            needs.append(f"research app {app}")
        if wanted_worker:
            needs.insert(0, f"worker {wanted_worker}")
        what = " and ".join(needs) or "any worker"
        if eligible:
            return (
                None,
                WORKERS_BUSY,
                f"needs {what}: all {len(eligible)} eligible worker(s) are busy"
                f" ({MAX_PER_WORKER} attempts each); in line for the next free slot",
            )
        return (
            None,
            "no_eligible_worker",
            f"needs {what}: none online and eligible ({online} online)",
        )
    # The claim takes the slot (`move`), so that a route that is not used takes nothing.
    return best.id, "", ""


def _enrolled(s: Session, worker_id: str, ctx: Context) -> WorkerView | None:
    """A worker the index does not hold: enrolled here or elsewhere and never connected since
    this replica last read the fleet. Offline either way; read for the reason given."""
    row = worker_queries.worker_by_id(s, worker_id)
    return view_of(row, None, ctx.now) if row is not None else None
