"""Takeovers: a person takes a desktop's controls from its agent, and hands them back.

Taking over is durable before any input moves: one transaction writes the takeover row and
pauses the run that holds the worker's input lease as `human_active` (the rule a person at
the desk already follows), journaled on the run. While a takeover is active the run cannot be
continued and no other run takes the desktop; handing back ends it and lets the run go on,
with a journal note of who held it, for how long, what they sent and what they said.

The person's input goes to the worker as `HumanInputNow` orders on its stream, and the worker
runs it through the same input session as the agent's actions: its kill switch (local one
included) and a person at the machine stop it there too. The coordinator refuses it before
that while a kill switch applies. Only the person who took over sends input; an admin may
also hand back anyone's takeover. An owner takes over only a run of theirs that holds a
desktop, and only where the worker's own policy allows it (`--allow-owner-takeover`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from coordinator.heart import ledger
from coordinator.heart.context import Context
from coordinator.heart.dispatch import Dispatcher
from coordinator.model.identity import Principal, Role
from coordinator.model.orders import Order
from coordinator.runs.desktop.approvals import APPROVED
from coordinator.runs.desktop.runs import advance
from coordinator.runs.desktop.scope import Scope
from coordinator.runs.desktop.watches import run_of
from coordinator.security import audit
from coordinator.store import (
    Database,
    desktop as desktop_queries,
    runs as run_queries,
    workers as worker_queries,
)
from coordinator.store.models import InputLeaseRow, PresenceRow, RunRow, TakeoverRow
from coordinator.streams.presence import Presence, Sent
from shared import desktop_scope as contract
from shared.errors import (
    DeskfleetError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnavailableError,
)
from shared.ids import new_id
from shared.states import ACTIVE, RunState

KIND = "desktop"
ACTIVE_TAKEOVER = "active"
HANDED_BACK = "handed_back"
MAX_EVENTS = 64  # per SendInput call
MAX_TEXT = 2000
MAX_NOTE = 2000
EVENT_KINDS = ("move", "down", "up", "click", "scroll", "key", "type")
BUTTONS = ("left", "middle", "right")
INPUT_TIMEOUT = 10.0


@dataclass(frozen=True)
class HumanEvent:
    kind: str
    x: int = 0
    y: int = 0
    button: str = ""
    dx: int = 0
    dy: int = 0
    key: str = ""
    text: str = ""


@dataclass(frozen=True)
class HumanInputOrder:
    worker_id: str
    input_id: str
    takeover_id: str
    display: int
    by_owner: bool
    events: tuple[HumanEvent, ...]


@dataclass(frozen=True)
class InputResult:
    input_id: str
    applied: int
    error: str = ""
    code: str = ""


@dataclass
class _Waiting:
    worker_id: str
    future: asyncio.Future[InputResult] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Takeovers:
    def __init__(
        self, db: Database, dispatcher: Dispatcher, presence: Presence, replica: str
    ) -> None:
        self._db = db
        self._dispatcher = dispatcher
        self._presence = presence
        self._replica = replica
        self._waiting: dict[str, _Waiting] = {}
        self._in_flight: dict[str, asyncio.Event] = {}  # worker id: its batch's answer

    async def take_over(
        self, who: Principal, *, run: str = "", worker: str = "", reason: str = ""
    ) -> TakeoverRow:
        if bool(run) == bool(worker):
            raise InvalidArgumentError("name a run or a worker (one of them)")
        if len(reason) > MAX_NOTE:
            raise InvalidArgumentError(f"reason: at most {MAX_NOTE} characters")
        by = audit.actor(who)
        made: list[TakeoverRow] = []

        def unit(s: Session, ctx: Context) -> list[Order]:
            made.clear()
            worker_id, held, display = _what_to_take(s, who, run, worker)
            presence = s.get(PresenceRow, worker_id)
            if presence is None:
                raise UnavailableError(f"worker {worker_id} is offline: nothing to take over")
            kills = desktop_queries.kills_applying(s, worker_id, [held.id] if held else [])
            if kills:
                k = kills[0]
                raise FailedPreconditionError(
                    f"refused: kill switch {k.id} ({k.scope}) is engaged on worker {worker_id};"
                    " release it before taking the desktop over"
                )
            current = desktop_queries.active_takeover(s, worker_id)
            if current is not None:
                raise FailedPreconditionError(
                    f"worker {worker_id} is already taken over by {current.by_name}"
                    f" (takeover {current.id}, since {_ago(current.started_at, ctx.now)})"
                )
            row = TakeoverRow(
                id=new_id("tk"),
                worker_id=worker_id,
                run_id=held.id if held else "",
                display=display,
                by_id=who.id,
                by_name=who.name,
                by_admin=who.role is Role.ADMIN,
                reason=reason,
                note="",
                status=ACTIVE_TAKEOVER,
                events=0,
                started_at=ctx.now,
                ended_at=None,
            )
            s.add(row)
            if held is not None:
                ledger.record(
                    s, held, ctx, "desktop.takeover", takeover=row.id, by=who.id, reason=reason
                )
                ledger.set_status(
                    s,
                    held,
                    ctx,
                    RunState.WAITING_FOR_AUTHORITY,
                    waiting=(
                        contract.HUMAN_ACTIVE,
                        f"{who.name} took worker {worker_id}'s desktop over (takeover {row.id});"
                        f" input is paused until they hand it back",
                    ),
                )
            audit.record(
                s,
                by,
                "desktop.takeover",
                worker_id,
                takeover=row.id,
                run=row.run_id,
                reason=reason,
            )
            s.flush()
            s.expunge(row)
            made.append(row)
            return []

        await self._dispatcher.run_unit(unit)
        return made[0]

    async def send_input(self, who: Principal, takeover_id: str, events: list[HumanEvent]) -> int:
        """Run the person's events on the desktop; returns how many ran.

        One batch at a time per desktop: the worker runs batches in order, and one queued
        behind another would still type after the person handed back (which waits for the
        batch in flight, and no more can be queued)."""
        checked_events(events)
        row, replica = await self._db.read(lambda s: _held(s, who, takeover_id))
        if replica != self._replica:
            raise FailedPreconditionError(
                f"worker {row.worker_id} streams to replica {replica}: send the input there"
                f" (this is {self._replica})"
            )
        if not events:
            return 0
        if row.worker_id in self._in_flight:
            raise ResourceExhaustedError(
                f"takeover {row.id}: one input batch at a time; send the next when the last"
                " one is answered"
            )
        done = asyncio.Event()
        self._in_flight[row.worker_id] = done
        try:
            return await self._send(row, events)
        finally:
            del self._in_flight[row.worker_id]
            done.set()

    async def _send(self, row: TakeoverRow, events: list[HumanEvent]) -> int:
        input_id = new_id("in")
        waiting = _Waiting(row.worker_id)
        self._waiting[input_id] = waiting
        try:
            order = HumanInputOrder(
                row.worker_id, input_id, row.id, row.display, not row.by_admin, tuple(events)
            )
            if self._presence.send(row.worker_id, order) is not Sent.SENT:
                raise UnavailableError(f"worker {row.worker_id} is offline: the input went nowhere")
            try:
                result = await asyncio.wait_for(waiting.future, INPUT_TIMEOUT)
            except TimeoutError as exc:
                raise UnavailableError(
                    f"worker {row.worker_id} did not answer the input within {INPUT_TIMEOUT:.0f} s"
                ) from exc
        finally:
            self._waiting.pop(input_id, None)
        applied = max(0, min(result.applied, len(events)))
        if applied:
            await self._db.write(lambda s: _count(s, row.id, applied))
        if result.error:
            raise _refusal(row.worker_id, result)
        return applied

    async def hand_back(
        self, who: Principal, *, takeover: str = "", worker: str = "", note: str = ""
    ) -> TakeoverRow:
        if bool(takeover) == bool(worker):
            raise InvalidArgumentError("name a takeover or a worker (one of them)")
        if len(note) > MAX_NOTE:
            raise InvalidArgumentError(f"note: at most {MAX_NOTE} characters")
        by = audit.actor(who)
        ended: list[TakeoverRow] = []
        # A batch on its way still runs on the desktop: the hand back waits for its answer
        # (or its timeout), so that nothing the person sent types after it returns.
        held = await self._db.read(lambda s: _to_hand_back(s, who, takeover, worker, lock=False))
        busy = self._in_flight.get(held.worker_id)
        if busy is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(busy.wait(), INPUT_TIMEOUT + 1.0)

        def unit(s: Session, ctx: Context) -> list[Order]:
            ended.clear()
            orders: list[Order] = []
            row = _to_hand_back(s, who, takeover, worker)
            row.status, row.ended_at, row.note = HANDED_BACK, ctx.now, note
            run = run_queries.run_for_update(s, row.run_id) if row.run_id else None
            if run is not None and run.status in ACTIVE:
                ledger.record(
                    s,
                    run,
                    ctx,
                    "desktop.handback",
                    takeover=row.id,
                    by=who.id,
                    held_by=row.by_id,
                    held_by_name=row.by_name,
                    seconds=round(ctx.now - row.started_at, 3),
                    events=row.events,
                    note=note,
                )
                if run.waiting_code == contract.HUMAN_ACTIVE:
                    # As `desktop continue` does: the worker lifts its own human_active pause
                    # on the next action, and the person's last pointer place is theirs.
                    run.spec = dict(run.spec, resume=True)
                    ledger.set_status(
                        s, run, ctx, RunState.RUNNING, cause=f"handed back by {who.name}"
                    )
                    orders = advance(s, run, ctx)
            audit.record(
                s,
                by,
                "desktop.handback",
                row.worker_id,
                takeover=row.id,
                run=row.run_id,
                events=row.events,
                note=note,
            )
            s.flush()
            s.expunge(row)
            ended.append(row)
            return orders

        await self._dispatcher.run_unit(unit)
        return ended[0]

    async def get(self, who: Principal, takeover_id: str) -> TakeoverRow:
        def unit(s: Session) -> TakeoverRow:
            row = s.get(TakeoverRow, takeover_id[:100])
            if row is None or (row.by_id != who.id and who.role is not Role.ADMIN):
                raise NotFoundError(f"no takeover {takeover_id[:100]!r}")
            s.expunge(row)
            return row

        return await self._db.read(unit)

    def on_result(self, worker_id: str, result: InputResult) -> None:
        waiting = self._waiting.get(result.input_id)
        if waiting is None or waiting.worker_id != worker_id or waiting.future.done():
            return
        waiting.future.set_result(result)

    def on_disconnect(self, worker_id: str) -> None:
        for waiting in list(self._waiting.values()):
            if waiting.worker_id == worker_id and not waiting.future.done():
                waiting.future.set_exception(
                    UnavailableError(f"worker {worker_id} went offline before the input ran")
                )


def checked_events(events: list[HumanEvent]) -> None:
    """The events' shape, before any is sent (the worker checks them again)."""
    if len(events) > MAX_EVENTS:
        raise InvalidArgumentError(f"events: at most {MAX_EVENTS} per call")
    if sum(len(e.text) for e in events) > MAX_TEXT:
        # A batch types in a few seconds at most: a hand back waits for it.
        raise InvalidArgumentError(f"events: at most {MAX_TEXT} characters of text per call")
    for i, e in enumerate(events):
        where = f"events[{i}]"
        if e.kind not in EVENT_KINDS:
            raise InvalidArgumentError(f"{where}.kind: one of {', '.join(EVENT_KINDS)}")
        if not (0 <= e.x <= 32767 and 0 <= e.y <= 32767):
            raise InvalidArgumentError(f"{where}: x and y are pixels of the display, 0..32767")
        if e.button and e.button not in BUTTONS:
            raise InvalidArgumentError(f"{where}.button: one of {', '.join(BUTTONS)}")
        if not (-100 <= e.dx <= 100 and -100 <= e.dy <= 100):
            raise InvalidArgumentError(f"{where}: a scroll is at most 100 clicks")
        if len(e.text) > MAX_TEXT or "\x00" in e.text:
            raise InvalidArgumentError(f"{where}.text: at most {MAX_TEXT} characters, no NUL")
        if len(e.key) > 100:
            raise InvalidArgumentError(f"{where}.key: at most 100 characters")
        if e.kind == "type" and not e.text:
            raise InvalidArgumentError(f"{where}.text: the text to type")
        if e.kind == "key" and not e.key:
            raise InvalidArgumentError(f"{where}.key: the key to press, e.g. Return or ctrl+c")


