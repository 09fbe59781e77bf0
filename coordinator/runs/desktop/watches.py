"""Live views: a desktop's screen as it changes, fanned out from one worker feed to its viewers.

A worker sends a frame only when its screen changed (`WatchScreenNow` / `ScreenFrame` on its
own outbound stream: nothing listens on a worker). One feed per (worker, display, rate,
quality) serves every viewer of it, the recorder included, so a second viewer costs the
worker nothing. A new viewer is given the feed's latest frame at once.

Who may watch is decided here, not by the page: an admin any desktop worker; a run's owner a
worker whose desktop a run of theirs holds, while it holds it (checked again every few
seconds). A watch is refused while a kill switch applies to the worker, as a peek is: a
stopped desktop may be a person's now. Every viewing is audited when it starts and when it
ends (who, which worker and display, from, until, frames sent).

Viewers are long-lived streams with limits of their own: `per_client` per (principal,
console session), `per_principal` in all, `per_worker` per worker. A viewer slower than the
feed loses frames, never the newest: its queue holds the two latest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from coordinator.model.identity import Principal, Role
from coordinator.runs.desktop.approvals import APPROVED
from coordinator.runs.desktop.scope import Scope
from coordinator.security import audit
from coordinator.store import (
    Database,
    desktop as desktop_queries,
    runs as run_queries,
    workers as worker_queries,
)
from coordinator.store.models import PresenceRow, RunRow
from coordinator.streams.presence import Presence, Sent
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
from shared.states import ACTIVE

log = logging.getLogger(__name__)

KIND = "desktop"
DEFAULT_FPS = 10.0
MAX_FPS = 30.0
DEFAULT_QUALITY = 70
MAX_FRAME_BYTES = 4 * 1024 * 1024  # under the stream's 16 MiB message limit
MAX_SIDE = 32768
KEEPALIVE = 5.0  # seconds without a frame before a viewer is sent a keepalive
RECHECK = 5.0  # seconds between two checks that an owner may still watch
FIRST_FRAME_TIMEOUT = 15.0  # the worker's first grab and encode on a busy machine
DEFAULT_PER_CLIENT = 2
DEFAULT_PER_PRINCIPAL = 8
DEFAULT_PER_WORKER = 16
JPEG = b"\xff\xd8\xff"


@dataclass(frozen=True)
class WatchOrder:
    """Start (or stop) a worker's feed of one display."""

    worker_id: str
    watch_id: str
    display: int
    max_fps: float
    quality: int
    max_bytes: int
    stop: bool = False


@dataclass(frozen=True)
class Frame:
    seq: int  # 0: a keepalive, no image
    media_type: str
    data: bytes
    width: int
    height: int
    captured_at: float  # the worker's clock
    received_at: float  # this replica's clock
    worker_id: str = ""
    display: int = 0


@dataclass(frozen=True)
class Target:
    worker_id: str
    display: int
    run_id: str  # the run through which an owner watches; "" for an admin by worker
    owner_watch: bool  # the caller is not an admin: may watch only while the run holds it
    replica: str  # the replica the worker streams to


@dataclass(eq=False)
class _Feed:
    key: tuple[str, int, float, int]
    watch_id: str
    viewers: set[asyncio.Queue[Frame | DeskfleetError]] = field(default_factory=set)
    latest: Frame | None = None
    seq: int = 0
    ended: DeskfleetError | None = None


