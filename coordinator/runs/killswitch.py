"""The kill switch: engaged for the fleet, one worker or one run; durable, pushed, acknowledged.

Engaging writes the switch first, takes back the approvals it covers (a released switch does
not silently restore control: the runs ask for approval again), then pushes it to every
connected worker it applies to. Workers acknowledge each change; acknowledgements are written
in batches so that a thousand of them cost a few commits. One counts only for a switch that
exists and applies to the worker that sent it, and only once; the others are left out of the
batch's insert (`record_acks`), so that a worker's bad acknowledgement costs no other its own.
An id outside the alphabet of ids (NUL, which PostgreSQL text cannot hold, failed a whole
batch) is dropped as it arrives; should a batch still fail for another reason than the store's
being unavailable, its acknowledgements are recorded one at a time.

A fleet switch is not routed worker by worker: once it is committed, its message is serialized
once and queued on every stream this replica holds (the in-memory session map, taken after the
commit, so a stream opened later reads the switch for its welcome); only workers streaming to
other replicas are named in the transaction, for the relay. `Status` answers counts from the
store, and names at most `LISTED` workers each way; beside the switches, the workers' own
(local) switches as the workers report them (`local`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from coordinator.heart import ledger
from coordinator.heart.context import Context
from coordinator.heart.dispatch import Dispatcher
from coordinator.heart.ingest import Ingest, one_line
from coordinator.model.identity import Principal, Role
from coordinator.model.orders import CancelOrder, KillPush, Order
from coordinator.runs.desktop import approvals as desktop
from coordinator.runs.service import owned_run
from coordinator.security import audit
from coordinator.store import (
    Database,
    desktop as queries,
    quotas,
    runs as run_queries,
    workers as worker_queries,
)
from coordinator.store.models import KillSwitchRow, RunRow
from coordinator.streams.presence import Presence, Sent
from coordinator.streams.worker_bounds import RefusalLog, ids_refusal
from shared.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)
from shared.gen.deskfleet.v1 import worker_pb2
from shared.ids import new_id
from shared.states import ACTIVE, IN_FLIGHT
from shared.text import refuse_control

log = logging.getLogger(__name__)

FLEET, WORKER, RUN = "fleet", "worker", "run"
MAX_REASON = 1000
ACK_BATCH = 1024
LISTED = 100  # workers named per switch and side in a view; the counts are exact


@dataclass(frozen=True)
class KillView:
    """A switch as one caller may see it: an owner sees who engaged or released it only when
    that was the owner."""

    row: KillSwitchRow
    acknowledged: tuple[str, ...]  # at most LISTED, by id
    unacknowledged: tuple[str, ...]  # at most LISTED, by id
    acknowledged_count: int
    unacknowledged_count: int
    engaged_by: str
    released_by: str


def _shown_by(who: Principal, by: str) -> str:
    return by if who.role is Role.ADMIN or by == who.id else ""


def visible(s: Session, who: Principal, kill: KillSwitchRow) -> bool:
    """Whether the caller may see the switch: an admin every one; an owner those that stop
    their work (the fleet's, those of workers their runs asked to control, their runs')."""
    if who.role is Role.ADMIN or kill.scope == FLEET:
        return True
    if kill.scope == WORKER:
        return queries.owner_uses_worker(s, who.id, kill.target)
    return run_queries.run_of_owner(s, kill.target, who.id) is not None


def push_bytes(push: KillPush) -> bytes:
    """The stream message of a kill switch change, serialized: the same for every worker."""
    return worker_pb2.CoordinatorMessage(
        kill=worker_pb2.KillState(
            kill_id=push.kill_id,
            engaged=push.engaged,
            scope=push.scope,
            target=push.target,
            reason=push.reason,
        )
    ).SerializeToString()


def _covered_runs(s: Session, kill: KillSwitchRow) -> list[RunRow]:
    """Active runs the switch takes control from: a run switch's run and its open
    descendants (a goal's desktop child among them), or the desktop runs of the fleet or
    the worker."""
    if kill.scope == RUN:
        run = run_queries.run_for_update(s, kill.target)
        if run is None:
            return []
        below = run_queries.open_descendants(s, run, ACTIVE)
        return [run, *below] if run.status in ACTIVE else below
    rows = queries.approvals_with_status(
        s,
        (desktop.PENDING, desktop.APPROVED, desktop.SUSPENDED),
        worker_id=kill.target if kill.scope == WORKER else "",
    )
    runs = []
    for run_id in dict.fromkeys(a.run_id for a in rows):
        run = run_queries.run_for_update(s, run_id)
        if run is not None and run.status in ACTIVE:
            runs.append(run)
    return runs


def _reached_elsewhere(s: Session, kill: KillSwitchRow, now: float, replica: str) -> set[str]:
    """Online workers the switch applies to, except those a fleet switch reaches on this
    replica's own streams (pushed from the session map after the commit)."""
    if kill.scope == FLEET:
        return set(queries.live_holders(s, now, other_than=replica))
    candidates = {kill.target} if kill.scope == WORKER else queries.workers_of_run(s, kill.target)
    return set(queries.live_holders(s, now, worker_ids=candidates))


def _applies_to(kill: KillSwitchRow, worker_id: str, runs: set[str]) -> bool:
    return (
        kill.scope == FLEET
        or (kill.scope == WORKER and kill.target == worker_id)
        or (kill.scope == RUN and kill.target in runs)
    )


def _engaged_for(
    s: Session, worker_ids: set[str]
) -> tuple[Sequence[KillSwitchRow], dict[str, set[str]]]:
    """The engaged switches, and the runs a run switch could reach each worker through (read
    only when a run switch is engaged)."""
    kills = queries.engaged_kills(s)
    if any(k.scope == RUN for k in kills):
        return kills, queries.runs_of_workers(s, worker_ids)
    return kills, {}


class KillSwitches:
    def __init__(
        self, db: Database, dispatcher: Dispatcher, presence: Presence, replica: str
    ) -> None:
        self._db = db
        self._dispatcher = dispatcher
        self._presence = presence
        self._replica = replica
        self._acks: asyncio.Queue[tuple[str, str, bool, float]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._welcomes: list[tuple[str, asyncio.Future[list[KillSwitchRow]]]] = []
        self._welcome_reads: asyncio.Task[None] | None = None
        self.refused_acks = RefusalLog("kill switch acknowledgements")
        self._ingest = Ingest[tuple[str, str, bool, float]](
            "kill switch acknowledgements", self._record, self._unrecordable
        )

    async def __aenter__(self) -> KillSwitches:
        self._task = asyncio.create_task(self._ack_loop(), name="kill-acks")
        return self

    async def __aexit__(self, *exc: object) -> None:
        tasks = [t for t in (self._task, self._welcome_reads) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def engage(
        self, who: Principal, peer: str, *, worker_id: str, run_id: str, reason: str
    ) -> KillView:
        reason = reason.strip()
        if not reason or len(reason) > MAX_REASON:
            raise InvalidArgumentError(f"reason: say why, in 1-{MAX_REASON} characters")
        refuse_control("reason", reason)
        if worker_id and run_id:
            raise InvalidArgumentError("name a worker or a run, not both")
        scope = RUN if run_id else WORKER if worker_id else FLEET
        if scope != RUN and who.role is not Role.ADMIN:
            raise PermissionDeniedError(
                "only an admin engages the kill switch of the fleet or a worker; an owner may"
                " engage it for one of their runs (--run)"
            )
        pushes: list[KillPush] = []
        made: list[KillSwitchRow] = []

        def unit(s: Session, ctx: Context) -> list[Order]:
            made.clear()
            pushes.clear()
            if scope == RUN and who.role is Role.ADMIN:
                if run_queries.run_for_update(s, run_id) is None:
                    raise NotFoundError(f"no run {run_id!r}")
            elif scope == RUN:
                owned_run(s, who, run_id)
            # A worker named by its name is stored by its id, as workers and their acks know it.
            named = worker_queries.resolve(s, worker_id, ctx.now).id if scope == WORKER else ""
            kill = KillSwitchRow(
                id=new_id("kill"),
                scope=scope,
                target=run_id or named,
                reason=reason,
                engaged_by=who.id,
                engaged_from=peer,
                engaged_at=ctx.now,
                released_at=None,
                released_by="",
                release_reason="",
            )
            s.add(kill)
            # The reason, in the switch and its audit entry, counts for whoever engaged it;
            # a switch is never refused for storage (nothing here asks for the byte check).
            quotas.charge_text(s, who.id, reason, reason)
            audit.record(
                s,
                audit.Actor(who, peer),
                "kill.engage",
                kill.id,
                scope=scope,
                target=kill.target,
                reason=reason,
            )
            orders: list[Order] = []
            why = f"kill switch {kill.id} engaged by {who.name}: {reason}"
            for run in _covered_runs(s, kill):
                ledger.record(
                    s,
                    run,
                    ctx,
                    "kill.engaged",
                    kill=kill.id,
                    scope=scope,
                    target=kill.target,
                    reason=reason,
                    by=who.id,
                    peer=peer,
                )
                approval = queries.latest_approval(s, run.id)
                if approval is not None and approval.status in (desktop.APPROVED, desktop.PENDING):
                    desktop.suspend(
                        s,
                        run,
                        approval,
                        f"{why}; release it, then approve again",
                        "kill_switch",
                        ctx,
                    )
                for action in run_queries.actions_of(s, run.id):
                    if action.status in IN_FLIGHT:
                        orders.append(
                            CancelOrder(action.worker_id, action.id, action.attempt_id, why)
                        )
            for worker in _reached_elsewhere(s, kill, ctx.now, self._replica):
                pushes.append(KillPush(worker, kill.id, True, scope, kill.target, reason))
            made.append(kill)
            return orders + pushes

        await self._dispatcher.run_unit(unit)
        kill = made[0]
        reached = {p.worker_id for p in pushes}
        if scope == FLEET:
            reached |= self._broadcast(KillPush("", kill.id, True, scope, kill.target, reason))
        names = tuple(sorted(reached)[:LISTED])
        return KillView(kill, (), names, 0, len(reached), who.id, "")

    def _broadcast(self, push: KillPush) -> set[str]:
        """Queue a fleet switch change on every stream this replica holds, serialized once.
        Called after the commit: a stream opened from now on reads the switch for its welcome."""
        message = push_bytes(push)
        ids = self._presence.connected_ids()
        return {w for w in ids if self._presence.send(w, message) is Sent.SENT}

    async def release(
        self, who: Principal, *, kill_id: str, worker_id: str, run_id: str, fleet: bool, reason: str
    ) -> list[KillView]:
        if sum(map(bool, (kill_id, worker_id, run_id, fleet))) != 1:
            raise InvalidArgumentError(
                "name exactly one of: a kill switch id, --worker, --run, --fleet"
            )
        if len(reason) > MAX_REASON:
            raise InvalidArgumentError(f"reason: at most {MAX_REASON} characters")
        refuse_control("reason", reason)
        pushes: list[KillPush] = []
        released: list[KillSwitchRow] = []
        by = audit.actor(who)

        def unit(s: Session, ctx: Context) -> list[Order]:
            released.clear()
            pushes.clear()
            named = (
                worker_queries.resolve(
                    s, worker_id, ctx.now, revoked_names=who.role is Role.ADMIN
                ).id
                if worker_id
                else ""
            )
            matching = [
                k
                for k in queries.engaged_kills(s)
                if (
                    k.id == kill_id
                    or (named and k.scope == WORKER and k.target == named)
                    or (run_id and k.scope == RUN and k.target == run_id)
                    or (fleet and k.scope == FLEET)
                )
                and visible(s, who, k)  # another owner's switch is one that does not exist
            ]
            if not matching:
                raise NotFoundError("no engaged kill switch matches")
            for kill in matching:
                if kill.scope == RUN and who.role is not Role.ADMIN:
                    owned_run(s, who, kill.target)
                elif kill.scope != RUN and who.role is not Role.ADMIN:
                    raise PermissionDeniedError(
                        "only an admin releases a fleet or worker kill switch"
                    )
                kill.released_at, kill.released_by, kill.release_reason = ctx.now, who.id, reason
                audit.record(
                    s,
                    by,
                    "kill.release",
                    kill.id,
                    scope=kill.scope,
                    target=kill.target,
                    reason=reason,
                )
                released.append(kill)
                for worker in _reached_elsewhere(s, kill, ctx.now, self._replica):
                    pushes.append(KillPush(worker, kill.id, False, kill.scope, kill.target, reason))
            s.flush()
            for kill in matching:
                for run in _covered_runs(s, kill):
                    ledger.record(
                        s, run, ctx, "kill.released", kill=kill.id, by=who.id, reason=reason
                    )
                    approval = queries.latest_approval(s, run.id)
                    if approval is None or approval.status != desktop.SUSPENDED:
                        continue
                    if queries.kills_applying(s, approval.worker_id, run_queries.lineage(s, run)):
                        continue  # another switch still holds it
                    desktop.ask_again(s, run, approval, f"kill switch {kill.id} released", ctx)
            return list(pushes)

        await self._dispatcher.run_unit(unit)
        for kill in released:
            if kill.scope == FLEET:
                self._broadcast(KillPush("", kill.id, False, kill.scope, kill.target, reason))
        return await self._views(released, who)

    async def status(self, who: Principal, include_released: bool) -> list[KillView]:
        """The switches the caller may see (see `visible`), newest first."""
        rows = await self._db.read(
            queries.kills,
            include_released=include_released,
            owner_id="" if who.role is Role.ADMIN else who.id,
        )
        return await self._views(list(rows), who)

    async def _views(self, rows: Sequence[KillSwitchRow], who: Principal) -> list[KillView]:
        """Counts and at most LISTED names each way, read with a few set-based queries
        (no read of the fleet, nor of every acknowledgement)."""

        def unit(s: Session) -> list[KillView]:
            now = time.time()
            ids = [r.id for r in rows]
            counts = queries.ack_counts(s, ids)
            names = queries.acked_workers(s, ids, LISTED)
            views = []
            for row in rows:
                waiting: list[str]
                engaged = row.released_at is None
                acked = tuple(names.get((row.id, engaged), ()))
                acked_count = counts.get((row.id, engaged), 0)
                if not engaged:
                    # A released switch asks nothing more of anyone: only who confirmed it counts.
                    waiting_count, waiting = 0, []
                elif row.scope == FLEET:
                    waiting_count, waiting = queries.online_unacknowledged(s, row.id, now, LISTED)
                else:
                    expected = _reached_elsewhere(s, row, now, "")
                    missing = sorted(expected - queries.acked_among(s, row.id, expected))
                    waiting_count, waiting = len(missing), missing[:LISTED]
                views.append(
                    KillView(
                        row,
                        acked,
                        tuple(waiting),
                        acked_count,
                        waiting_count,
                        _shown_by(who, row.engaged_by),
                        _shown_by(who, row.released_by),
                    )
                )
            return views

        return await self._db.read(unit)

    async def local(self, who: Principal) -> tuple[int, list[worker_queries.LocalKillRow]]:
        """Workers' own kill switches engaged now, as they report them: how many, and the
        LISTED most recently engaged. An owner sees those of workers their runs asked to
        control, as for a worker switch (`visible`)."""
        owner = "" if who.role is Role.ADMIN else who.id
        return await self._db.read(
            lambda s: worker_queries.local_kills(s, time.time(), LISTED, owner_id=owner)
        )

    async def for_worker(self, worker_id: str) -> list[KillSwitchRow]:
        """Every switch engaged now that applies to this worker (sent with its welcome).

        The welcomes that wait together share one read: a fleet coming back to a restarted
        coordinator costs a few reads, not one per worker. Each read starts after the
        request was queued, so a switch committed before the caller asked is in it."""
        answer: asyncio.Future[list[KillSwitchRow]] = asyncio.get_running_loop().create_future()
        self._welcomes.append((worker_id, answer))
        if self._welcome_reads is None or self._welcome_reads.done():
            self._welcome_reads = asyncio.create_task(self._read_for_welcomes())
        return await answer

    async def _read_for_welcomes(self) -> None:
        while self._welcomes:
            batch, self._welcomes = self._welcomes, []
            try:
                kills, runs = await self._db.read(_engaged_for, {w for w, _ in batch})
            except Exception as exc:
                for _, answer in batch:
                    if not answer.done():
                        answer.set_exception(exc)
                continue
            for worker_id, answer in batch:
                if not answer.done():
                    mine = runs.get(worker_id, set())
                    answer.set_result([k for k in kills if _applies_to(k, worker_id, mine)])

    def on_ack(self, worker_id: str, kill_id: str, engaged: bool) -> None:
        """A worker applied a change; an id no switch could have is dropped here, before it
        costs the store anything or joins a batch."""
        refusal = ids_refusal(kill_id=kill_id)
        if refusal:
            self.refused_acks.note(worker_id, refusal)
            return
        self._acks.put_nowait((kill_id, worker_id, engaged, time.time()))

    async def _ack_loop(self) -> None:
        while True:
            batch = [await self._acks.get()]
            while not self._acks.empty() and len(batch) < ACK_BATCH:
                batch.append(self._acks.get_nowait())
            try:
                await self._ingest(batch)
            except Exception:  # a defect of ours: the next acknowledgements still get in
                log.exception("recording %d kill switch acknowledgements failed", len(batch))

    async def _record(self, batch: Sequence[tuple[str, str, bool, float]]) -> None:
        for worker_id, reason in await self._db.write(record_acks, batch):
            self.refused_acks.note(worker_id, reason)

    def _unrecordable(self, ack: tuple[str, str, bool, float], exc: Exception) -> None:
        self.refused_acks.note(ack[1], f"could not be recorded: {one_line(exc)}")


def record_acks(s: Session, rows: Sequence[tuple[str, str, bool, float]]) -> list[tuple[str, str]]:
    """Record the acknowledgements that count: each for a switch that exists and applies to
    the worker that sent it (a release only once the switch is released), once. The others
    are left out of the insert, so one bad acknowledgement never costs another its place;
    they are returned as (worker id, why)."""
    kills = queries.kills_by_id(s, {kill_id for kill_id, _, _, _ in rows})
    of_run: dict[str, set[str]] = {}  # run switch id -> the workers it reaches

    def reaches(kill: KillSwitchRow, worker_id: str) -> bool:
        if kill.scope != RUN:
            return _applies_to(kill, worker_id, set())
        if kill.id not in of_run:
            of_run[kill.id] = queries.workers_of_run(s, kill.target)
        return worker_id in of_run[kill.id]

    keep: list[tuple[str, str, bool, float]] = []
    refused: list[tuple[str, str]] = []
    for row in rows:
        kill_id, worker_id, engaged, _ = row
        kill = kills.get(kill_id)
        if kill is None:
            refused.append((worker_id, "acknowledged a kill switch that does not exist"))
        elif not engaged and kill.released_at is None:
            refused.append((worker_id, f"acknowledged the release of {kill_id}, still engaged"))
        elif not reaches(kill, worker_id):
            refused.append((worker_id, f"acknowledged {kill_id}, which does not apply to it"))
        else:
            keep.append(row)
    queries.add_acks(s, keep)
    return refused