def _what_to_take(
    s: Session, who: Principal, run: str, worker: str
) -> tuple[str, RunRow | None, int]:
    """The worker, the run that holds its desktop (paused by the takeover), the display."""
    admin = who.role is Role.ADMIN
    if run:
        row = run_of(s, who, run, lock=True)
        if row.kind != KIND:
            raise FailedPreconditionError(f"run {run} is not a desktop run: it has no desktop")
        approval = desktop_queries.latest_approval(s, row.id)
        if approval is None or approval.status != APPROVED or row.status not in ACTIVE:
            raise FailedPreconditionError(
                f"run {run} holds no desktop now (it is {row.status.lower()})"
            )
        worker_id = approval.worker_id
        lease = desktop_queries.input_lease(s, worker_id)
        if lease is None or lease.run_id != row.id:
            raise FailedPreconditionError(
                f"run {run} does not hold worker {worker_id}'s desktop now"
            )
        display = Scope.from_json(approval.granted).displays[0]
        held: RunRow | None = row
    else:
        found = worker_queries.resolve(s, worker, time.time(), revoked_names=admin)
        worker_id = found.id
        lease = desktop_queries.input_lease(s, worker_id)
        held = run_queries.run_for_update(s, lease.run_id) if lease is not None else None
        if held is not None and held.status not in ACTIVE:
            held = None
        if not admin and (held is None or held.owner_id != who.id):
            raise PermissionDeniedError(
                f"only an admin takes worker {worker} over; a run's owner takes over a desktop"
                " run of theirs that holds it"
            )
        approval = desktop_queries.latest_approval(s, held.id) if held is not None else None
        display = Scope.from_json(approval.granted).displays[0] if approval else 0
    if not admin:
        found_worker = worker_queries.worker_by_id(s, worker_id)
        advertisement = (found_worker.advertisement if found_worker else None) or {}
        if not advertisement.get("owner_takeover"):
            raise PermissionDeniedError(
                f"worker {worker_id}'s policy does not let a run's owner take it over (its"
                " operator allows it with `deskfleet-worker run --allow-owner-takeover`);"
                " ask an admin"
            )
    return worker_id, held, display


