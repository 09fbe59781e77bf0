"""A person's message to a run: its identity, the checks it passes, and its row.

A message has the sender's id: a send retried after an uncertain answer (a timeout, a lost
connection) names the same id and is answered with the message already queued, without a
second row or a second charge to the owner's quota. It may name the run's execution it was
written for, and is refused once the run has moved on (a retry, an adoption, a restart), so
that a correction meant for one attempt does not steer the next. Where it stands afterwards
(queued, delivered and to what, not received) is the ledger's doing (`heart/ledger.py`) and
the goal loop's (`agent/loop.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy.orm import Session

from coordinator.heart import ledger
from coordinator.heart.context import Context
from coordinator.model.identity import Principal
from coordinator.store import quotas, runs as run_queries
from coordinator.store.models import GuidanceRow, RunRow
from shared.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    ResourceExhaustedError,
)
from shared.ids import new_id
from shared.states import RunState
from shared.text import refuse_control

GUIDANCE_CHARS = 4000
GUIDANCE_MESSAGES = 16
GUIDANCE_TOTAL_CHARS = 16000
MESSAGE_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
PREVIEW = 200  # characters of each message in a run's view; the journal holds the rest
# Message ids the coordinator gives the guidance it queues itself: an approval answered with
# guidance, a question answered late. A sender's own id never starts with one.
APPROVAL_PREFIX, ANSWER_PREFIX = "approval-", "answer-"


@dataclass(frozen=True)
class Queued:
    guidance_id: str
    message_id: str
    seq: int
    queued: int  # messages of the run waiting, this one included
    execution: int
    repeated_send: bool  # the message id was queued before: that message is the answer


def check_text(text: str, message_id: str, expected_execution: int) -> None:
    """What can be refused before the store is read."""
    if not text.strip():
        raise InvalidArgumentError("text: guidance must not be empty")
    refuse_control("text", text, multiline=True)
    if len(text) > GUIDANCE_CHARS:
        raise InvalidArgumentError(
            f"text: guidance is at most {GUIDANCE_CHARS} characters (this is {len(text)})"
        )
    if message_id and not MESSAGE_ID.fullmatch(message_id):
        raise InvalidArgumentError(
            "message_id: 1 to 128 of the characters A-Z a-z 0-9 _ . : - (got"
            f" {message_id[:40]!r}{'…' if len(message_id) > 40 else ''})"
        )
    if message_id.startswith((APPROVAL_PREFIX, ANSWER_PREFIX)):
        raise InvalidArgumentError(
            f"message_id: ids starting {APPROVAL_PREFIX!r} or {ANSWER_PREFIX!r} are the"
            " coordinator's own"
        )
    if expected_execution < 0:
        raise InvalidArgumentError(
            f"expected_execution: an execution counts from 1 (0 for the current one), not"
            f" {expected_execution}"
        )


def queue(
    s: Session,
    run: RunRow,
    who: Principal,
    ctx: Context,
    text: str,
    message_id: str,
    expected_execution: int,
) -> Queued:
    """Queue the message on the locked run, or answer with the one this id queued before."""
    if message_id:
        earlier = run_queries.guidance_by_message(s, run.id, message_id)
        if earlier is not None:
            # Same id, same words: the sender's retry. The original stands, wherever it is now.
            if earlier.text != text or earlier.author_id != who.id:
                raise AlreadyExistsError(
                    f"message_id {message_id!r} of run {run.id} was already used for another"
                    " message: choose a new id for a new message"
                )
            return Queued(
                earlier.id,
                message_id,
                earlier.seq,
                len(run_queries.undelivered_guidance(s, run.id)),
                earlier.execution,
                repeated_send=True,
            )
    if run.status in (RunState.SUCCEEDED, RunState.CANCELLED):
        raise FailedPreconditionError(f"run {run.id} is {run.status}: nothing to guide")
    if expected_execution and expected_execution != run.execution:
        raise FailedPreconditionError(
            f"run {run.id} is at execution {run.execution}, not {expected_execution}: it was"
            f" retried or taken over since; read it again (deskfleet runs show {run.id}) and"
            " write for what it does now"
        )
    count, chars = run_queries.guidance_totals(s, run.id)
    if count >= GUIDANCE_MESSAGES:
        raise ResourceExhaustedError(
            f"run {run.id} already has {count} guidance messages (at most"
            f" {GUIDANCE_MESSAGES} per run)"
        )
    if chars + len(text) > GUIDANCE_TOTAL_CHARS:
        raise ResourceExhaustedError(
            f"run {run.id} would exceed {GUIDANCE_TOTAL_CHARS} characters of guidance"
            f" ({chars} used, {len(text)} more asked)"
        )
    quotas.charge_text(s, run.owner_id, text)  # the row; its journal event counts too
    guidance_id = new_id("gdn")
    message_id = message_id or guidance_id
    seq = ledger.record(
        s,
        run,
        ctx,
        "guidance.queued",
        guidance=guidance_id,
        message_id=message_id,
        execution=run.execution,
        by=who.id,
        text=text,
    )
    s.add(
        GuidanceRow(
            id=guidance_id,
            run_id=run.id,
            author_id=who.id,
            text=text,
            created_at=ctx.now,
            delivered_at=None,
            message_id=message_id,
            seq=seq,
            execution=run.execution,
        )
    )
    run_queries.note_guided(s, run.id)
    s.flush()  # the unique (run, message id) index answers a concurrent twin here
    queued = len(run_queries.undelivered_guidance(s, run.id))  # incl. this one
    return Queued(guidance_id, message_id, seq, queued, run.execution, repeated_send=False)
