"""Recordings: what a desktop run's display showed while the run held it, agent and person alike.

The replica that holds a worker's stream records the runs that hold that worker's desktop:
it joins the worker's live feed (the same damage-driven frames viewers get, so a recorded
still screen costs nothing), keeps at most `fps` frames a second (the last frame of a burst
of changes is kept, not dropped: it is what the screen settled on), and writes them in one
transaction a second. Each frame says who held the controls when it was kept (`agent`, or
`person` during a takeover).

Frames are counted in the owner's stored bytes (the quota's limit applies), are capped per
owner (`serve --recording-max-bytes`: past it a run's recording stops, with a journal note
saying so), and are dropped by age (`serve --recording-retention`), giving the bytes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from coordinator.heart import ledger
from coordinator.heart.context import Context
from coordinator.heart.dispatch import Dispatcher
from coordinator.model.orders import Order
from coordinator.runs.desktop.approvals import APPROVED
from coordinator.runs.desktop.scope import Scope
from coordinator.runs.desktop.watches import Frame, Watches
from coordinator.store import Database, desktop as desktop_queries, quotas, runs as run_queries
from coordinator.store.models import (
    InputLeaseRow,
    PresenceRow,
    RecordingFrameRow,
    RunRow,
)
from shared.errors import DeskfleetError
from shared.states import ACTIVE

log = logging.getLogger(__name__)

KIND = "desktop"
DEFAULT_FPS = 2.0
DEFAULT_RETENTION = 30 * 86400.0
DEFAULT_MAX_BYTES = 1024**3  # per owner
RECONCILE_EVERY = 1.0
FLUSH_EVERY = 1.0
SWEEP_EVERY = 60.0
SWEEP_BATCH = 500


@dataclass(frozen=True)
class Held:
    run_id: str
    owner_id: str
    worker_id: str
    display: int


@dataclass(eq=False)
class _Recording:
    held: Held
    queue: asyncio.Queue[Frame | DeskfleetError]
    leave: Callable[[], None]
    task: asyncio.Task[None] | None = None
    pending: list[Frame] = field(default_factory=list)


class Recorder:
    def __init__(
        self,
        db: Database,
        dispatcher: Dispatcher,
        watches: Watches,
        replica: str,
        *,
        fps: float = DEFAULT_FPS,
        retention: float = DEFAULT_RETENTION,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._dispatcher = dispatcher
        self._watches = watches
        self._replica = replica
        self._fps = fps
        self._interval = 1.0 / fps if fps > 0 else 0.0
        self._retention = retention
        self._max_bytes = max_bytes
        self._clock = clock
        self._recording: dict[str, _Recording] = {}  # by run id
        self._stopped: set[str] = set()  # runs whose owner's limit stopped their recording

    @property
    def enabled(self) -> bool:
        return self._interval > 0

    async def run(self) -> None:
        """Reconcile what is recorded with what holds a desktop here, until cancelled."""
        swept = 0.0
        try:
            while True:
                try:
                    await self._reconcile()
                    if self._retention > 0 and self._clock() - swept >= SWEEP_EVERY:
                        swept = self._clock()
                        await self.sweep()
                except DeskfleetError as exc:
                    log.warning("recordings: %s", exc)
                await asyncio.sleep(RECONCILE_EVERY)
        finally:
            for recording in list(self._recording.values()):
                await self._stop(recording)

    async def _reconcile(self) -> None:
        held = {h.run_id: h for h in await self._db.read(self._held_here)}
        for run_id, recording in list(self._recording.items()):
            if run_id not in held or (recording.task is not None and recording.task.done()):
                await self._stop(recording)
        for run_id, h in held.items():
            if run_id in self._recording or run_id in self._stopped:
                continue
            queue: asyncio.Queue[Frame | DeskfleetError] = asyncio.Queue(maxsize=2)
            try:
                leave = self._watches.subscribe(
                    h.worker_id, h.display, queue, max(1.0, self._fps), any_rate=True
                )
            except DeskfleetError as exc:
                log.debug("recording of run %s not started: %s", run_id, exc)
                continue
            recording = _Recording(h, queue, leave)
            recording.task = asyncio.create_task(self._record(recording))
            self._recording[run_id] = recording

    def _held_here(self, s: Session) -> list[Held]:
        """The desktop runs holding a desktop of a worker that streams to this replica, and
        that no kill switch stops (a stopped desktop sends no frames)."""
        rows = s.execute(
            select(InputLeaseRow.worker_id, RunRow)
            .join(RunRow, RunRow.id == InputLeaseRow.run_id)
            .join(PresenceRow, PresenceRow.worker_id == InputLeaseRow.worker_id)
            .where(PresenceRow.replica == self._replica, RunRow.kind == KIND)
        ).all()
        found: list[Held] = []
        for worker_id, run in rows:
            if run.status not in ACTIVE:
                continue
            approval = desktop_queries.latest_approval(s, run.id)
            if approval is None or approval.status != APPROVED:
                continue
            if desktop_queries.kills_applying(s, worker_id, run_queries.lineage(s, run)):
                continue
            display = Scope.from_json(approval.granted).displays[0]
            found.append(Held(run.id, run.owner_id, worker_id, display))
        return found

    async def _record(self, recording: _Recording) -> None:
        """Keep at most one frame per interval; the last of a burst waits for its turn."""
        last_kept = 0.0
        waiting: Frame | None = None
        flushed = self._clock()
        while True:
            timeout = FLUSH_EVERY
            if waiting is not None:
                timeout = max(0.0, min(timeout, last_kept + self._interval - self._clock()))
            got: Frame | DeskfleetError | None = None
            with contextlib.suppress(TimeoutError):
                got = await asyncio.wait_for(recording.queue.get(), timeout)
            if isinstance(got, DeskfleetError):
                log.info("recording of run %s ended: %s", recording.held.run_id, got)
                await self._flush(recording)
                return
            if got is not None and got.seq:
                waiting = got
            now = self._clock()
            if waiting is not None and now - last_kept >= self._interval:
                recording.pending.append(waiting)
                waiting, last_kept = None, now
            if now - flushed >= FLUSH_EVERY and recording.pending:
                flushed = now
                if not await self._flush(recording):
                    return

    async def _flush(self, recording: _Recording) -> bool:
        """Write the frames kept so far; False when the owner's limit stops the recording."""
        frames, recording.pending = recording.pending, []
        if not frames:
            return True
        h = recording.held
        limit = self._max_bytes

        def unit(s: Session, ctx: Context) -> list[Order]:
            used = s.scalar(
                select(func.coalesce(func.sum(RecordingFrameRow.size), 0)).where(
                    RecordingFrameRow.owner_id == h.owner_id
                )
            )
            seq = s.scalar(
                select(func.coalesce(func.max(RecordingFrameRow.seq), 0)).where(
                    RecordingFrameRow.run_id == h.run_id
                )
            )
            total = int(used or 0)
            # Who holds the controls as the frames are written: a second's frames at most
            # are put on the wrong side of a takeover's start or end.
            person = desktop_queries.active_takeover(s, h.worker_id) is not None
            held_by = "person" if person else "agent"
            for kept, frame in enumerate(frames, start=1):
                if limit and total + len(frame.data) > limit:
                    run = run_queries.run_for_update(s, h.run_id)
                    if run is not None:
                        ledger.record(
                            s,
                            run,
                            ctx,
                            "recording.stopped",
                            why=f"the owner's recordings reached {limit} bytes"
                            " (serve --recording-max-bytes)",
                            frames=int(seq or 0) + kept - 1,
                        )
                    self._stopped.add(h.run_id)
                    break
                total += len(frame.data)
                s.add(
                    RecordingFrameRow(
                        run_id=h.run_id,
                        seq=int(seq or 0) + kept,
                        owner_id=h.owner_id,
                        worker_id=h.worker_id,
                        display=h.display,
                        held_by=held_by,
                        captured_at=frame.captured_at,
                        media_type=frame.media_type,
                        width=frame.width,
                        height=frame.height,
                        size=len(frame.data),
                        sha256=hashlib.sha256(frame.data).hexdigest(),
                        data=frame.data,
                        created_at=ctx.now,
                    )
                )
                quotas.charge(s, h.owner_id, len(frame.data))
                quotas.check_stored(s, h.owner_id)
            return []

        try:
            await self._dispatcher.run_unit(unit)
        except DeskfleetError as exc:
            # The owner's stored-bytes quota refused the frames: their runs store no more.
            log.warning("recording of run %s stopped: %s", h.run_id, exc)
            self._stopped.add(h.run_id)
            return False
        return h.run_id not in self._stopped

    async def _stop(self, recording: _Recording) -> None:
        self._recording.pop(recording.held.run_id, None)
        recording.leave()
        if recording.task is not None and not recording.task.done():
            recording.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await recording.task
        with contextlib.suppress(DeskfleetError):
            await self._flush(recording)

    async def sweep(self) -> int:
        """Drop frames older than the retention, giving their bytes back to their owners."""
        cutoff = self._clock() - self._retention
        dropped = 0
        while True:

            def unit(s: Session) -> int:
                rows = s.execute(
                    select(
                        RecordingFrameRow.run_id,
                        RecordingFrameRow.seq,
                        RecordingFrameRow.owner_id,
                        RecordingFrameRow.size,
                    )
                    .where(RecordingFrameRow.created_at < cutoff)
                    .limit(SWEEP_BATCH)
                ).all()
                by_owner: dict[str, int] = {}
                for run_id, seq, owner_id, size in rows:
                    s.execute(
                        delete(RecordingFrameRow).where(
                            RecordingFrameRow.run_id == run_id, RecordingFrameRow.seq == seq
                        )
                    )
                    by_owner[owner_id] = by_owner.get(owner_id, 0) + size
                for owner_id, size in by_owner.items():
                    quotas.charge(s, owner_id, -size)
                return len(rows)

            n = await self._db.write(unit)
            dropped += n
            if n < SWEEP_BATCH:
                return dropped
