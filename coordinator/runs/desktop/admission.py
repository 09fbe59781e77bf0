"""What a desktop action must pass before it is sent: the run holds the desktop's input lease,
its approval allows it now (no kill switch, not suspended, denied or spent, nobody at the
desk), its arguments are the vocabulary's, and the secrets it types exist. An action the
coordinator refuses is finished with a refusal receipt of its own (`refuse`).
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.orm import Session

from coordinator.heart import ledger
from coordinator.heart.context import Context
from coordinator.runs.desktop import scope
from coordinator.runs.desktop.approvals import APPROVED, DENIED, PENDING, SUSPENDED, is_expired
from coordinator.runs.desktop.scope import Scope
from coordinator.security.secret_box import NO_KEY, SecretBox
from coordinator.store import (
    desktop as queries,
    quotas,
    runs as run_queries,
    workers as worker_queries,
)
from coordinator.store.models import (
    ActionRow,
    ApprovalRow,
    InputLeaseRow,
    ReceiptRow,
    RunRow,
    SecretRow,
)
from shared import desktop_scope as contract
from shared.desktop_scope import Refusal
from shared.errors import FailedPreconditionError, InvalidArgumentError
from shared.ids import new_id
from shared.receipts import content_hash, decode_result, encode_result
from shared.states import ACTIVE, ActionState

SECRET_REF = re.compile(r"\{\{secret:([A-Za-z0-9_.-]{1,100})\}\}")
MAX_ARGS_CHARS = 64 * 1024
DEFAULT_ACT_TIMEOUT = 60.0
# A caller may not set these: `resume` is the coordinator's to add after `desktop continue` (it
# lifts the worker's human_active pause), and the scope travels apart (`Dispatch.scope`).
RESERVED_ARGS = ("scope", "resume")


def holds_input(s: Session, run: RunRow, ctx: Context) -> bool:
    if run.status not in ACTIVE:
        return False
    approval = queries.latest_approval(s, run.id)
    return (
        approval is not None and approval.status == APPROVED and not is_expired(approval, ctx.now)
    )


def take_input(s: Session, run: RunRow, worker_id: str, ctx: Context) -> str:
    """Give the run the desktop's input lease; returns who holds it when it is taken (a run,
    or a person who took the desktop over: no run takes it from them)."""
    lease = queries.input_lease(s, worker_id)
    person = queries.active_takeover(s, worker_id)
    if person is not None and (lease is None or lease.run_id != run.id):
        return f"{person.by_name}, who took it over (takeover {person.id})"
    if lease is None:
        s.add(InputLeaseRow(worker_id=worker_id, run_id=run.id, acquired_at=ctx.now))
        ledger.record(s, run, ctx, "input.lease", worker=worker_id)
        return ""
    if lease.run_id == run.id:
        return ""
    holder = s.get(RunRow, lease.run_id)
    if holder is not None and holds_input(s, holder, ctx):
        return f"run {holder.id}"
    lease.run_id, lease.acquired_at = run.id, ctx.now
    ledger.record(
        s, run, ctx, "input.lease", worker=worker_id, previous=holder.id if holder else ""
    )
    return ""


def refusal_before_scope(
    s: Session, run: RunRow, approval: ApprovalRow | None, ctx: Context
) -> Refusal | None:
    if approval is None or approval.status == PENDING:
        detail = f"approval {approval.id} waits for an answer" if approval else "no approval"
        return Refusal(contract.NOT_APPROVED, f"{detail}; nothing runs without one")
    worker_id = approval.worker_id
    kills = queries.kills_applying(s, worker_id, run_queries.lineage(s, run))
    if kills:
        k = kills[0]
        return Refusal(
            contract.KILL_SWITCH, f"kill switch {k.id} ({k.scope}) is engaged: {k.reason}"
        )
    if approval.status == SUSPENDED:
        return Refusal(contract.REAPPROVAL_NEEDED, f"{approval.answer}; approve the run again")
    if approval.status == DENIED:
        return Refusal(contract.DENIED, f"approval {approval.id} was denied: {approval.answer}")
    if is_expired(approval, ctx.now):
        return Refusal(contract.EXPIRED, f"approval {approval.id} has expired")
    if run.waiting_code == contract.HUMAN_ACTIVE:
        return Refusal(contract.HUMAN_ACTIVE, run.waiting_detail)
    granted = Scope.from_json(approval.granted)
    if approval.actions_used >= granted.max_actions:
        return Refusal(
            contract.MAX_ACTIONS_USED, f"the approval's {granted.max_actions} actions are used up"
        )
    return None


def display_size(s: Session, worker_id: str, index: int) -> tuple[int, int] | None:
    worker = worker_queries.worker_by_id(s, worker_id)
    displays = (worker.advertisement or {}).get("displays", []) if worker else []
    for d in displays:
        if d.get("index") == index:
            return int(d["width"]), int(d["height"])
    return None


def secrets_for(
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


def checked_args(action: str, args_json: str) -> dict[str, Any]:
    if action not in contract.ACTIONS:
        raise InvalidArgumentError(
            f"action: unknown {action!r} (known: {', '.join(contract.ACTIONS)})"
        )
    if len(args_json) > MAX_ARGS_CHARS:
        raise InvalidArgumentError(f"args: at most {MAX_ARGS_CHARS} characters")
    args = decode_result(args_json, "args") if args_json else {}
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
    if action == "hold_key":
        scope.check_hold(args)
    return args


def refuse(s: Session, run: RunRow, action: ActionRow, refusal: Refusal, ctx: Context) -> None:
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
