"""A live view of a display for a person watching it (`WatchScreenNow`): frames as it changes.

The first frame goes out at once, so a viewer sees the screen as soon as the watch starts;
after that the display is grabbed at most `max_fps` times a second and a frame is sent only
when the grabbed pixels differ from the last frame sent (a hash of mss's raw bytes, taken
before any conversion): a still screen sends nothing at all. The coordinator keeps a viewer's
connection alive meanwhile.

A watch ends with one frame that carries `error` and `code`: the display gone (its
ActionRefused code), a kill switch that applies to this worker (kill_switch: asked every tick,
its local one included, so that a kill stops the frames within one tick), a frame that does
not fit `max_bytes` even at a low quality (too_large). A stop order ends it silently, and so
does the end of the stream (`stop_all`). A watch never sends input.

Grabs and encodes run on the watcher's own threads (one per watch at most): mss holds an X
connection per thread (`Screen`), so a bounded pool keeps their number bounded too.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from shared.desktop_scope import INVALID_ARGUMENT, MAX_DISPLAYS, NO_DISPLAY
from shared.gen.deskfleet.v1 import worker_pb2
from shared.gen.deskfleet.v1.worker_pb2 import WorkerMessage
from worker_agent.actions import ActionRefused
from worker_agent.desktop.peek import NO_DESKTOP
from worker_agent.desktop.screen import FORMATS, Screen, encode, to_image
from worker_agent.input_guard import InputGuard

MAX_WATCHES = 16  # at once on one worker; one more is refused (too_many)
DEFAULT_FPS = 10.0  # when the order leaves max_fps unset (0), as WatchScreen's default
MIN_FPS, MAX_FPS = 1.0, 30.0
DEFAULT_QUALITY = 70
MIN_QUALITY, MAX_QUALITY = 10, 95
# Tried, below the asked quality, when a frame does not fit `max_bytes`.
FALLBACK_QUALITIES = (50, 30)
DEFAULT_MAX_BYTES = 4 * 1024 * 1024  # when unset: under the stream's 16 MiB message limit

KILL_SWITCH = "kill_switch"
TOO_LARGE = "too_large"
TOO_MANY = "too_many"
FAILED = "failed"

Send = Callable[[WorkerMessage], None]


@dataclass(frozen=True)
class WatchPlan:
    """A start order's values, clamped to what a worker serves."""

    watch_id: str
    display: int
    interval: float  # seconds between two grabs
    quality: int
    max_bytes: int

    @classmethod
    def of(cls, order: worker_pb2.WatchScreenNow) -> WatchPlan:
        """ActionRefused(invalid_argument) for an order no clamp can mend."""
        if not order.watch_id:
            raise ActionRefused("a watch order needs a watch_id", INVALID_ARGUMENT)
        if not 0 <= order.display < MAX_DISPLAYS:
            raise ActionRefused(
                f"'display' must be in 0..{MAX_DISPLAYS - 1}, not {order.display}",
                INVALID_ARGUMENT,
            )
        fps = order.max_fps if math.isfinite(order.max_fps) and order.max_fps > 0 else DEFAULT_FPS
        fps = min(max(fps, MIN_FPS), MAX_FPS)
        quality = order.quality or DEFAULT_QUALITY
        quality = min(max(quality, MIN_QUALITY), MAX_QUALITY)
        max_bytes = order.max_bytes if order.max_bytes > 0 else DEFAULT_MAX_BYTES
        return cls(order.watch_id, order.display, 1.0 / fps, quality, max_bytes)


class _Unchanged:
    """A grab whose pixels are those of the last frame sent."""


UNCHANGED = _Unchanged()