def _held(s: Session, who: Principal, takeover_id: str) -> tuple[TakeoverRow, str]:
    """The caller's active takeover: only the person who took over sends input."""
    if not takeover_id or len(takeover_id) > 100:
        raise InvalidArgumentError("takeover: a takeover id")
    row = s.get(TakeoverRow, takeover_id)
    if row is None or (row.by_id != who.id and who.role is not Role.ADMIN):
        raise NotFoundError(f"no takeover {takeover_id!r}")
    if row.by_id != who.id:
        raise PermissionDeniedError(
            f"takeover {takeover_id} is {row.by_name}'s: only they send input (an admin may"
            " hand it back)"
        )
    if row.status != ACTIVE_TAKEOVER:
        raise FailedPreconditionError(f"takeover {takeover_id} has ended ({row.status})")
    if not row.by_admin:
        # An owner's right to the desktop is their run's: once it stops holding the desktop
        # (cancelled, finished), their takeover sends nothing more, as their watch ends.
        run = s.get(RunRow, row.run_id) if row.run_id else None
        lease = s.get(InputLeaseRow, row.worker_id)
        if run is None or run.status not in ACTIVE or lease is None or lease.run_id != run.id:
            state = run.status.lower() if run is not None else "gone"
            raise FailedPreconditionError(
                f"takeover {takeover_id}: run {row.run_id} no longer holds worker"
                f" {row.worker_id}'s desktop (it is {state}): hand the desktop back"
            )
    kills = desktop_queries.kills_applying(s, row.worker_id, [row.run_id] if row.run_id else [])
    if kills:
        k = kills[0]
        raise FailedPreconditionError(
            f"refused: kill switch {k.id} ({k.scope}) is engaged: no input reaches worker"
            f" {row.worker_id}, a person's included"
        )
    presence = s.get(PresenceRow, row.worker_id)
    if presence is None:
        raise UnavailableError(f"worker {row.worker_id} is offline: the input went nowhere")
    s.expunge(row)
    return row, presence.replica


