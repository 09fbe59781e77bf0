"""Peeks: an admin's look at the screen a pending desktop request targets, before answering it.

The coordinator asks the worker that holds the display for one screenshot over the worker's
stream and waits for the answer; nothing is stored but the audit entry, written before the
order leaves, so no screen is ever read without a record of who asked.

A peek is refused while a kill switch applies to the worker or to the request's run: a switch
says "hands off this desktop" until a person releases it, and it is often engaged because a
person has taken the machine over, whose screen is then theirs, not an approver's to watch.
The worker refuses too (its local switch is known only to it).

The answer comes to the replica that holds the worker's stream. A peek asked of another
replica is refused with the name of the one to ask: a screenshot is not relayed through the
store.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from sqlalchemy.orm import Session

from coordinator.model.identity import Principal
from coordinator.runs.desktop.scope import Scope
from coordinator.security import audit
from coordinator.store import Database, desktop as desktop_queries
from coordinator.store.models import ApprovalRow, PresenceRow
from coordinator.streams.presence import Presence, Sent
from shared.errors import FailedPreconditionError, NotFoundError, UnavailableError
from shared.ids import new_id

MAX_BYTES = 4 * 1024 * 1024  # the encoded image: under the stream's 16 MiB message limit
TIMEOUT = 15.0  # a capture and encode of a large display on a busy machine
MEDIA_MAGIC = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff"}


@dataclass(frozen=True)
class PeekOrder:
    """Ask a worker's stream for one screenshot of a display."""

    worker_id: str
    peek_id: str
    display: int
    max_bytes: int


@dataclass(frozen=True)
class PeekAnswer:
    peek_id: str
    media_type: str
    data: bytes
    width: int
    height: int
    error: str = ""
    code: str = ""


@dataclass(frozen=True)
class Peek:
    approval_id: str
    worker_id: str
    display: int
    media_type: str
    data: bytes
    width: int
    height: int
    taken_at: float


@dataclass(frozen=True)
class _Target:
    approval: ApprovalRow
    display: int
    replica: str | None  # where the worker streams, None when it is offline
    kill: str  # why a kill switch stops the peek, or ""


class Peeks:
    def __init__(self, db: Database, presence: Presence, replica: str) -> None:
        self._db = db
        self._presence = presence
        self._replica = replica
        self._waiting: dict[str, tuple[str, asyncio.Future[PeekAnswer]]] = {}

    async def peek(self, who: Principal, approval_id: str) -> Peek:
        by = audit.actor(who)
        target = await self._db.read(lambda s: _target(s, approval_id))
        approval = target.approval
        worker = approval.worker_id
        if target.kill:
            raise FailedPreconditionError(
                f"refused: {target.kill}; no peek at worker {worker}'s screen until it is released"
            )
        if target.replica is None:
            raise UnavailableError(f"worker {worker} is offline: there is no screen to show")
        if target.replica != self._replica:
            raise FailedPreconditionError(
                f"worker {worker} streams to replica {target.replica}: ask that replica"
                f" (this is {self._replica})"
            )
        peek_id = new_id("pk")
        await audit.write(
            self._db,
            by,
            "approval.peek",
            approval.id,
            run=approval.run_id,
            worker=worker,
            display=target.display,
        )
        answer: asyncio.Future[PeekAnswer] = asyncio.get_running_loop().create_future()
        self._waiting[peek_id] = (worker, answer)
        try:
            order = PeekOrder(worker, peek_id, target.display, MAX_BYTES)
            if self._presence.send(worker, order) is not Sent.SENT:
                raise UnavailableError(f"worker {worker} is offline: there is no screen to show")
            try:
                got = await asyncio.wait_for(answer, TIMEOUT)
            except TimeoutError as exc:
                raise UnavailableError(
                    f"worker {worker} sent no screenshot within {TIMEOUT:.0f} s"
                ) from exc
        finally:
            self._waiting.pop(peek_id, None)
        return _checked(got, approval, target.display)

    def on_answer(self, worker_id: str, answer: PeekAnswer) -> None:
        """A worker's answer; one for a peek this replica did not ask of it is dropped."""
        waiting = self._waiting.get(answer.peek_id)
        if waiting is None or waiting[0] != worker_id or waiting[1].done():
            return
        waiting[1].set_result(answer)

    def on_disconnect(self, worker_id: str) -> None:
        for waiter, future in list(self._waiting.values()):
            if waiter == worker_id and not future.done():
                future.set_exception(
                    UnavailableError(f"worker {worker_id} went offline before it answered")
                )


def _target(s: Session, approval_id: str) -> _Target:
    approval = s.get(ApprovalRow, approval_id)
    if approval is None:
        raise NotFoundError(f"approval {approval_id} not found")
    if approval.kind != "desktop":
        raise FailedPreconditionError(f"approval {approval_id} is not a desktop request")
    s.expunge(approval)
    display = Scope.from_json(approval.requested).displays[0]
    presence = s.get(PresenceRow, approval.worker_id)
    kill = ""
    for k in desktop_queries.engaged_kills(s):
        if (
            k.scope == "fleet"
            or (k.scope == "worker" and k.target == approval.worker_id)
            or (k.scope == "run" and k.target == approval.run_id)
        ):
            kill = f"kill switch {k.id} ({k.scope}) is engaged"
            break
    # After the switch: engaging one ends the requests it covers, and it is the better reason.
    if not kill and approval.status != "pending":
        raise FailedPreconditionError(
            f"approval {approval_id} is {approval.status}, not pending: a peek is for"
            " deciding a request"
        )
    return _Target(approval, display, presence.replica if presence else None, kill)


def _checked(got: PeekAnswer, approval: ApprovalRow, display: int) -> Peek:
    """The worker's answer as a peek, or its refusal as one line; a worker is not trusted to
    send what it says it sends."""
    worker = approval.worker_id
    if got.error:
        if got.code == "invalid_argument" or "does not exist" in got.error:
            raise FailedPreconditionError(
                f"display {display} is gone from worker {worker}: {got.error}"
            )
        raise FailedPreconditionError(f"worker {worker} refused the peek: {got.error}")
    magic = MEDIA_MAGIC.get(got.media_type)
    if magic is None or not got.data.startswith(magic):
        raise FailedPreconditionError(
            f"worker {worker} sent no PNG or JPEG image (media type {got.media_type[:40]!r})"
        )
    if len(got.data) > MAX_BYTES:
        raise FailedPreconditionError(
            f"worker {worker} sent {len(got.data)} bytes, over the {MAX_BYTES} byte limit"
        )
    if not (0 < got.width <= 32768 and 0 < got.height <= 32768):
        raise FailedPreconditionError(f"worker {worker} sent a {got.width}x{got.height} image")
    return Peek(
        approval.id,
        worker,
        display,
        got.media_type,
        got.data,
        got.width,
        got.height,
        time.time(),
    )
