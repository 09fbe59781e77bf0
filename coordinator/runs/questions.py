"""The questions goals ask people: a row each, so that neither the question nor its answer
lives only in the process that waits.

A goal's `ask_human` call makes one row, keyed by its call id: a goal rebuilt after a restart
or taken over by another replica runs the open call again and finds the same row (answered:
the answer is the call's result; open: it waits again), never a second question. A required
question holds the goal `WAITING_FOR_AUTHORITY` until a person answers; an optional one lets
the work go on at `expires_at`, and an answer after that joins the goal's next model call as
guidance. A question of a goal that stopped expires with it. Silence is never an answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from coordinator.heart import ledger
from coordinator.heart.context import Context
from coordinator.heart.dispatch import Dispatcher
from coordinator.model.identity import Principal
from coordinator.model.orders import Order
from coordinator.runs import guidance
from coordinator.store import Database, questions as question_queries, quotas, runs as run_queries
from coordinator.store.models import QuestionRow, RunRow
from shared.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
)
from shared.ids import new_id
from shared.states import ACTIVE, QuestionState
from shared.text import refuse_control, storable

QUESTION_CHARS = 2000  # what a model asks; longer is cut (it is the model's text, not a person's)
# Questions one goal may ask: each is a row and a line in its owner's list, and a model once
# asked without end (many calls to a turn). A run's view shows them all (SHOWN_PER_RUN).
QUESTIONS_PER_GOAL = 50
# Of a question quoted in its late answer's guidance: the goal has the question in full, and
# quoted whole with its characters escaped (2,000 tag characters are 20,000 of escapes) the
# message passed the run's guidance limit, so that no late answer could be taken.
QUOTED_CHARS = 200
LIST_LIMIT = 100
LIST_MAX = 500
SHOWN_PER_RUN = 50


def ask(
    s: Session,
    run: RunRow,
    ctx: Context,
    call_id: str,
    text: str,
    *,
    required: bool,
    wait: float,
) -> QuestionRow:
    """The question of this call: made now (and journaled), or the one it made before."""
    found = question_queries.of_call(s, run.id, call_id)
    if found is not None:
        if (
            found.status == QuestionState.OPEN
            and found.expires_at is not None
            and found.expires_at <= ctx.now
        ):
            ledger.expire_question(
                s, run, ctx, found, "its time passed while the goal was not running"
            )
        return found
    if question_queries.count_of_run(s, run.id) >= QUESTIONS_PER_GOAL:
        raise TooManyQuestions(
            f"this goal has asked {QUESTIONS_PER_GOAL} questions, at most {QUESTIONS_PER_GOAL}"
            " questions per goal: go on with what you know, or stop and say what you need"
        )
    question = QuestionRow(
        id=new_id("qst"),
        run_id=run.id,
        owner_id=run.owner_id,
        call_id=call_id,
        text=storable(text[:QUESTION_CHARS]),
        required=required,
        status=QuestionState.OPEN,
        asked_at=ctx.now,
        expires_at=None if required else ctx.now + wait,
        answer="",
        answered_by="",
        answered_at=None,
        guidance_id="",
    )
    s.add(question)
    ledger.record(
        s,
        run,
        ctx,
        "goal.question",
        question=question.id,
        call=call_id,
        text=question.text,
        required=required,
    )
    return question


class TooManyQuestions(ResourceExhaustedError):
    """The goal asked its last question: the call is the model's error, and no row."""


def take_answer(
    s: Session, run: RunRow, ctx: Context, question_id: str, seen: Sequence[str]
) -> QuestionRow | None:
    """The question once answered: by `questions answer`, or by guidance a person sent the goal
    (`runs guide` answers a run's open question, as it always has; `seen` are the messages
    already in the conversation). None while it is open."""
    question = question_queries.question_for_update(s, question_id)
    if question is None or question.status == QuestionState.EXPIRED:
        return question
    if question.status == QuestionState.ANSWERED:
        return question
    # A person's own guidance only: the coordinator's (a late answer to another question, an
    # approver's correction) once answered whatever question was open, in another's words.
    # Those reach the goal's next model call as they are.
    messages = [
        m
        for m in run_queries.undelivered_guidance(s, run.id)
        if m.id not in seen
        and not (m.message_id or "").startswith((guidance.ANSWER_PREFIX, guidance.APPROVAL_PREFIX))
    ]
    if not messages:
        return None
    for message in messages:
        ledger.delivered(message, f"the answer to question {question.id}", ctx.now)
    _answered(
        s,
        run,
        ctx,
        question,
        "\n".join(m.text for m in messages),
        messages[0].author_id,
        via=[m.id for m in messages],
    )
    return question