def _to_hand_back(
    s: Session, who: Principal, takeover: str, worker: str, *, lock: bool = True
) -> TakeoverRow:
    if takeover:
        if len(takeover) > 100:
            raise InvalidArgumentError("takeover: a takeover id")
        row = s.get(TakeoverRow, takeover, with_for_update=lock)
        if row is None or (row.by_id != who.id and who.role is not Role.ADMIN):
            raise NotFoundError(f"no takeover {takeover!r}")
    else:
        found = worker_queries.resolve(s, worker, time.time(), revoked_names=True)
        row = desktop_queries.active_takeover(s, found.id)
        if row is None or (row.by_id != who.id and who.role is not Role.ADMIN):
            raise NotFoundError(f"worker {worker} is not taken over")
    if row.status != ACTIVE_TAKEOVER:
        raise FailedPreconditionError(f"takeover {row.id} has already ended ({row.status})")
    return row


def _count(s: Session, takeover_id: str, applied: int) -> None:
    row = s.get(TakeoverRow, takeover_id, with_for_update=True)
    if row is not None:
        row.events += applied


def _refusal(worker_id: str, result: InputResult) -> DeskfleetError:
    error = result.error[:1000]
    if result.code == "invalid_argument":
        return InvalidArgumentError(f"worker {worker_id} refused the input: {error}")
    if result.code == "not_allowed":
        return PermissionDeniedError(f"worker {worker_id} refused the input: {error}")
    return FailedPreconditionError(
        f"worker {worker_id} stopped the input after {result.applied} event(s): {error}"
    )


def _ago(then: float, now: float) -> str:
    return f"{max(0, int(now - then))} s ago"