class ScreenWatcher:
    """Serves the watch orders of one worker; `stop_all` when its stream ends."""

    def __init__(self, screen: Screen | None, guard: InputGuard | None) -> None:
        self._screen = screen  # None: the worker runs without computer use
        self._guard = guard
        self._watches: dict[str, asyncio.Task[None]] = {}
        self._pool = ThreadPoolExecutor(MAX_WATCHES, thread_name_prefix="watch")

    @property
    def watching(self) -> int:
        return len(self._watches)

    def order(self, order: worker_pb2.WatchScreenNow, send: Send) -> None:
        """Start, replace or stop a watch (call on the event loop). A start for a watch_id
        that is running replaces that watch: its frames begin again at seq 1."""
        running = self._watches.pop(order.watch_id, None)
        if running is not None:
            running.cancel()
        if order.stop:
            return
        if self._screen is None:
            send(_error(order.watch_id, NO_DESKTOP, NO_DISPLAY))
            return
        try:
            plan = WatchPlan.of(order)
        except ActionRefused as exc:
            send(_error(order.watch_id, str(exc), exc.code))
            return
        if len(self._watches) >= MAX_WATCHES:
            send(
                _error(
                    plan.watch_id,
                    f"this worker already serves {MAX_WATCHES} watches, the most it serves at once",
                    TOO_MANY,
                )
            )
            return
        task = asyncio.create_task(self._watch(plan, self._screen, send))
        self._watches[plan.watch_id] = task
        task.add_done_callback(lambda done: self._forget(plan.watch_id, done))

    def stop_all(self) -> None:
        """End every watch (the stream that asked for them is gone); safe to call twice.

        Not awaited: a cancelled watch sends nothing more, and waiting for it inside the
        stream's cleanup could swallow a cancellation of the worker itself."""
        tasks = list(self._watches.values())
        self._watches.clear()
        for task in tasks:
            task.cancel()

    def close(self) -> None:
        """After `stop_all`: let the grab threads go."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _forget(self, watch_id: str, done: asyncio.Task[None]) -> None:
        if self._watches.get(watch_id) is done:
            del self._watches[watch_id]

    async def _watch(self, plan: WatchPlan, screen: Screen, send: Send) -> None:
        loop = asyncio.get_running_loop()
        seq, last = 0, b""
        while True:
            tick = loop.time()
            why = self._stopped()
            if why is not None:
                send(_error(plan.watch_id, why, KILL_SWITCH))
                return
            try:
                grabbed = await loop.run_in_executor(self._pool, _grab, screen, plan, last)
            except ActionRefused as exc:
                send(_error(plan.watch_id, str(exc), exc.code))
                return
            except Exception as exc:  # the watch ends, saying why; the worker goes on
                send(_error(plan.watch_id, f"the watch failed: {_short(exc)}", FAILED))
                return
            # Asked again after the grab: a kill engaged while it ran sends no frame.
            why = self._stopped()
            if why is not None:
                send(_error(plan.watch_id, why, KILL_SWITCH))
                return
            if isinstance(grabbed, Frame):
                if not grabbed.data:
                    send(_error(plan.watch_id, grabbed.too_large, TOO_LARGE))
                    return
                seq += 1
                last = grabbed.digest
                send(WorkerMessage(frame=grabbed.to_proto(plan.watch_id, seq)))
            await asyncio.sleep(max(0.0, plan.interval - (loop.time() - tick)))

    def _stopped(self) -> str | None:
        return None if self._guard is None else self._guard.stopped()


@dataclass(frozen=True)
class Frame:
    """One encoded grab; no `data` when it did not fit (`too_large` says so)."""

    digest: bytes
    data: bytes
    width: int
    height: int
    captured_at: float
    too_large: str = ""

    def to_proto(self, watch_id: str, seq: int) -> worker_pb2.ScreenFrame:
        return worker_pb2.ScreenFrame(
            watch_id=watch_id,
            seq=seq,
            media_type=FORMATS["jpeg"],
            data=self.data,
            width=self.width,
            height=self.height,
            captured_at=self.captured_at,
        )


def _grab(screen: Screen, plan: WatchPlan, last: bytes) -> Frame | _Unchanged:
    """On a watch thread: grab, compare with the last frame sent, encode only if it differs."""
    geometry = screen.display(plan.display)
    captured_at = time.time()
    pixels = screen.grab_pixels(geometry)
    digest = hashlib.blake2b(pixels.raw, digest_size=16).digest()
    if digest == last:
        return UNCHANGED
    image = to_image(pixels.raw, pixels.size)
    width, height = pixels.size
    for quality in (plan.quality, *(q for q in FALLBACK_QUALITIES if q < plan.quality)):
        data = encode(image, "jpeg", quality)
        if len(data) <= plan.max_bytes:
            return Frame(digest, data, width, height, captured_at)
    return Frame(
        digest,
        b"",
        width,
        height,
        captured_at,
        f"the {width}x{height} screen does not fit in {plan.max_bytes} bytes even as a JPEG"
        f" of quality {min(plan.quality, *FALLBACK_QUALITIES)}",
    )


def _error(watch_id: str, error: str, code: str) -> WorkerMessage:
    """The frame that ends a watch: no image, seq 0."""
    return WorkerMessage(frame=worker_pb2.ScreenFrame(watch_id=watch_id, error=error, code=code))


def _short(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