def _answered(
    s: Session,
    run: RunRow,
    ctx: Context,
    question: QuestionRow,
    text: str,
    by: str,
    *,
    via: Sequence[str] = (),
) -> None:
    question.status = QuestionState.ANSWERED
    question.answer, question.answered_by, question.answered_at = text, by, ctx.now
    ledger.record(
        s,
        run,
        ctx,
        "question.answered",
        question=question.id,
        call=question.call_id,
        by=by,
        text=text,
        **({"guidance": list(via)} if via else {}),
    )


class Questions:
    """`questions list` and `questions answer`."""

    def __init__(self, db: Database, dispatcher: Dispatcher) -> None:
        self._db = db
        self._dispatcher = dispatcher

    async def list(
        self, who: Principal, run_id: str, *, include_closed: bool, limit: int
    ) -> list[QuestionRow]:
        if limit < 0 or limit > LIST_MAX:
            raise InvalidArgumentError(f"limit: 0 (for {LIST_LIMIT}) to {LIST_MAX}, not {limit}")

        def unit(s: Session) -> list[QuestionRow]:
            if run_id and run_queries.run_of_owner(s, run_id, who.id) is None:
                raise NotFoundError(f"no run {run_id!r}")
            return list(
                question_queries.listed(
                    s,
                    owner_id=who.id,
                    run_id=run_id,
                    open_only=not include_closed,
                    limit=limit or LIST_LIMIT,
                )
            )

        return await self._db.read(unit)

    async def answer(self, who: Principal, question_id: str, text: str) -> QuestionRow:
        guidance.check_text(text, "", 0)
        result: list[QuestionRow] = []

        def unit(s: Session, ctx: Context) -> list[Order]:
            result.clear()
            question = question_queries.question_for_update(s, question_id)
            if question is None or question.owner_id != who.id:
                # Another owner's question is indistinguishable from one that does not exist.
                raise NotFoundError(f"no question {question_id!r}")
            run = run_queries.run_for_update(s, question.run_id)
            assert run is not None
            result.append(question)
            if question.status == QuestionState.ANSWERED:
                if question.answer == text and question.answered_by == who.id:
                    return []  # the same answer sent again: it stands as it is
                raise FailedPreconditionError(
                    f"question {question.id} was already answered; send more with"
                    f" deskfleet runs guide {run.id} TEXT"
                )
            if question.status == QuestionState.OPEN:
                quotas.charge_text(s, run.owner_id, text)
                _answered(s, run, ctx, question, text, who.id)
                return []
            if question.required or run.status not in ACTIVE:
                raise FailedPreconditionError(
                    f"question {question.id} expired: its goal is {run.status}; nothing can take"
                    " an answer now"
                )
            # Optional and past its time while the goal goes on: the answer joins its next
            # model call, as guidance that says what it answers.
            queued = guidance.queue(
                s,
                run,
                who,
                ctx,
                f"The answer to your question {_quoted(question.text)}: {text}",
                guidance.ANSWER_PREFIX + question.id,
                0,
            )
            question.guidance_id = queued.guidance_id
            _answered(s, run, ctx, question, text, who.id, via=[queued.guidance_id])
            return []

        await self._dispatcher.run_unit(unit)
        return result[0]


def _quoted(question: str) -> str:
    quoted = repr(question)
    return quoted if len(quoted) <= QUOTED_CHARS else quoted[: QUOTED_CHARS - 1] + "…"


def check_question_id(question_id: str) -> str:
    if not question_id.strip():
        raise InvalidArgumentError("id: a question id is required (deskfleet questions list)")
    refuse_control("id", question_id)
    if len(question_id) > 64:
        raise InvalidArgumentError("id: a question id is at most 64 characters")
    return question_id