class Watches:
    def __init__(
        self,
        db: Database,
        presence: Presence,
        replica: str,
        *,
        per_client: int = DEFAULT_PER_CLIENT,
        per_principal: int = DEFAULT_PER_PRINCIPAL,
        per_worker: int = DEFAULT_PER_WORKER,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._presence = presence
        self._replica = replica
        self._per_client = per_client
        self._per_principal = per_principal
        self._per_worker = per_worker
        self._clock = clock
        self._feeds: dict[tuple[str, int, float, int], _Feed] = {}
        self._by_watch: dict[str, _Feed] = {}
        self._clients: dict[tuple[str, str], int] = {}
        self._principals: dict[str, int] = {}
        self._workers: dict[str, int] = {}

    # ------------------------------------------------------------------ viewers

    async def watch(
        self,
        who: Principal,
        *,
        worker: str = "",
        run: str = "",
        display: int = -1,
        max_fps: float = 0.0,
        quality: int = 0,
        client: str = "",
    ) -> AsyncGenerator[Frame, None]:
        """Frames of the display as it changes, keepalives between; ends with an error when the
        worker goes, a kill switch applies, or the caller may no longer watch."""
        fps, quality = _rate(max_fps, quality)
        if len(client) > 200:
            raise InvalidArgumentError("client: at most 200 characters")
        target = await self._db.read(lambda s: resolve(s, who, worker, run, display))
        check_here(target, self._replica)
        self._admit(who, client, target.worker_id)
        slot = (who.id, client)
        self._clients[slot] = self._clients.get(slot, 0) + 1
        self._principals[who.id] = self._principals.get(who.id, 0) + 1
        self._workers[target.worker_id] = self._workers.get(target.worker_id, 0) + 1
        by = audit.actor(who)
        started = self._clock()
        frames = sent_bytes = 0
        why = "the viewer left"
        queue: asyncio.Queue[Frame | DeskfleetError] = asyncio.Queue(maxsize=2)
        feed: _Feed | None = None
        try:
            await audit.write(
                self._db,
                by,
                "desktop.watch",
                target.worker_id,
                display=target.display,
                run=target.run_id,
                client=client,
            )
            feed = self._join(target.worker_id, target.display, fps, quality, queue)
            checked = self._clock()
            target_place = (target.worker_id, target.display)
            waited = FIRST_FRAME_TIMEOUT if feed.latest is None else KEEPALIVE
            while True:
                try:
                    got = await asyncio.wait_for(queue.get(), waited)
                except TimeoutError:
                    if frames == 0:
                        raise UnavailableError(
                            f"worker {target.worker_id} sent no frame within"
                            f" {FIRST_FRAME_TIMEOUT:.0f} s"
                        ) from None
                    got = Frame(0, "", b"", 0, 0, 0.0, self._clock(), *target_place)
                waited = KEEPALIVE
                if isinstance(got, DeskfleetError):
                    why = str(got)
                    raise got
                if target.owner_watch and self._clock() - checked >= RECHECK:
                    await self._db.read(lambda s: resolve(s, who, worker, run, display))
                    checked = self._clock()
                if got.seq:
                    frames += 1
                    sent_bytes += len(got.data)
                yield got
        except DeskfleetError as exc:
            why = str(exc)
            raise
        finally:
            if feed is not None:
                self._leave(feed, queue)
            _less(self._clients, slot)
            _less(self._principals, who.id)
            _less(self._workers, target.worker_id)
            with contextlib.suppress(DeskfleetError):
                await audit.write(
                    self._db,
                    by,
                    "desktop.watch.end",
                    target.worker_id,
                    display=target.display,
                    run=target.run_id,
                    started_at=round(started, 3),
                    ended_at=round(self._clock(), 3),
                    frames=frames,
                    bytes=sent_bytes,
                    why=why[:300],
                )

    def _admit(self, who: Principal, client: str, worker_id: str) -> None:
        if self._clients.get((who.id, client), 0) >= self._per_client:
            raise ResourceExhaustedError(
                f"this session already watches {self._per_client} screens (the limit): close"
                " one first"
            )
        if self._principals.get(who.id, 0) >= self._per_principal:
            raise ResourceExhaustedError(
                f"{who.name} already watches {self._per_principal} screens (the limit)"
            )
        if self._workers.get(worker_id, 0) >= self._per_worker:
            raise ResourceExhaustedError(
                f"worker {worker_id} already has {self._per_worker} viewers (the limit)"
            )

    # ------------------------------------------------------------------ feeds (also the recorder's)

    def subscribe(
        self,
        worker_id: str,
        display: int,
        queue: asyncio.Queue[Frame | DeskfleetError],
        max_fps: float = DEFAULT_FPS,
        quality: int = DEFAULT_QUALITY,
        *,
        any_rate: bool = False,
    ) -> Callable[[], None]:
        """Feed `queue` from the worker's display without a viewer's checks (the recorder's
        way in); returns the call that ends it. `any_rate`: join a feed of the display that
        runs already, whatever its rate, before asking the worker for one at `max_fps` (the
        recorder keeps fewer frames than a viewer sees, and a second feed would make the
        worker grab twice)."""
        fps, q = _rate(max_fps, quality)
        if any_rate:
            for key in self._feeds:
                if key[:2] == (worker_id, display):
                    fps, q = key[2], key[3]
                    break
        feed = self._join(worker_id, display, fps, q, queue)
        return lambda: self._leave(feed, queue)

    def _join(
        self,
        worker_id: str,
        display: int,
        fps: float,
        quality: int,
        queue: asyncio.Queue[Frame | DeskfleetError],
    ) -> _Feed:
        key = (worker_id, display, fps, quality)
        feed = self._feeds.get(key)
        if feed is None:
            feed = _Feed(key, new_id("wt"))
            order = WatchOrder(worker_id, feed.watch_id, display, fps, quality, MAX_FRAME_BYTES)
            if self._presence.send(worker_id, order) is not Sent.SENT:
                raise UnavailableError(f"worker {worker_id} is offline: there is no screen to show")
            self._feeds[key] = feed
            self._by_watch[feed.watch_id] = feed
        elif feed.latest is not None:
            queue.put_nowait(feed.latest)
        feed.viewers.add(queue)
        return feed

    def _leave(self, feed: _Feed, queue: asyncio.Queue[Frame | DeskfleetError]) -> None:
        feed.viewers.discard(queue)
        if feed.viewers or self._feeds.get(feed.key) is not feed:
            return
        self._end(feed, None)
        worker_id, display, fps, quality = feed.key
        self._presence.send(
            worker_id, WatchOrder(worker_id, feed.watch_id, display, fps, quality, 0, stop=True)
        )

    def _end(self, feed: _Feed, error: DeskfleetError | None) -> None:
        self._feeds.pop(feed.key, None)
        self._by_watch.pop(feed.watch_id, None)
        if error is None:
            return
        feed.ended = error
        for queue in list(feed.viewers):
            _offer(queue, error)

    # ------------------------------------------------------------------ from the worker's stream

    def on_frame(
        self,
        worker_id: str,
        watch_id: str,
        *,
        media_type: str,
        data: bytes,
        width: int,
        height: int,
        captured_at: float,
        error: str = "",
        code: str = "",
    ) -> str:
        """A worker's frame, fanned out; returns why it was refused ("" when taken). A frame of
        a watch this replica did not ask of this worker is dropped."""
        feed = self._by_watch.get(watch_id)
        if feed is None or feed.key[0] != worker_id:
            return ""  # a stopped feed's last frames cross the stop order: not a fault
        if error:
            self._end(feed, _worker_error(worker_id, error[:1000], code[:64]))
            return ""
        problem = _frame_problem(media_type, data, width, height)
        if problem:
            self._end(feed, FailedPreconditionError(f"worker {worker_id} {problem}"))
            _, display, fps, quality = feed.key
            self._presence.send(
                worker_id, WatchOrder(worker_id, watch_id, display, fps, quality, 0, stop=True)
            )
            return problem
        feed.seq += 1
        frame = Frame(
            feed.seq,
            media_type,
            data,
            width,
            height,
            float(captured_at),
            self._clock(),
            worker_id,
            feed.key[1],
        )
        feed.latest = frame
        for queue in list(feed.viewers):
            _offer(queue, frame)
        return ""

    def on_disconnect(self, worker_id: str) -> None:
        gone = UnavailableError(f"worker {worker_id} went offline")
        for feed in [f for f in self._feeds.values() if f.key[0] == worker_id]:
            self._end(feed, gone)

    def viewers_of(self, worker_id: str) -> int:
        return self._workers.get(worker_id, 0)


def _less(counts: dict[Any, int], key: Any) -> None:
    counts[key] -= 1
    if not counts[key]:
        del counts[key]


def _offer(queue: asyncio.Queue[Frame | DeskfleetError], item: Frame | DeskfleetError) -> None:
    """The newest item always goes in: a full queue drops its oldest frame."""
    if queue.full():
        with contextlib.suppress(asyncio.QueueEmpty):
            queue.get_nowait()
    queue.put_nowait(item)


def _rate(max_fps: float, quality: int) -> tuple[float, int]:
    fps = max_fps or DEFAULT_FPS
    if not 0 < fps <= MAX_FPS:
        raise InvalidArgumentError(f"max_fps: more than 0 and at most {MAX_FPS:.0f}")
    quality = quality or DEFAULT_QUALITY
    if not 10 <= quality <= 95:
        raise InvalidArgumentError("quality: a JPEG quality in 10..95")
    return float(fps), int(quality)


def _frame_problem(media_type: str, data: bytes, width: int, height: int) -> str:
    """A worker is not trusted to send what it says it sends."""
    if media_type != "image/jpeg" or not data.startswith(JPEG):
        return f"sent a frame that is not a JPEG image (media type {media_type[:40]!r})"
    if len(data) > MAX_FRAME_BYTES:
        return f"sent a {len(data)} byte frame, over the {MAX_FRAME_BYTES} byte limit"
    if not (0 < width <= MAX_SIDE and 0 < height <= MAX_SIDE):
        return f"sent a {width}x{height} frame"
    return ""


def _worker_error(worker_id: str, error: str, code: str) -> DeskfleetError:
    if code == "kill_switch":
        return FailedPreconditionError(f"refused: {error}; the live view of {worker_id} ended")
    if code in ("invalid_argument", "no_display"):
        return FailedPreconditionError(f"worker {worker_id} has no such screen: {error}")
    if code == "too_many":
        return ResourceExhaustedError(f"worker {worker_id}: {error}")
    return FailedPreconditionError(f"worker {worker_id} ended the live view: {error}")


# ---------------------------------------------------------------------- who may watch


def resolve(s: Session, who: Principal, worker: str, run: str, display: int) -> Target:
    """The worker and display `who` asks to watch, or why not. Another owner's run is not
    found; a worker an owner's run does not hold is refused without saying whose it is."""
    if bool(worker) == bool(run):
        raise InvalidArgumentError("name a worker or a run (one of them)")
    admin = who.role is Role.ADMIN
    if run:
        row = run_of(s, who, run)
        if row.kind != KIND:
            raise FailedPreconditionError(f"run {run} is not a desktop run: it has no screen")
        approval = desktop_queries.latest_approval(s, row.id)
        if approval is None:
            raise FailedPreconditionError(f"run {run} has asked for no desktop")
        worker_id = approval.worker_id
        shown = display if display >= 0 else Scope.from_json(approval.granted).displays[0]
        if not admin:
            lease = desktop_queries.input_lease(s, worker_id)
            holds = (
                lease is not None
                and lease.run_id == row.id
                and row.status in ACTIVE
                and approval.status == APPROVED
            )
            if not holds:
                raise FailedPreconditionError(
                    f"run {run} does not hold worker {worker_id}'s desktop now: its owner may"
                    " watch only while it does"
                )
        target = Target(worker_id, shown, row.id, not admin, _replica(s, worker_id))
    else:
        found = worker_queries.resolve(s, worker, time.time(), revoked_names=admin)
        worker_id = found.id
        run_id = ""
        if not admin:
            lease = desktop_queries.input_lease(s, worker_id)
            holder = s.get(RunRow, lease.run_id) if lease is not None else None
            if holder is None or holder.owner_id != who.id or holder.status not in ACTIVE:
                raise PermissionDeniedError(
                    f"only an admin watches worker {worker}; a run's owner watches while a"
                    " desktop run of theirs holds it"
                )
            run_id = holder.id
        target = Target(worker_id, max(display, 0), run_id, not admin, _replica(s, worker_id))
    # The run an owner watches through, named or found holding the worker: a switch on it
    # stops the view as one on the worker does.
    kills = desktop_queries.kills_applying(
        s, target.worker_id, [target.run_id] if target.run_id else []
    )
    if kills:
        k = kills[0]
        raise FailedPreconditionError(
            f"refused: kill switch {k.id} ({k.scope}) is engaged; no live view of worker"
            f" {target.worker_id} until it is released"
        )
    return target


def run_of(s: Session, who: Principal, run_id: str, *, lock: bool = False) -> RunRow:
    """The caller's run, or for an admin anyone's; NOT_FOUND for another owner's."""
    if len(run_id) > 100:
        raise InvalidArgumentError("run: a run id is at most 100 characters")
    row = run_queries.run_for_update(s, run_id) if lock else s.get(RunRow, run_id)
    if row is None or (row.owner_id != who.id and who.role is not Role.ADMIN):
        raise NotFoundError(f"no run {run_id!r}")
    return row


def _replica(s: Session, worker_id: str) -> str:
    presence = s.get(PresenceRow, worker_id)
    if presence is None:
        raise UnavailableError(f"worker {worker_id} is offline: there is no screen to show")
    return presence.replica


def check_here(target: Target, replica: str) -> None:
    """The worker's frames come to the replica holding its stream, and are not relayed."""
    if target.replica != replica:
        raise FailedPreconditionError(
            f"worker {target.worker_id} streams to replica {target.replica}: ask that replica"
            f" (this is {replica})"
        )
