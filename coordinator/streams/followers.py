"""Who follows runs on this replica: the per-principal cap on open WatchRun and WaitRun calls,
and one feed per followed run that all its watchers and waiters share (30.7).

A following WatchRun used to read the store once a second, and a WaitRun every 2 s, each for
itself, in case a wake-up was missed (a run changed on another replica wakes this one only
through the store's notifications): 200 idle followers of one run cost 13-22% of a core. A
`RunFeed` is the one reader of a followed run: woken by the journal bus and polling once a
second as the fallback, it reads the run's new events once and keeps the newest for its
followers, who take them from it; one whose place is older than what the feed keeps (it is
still reading history, or fell far behind) reads its own page from the store. With only
waiters, the feed reads the run's head alone (its last sequence number and status).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Generic, Protocol, TypeVar

from coordinator.streams.journal_bus import JournalBus
from shared.errors import ResourceExhaustedError

log = logging.getLogger(__name__)

POLL = 1.0  # seconds between looks at a followed run no wake-up announced
# With waiters only, a feed looks this often and is not woken by the run's events: a waiter
# is woken by its run's stop itself, and the look only covers a wake-up that was missed.
WAITERS_POLL = 2.0
PAGE = 500  # events read at once
KEEP = 500  # newest events a feed keeps for followers that are behind


class Sequenced(Protocol):
    @property
    def seq(self) -> int: ...


E = TypeVar("E", bound=Sequenced)
E_co = TypeVar("E_co", bound=Sequenced, covariant=True)


class FeedSource(Protocol[E_co]):
    """How a feed reads a run: its head, and events after a sequence number (each call one
    transaction, with the run's status as of that read)."""

    async def head(self, run_id: str) -> tuple[int, str]: ...

    async def after(self, run_id: str, seq: int, limit: int) -> tuple[Sequence[E_co], str]: ...


class OpenStreams:
    """WatchRun and WaitRun calls open per principal on this replica, at most `limit` each
    (0: no limit): an idle stream costs the coordinator a task, memory and a share of the
    feeds' work, and one principal must not take them all."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}

    def count(self, principal_id: str) -> int:
        return self._open.get(principal_id, 0)

    @contextlib.contextmanager
    def hold(self, principal_id: str) -> Iterator[None]:
        """One more open call of `principal_id` for the block; RESOURCE_EXHAUSTED past the
        limit, naming it."""
        held = self.count(principal_id)
        if self.limit and held >= self.limit:
            raise ResourceExhaustedError(
                f"limit max_watch_streams={self.limit}: this caller has {held} WatchRun and"
                " WaitRun calls open on this coordinator already; close one first (the"
                " operator sets it: serve --max-watch-streams)"
            )
        self._open[principal_id] = held + 1
        try:
            yield
        finally:
            left = self._open[principal_id] - 1
            if left:
                self._open[principal_id] = left
            else:
                del self._open[principal_id]


class RunFeed(Generic[E]):
    """One followed run as this replica reads it for everyone following it."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.followers = 0  # WatchRun(follow) calls: they want the events
        self.waiters = 0  # WaitRun calls: they want the status only
        self.head: int | None = None  # the newest sequence number read; None: not yet read
        self.status = ""
        self.error: BaseException | None = None  # the read that failed; the feed has ended
        self._kept: deque[E] = deque(maxlen=KEEP)
        self._first = 0  # the feed holds every event from here to `head`
        self._changed = asyncio.Event()
        self._nudge = asyncio.Event()  # a first follower joined a feed of waiters only
        self.task: asyncio.Task[None] | None = None

    def after(self, seq: int) -> list[E] | None:
        """The events after `seq` the feed holds ([] when it holds none yet), or None when
        some of them are older than what it keeps: the caller reads those from the store."""
        if self.head is None or seq >= self.head:
            return []
        if seq + 1 < self._first:
            return None
        return [e for e in self._kept if e.seq > seq]

    async def changed(self) -> None:
        """Until the feed next reads something new (events, a status, an error)."""
        await self._changed.wait()

    def _announce(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _took(self, events: Sequence[E], status: str) -> bool:
        """Take one read's events and status; whether anything changed."""
        new = bool(events) or status != self.status
        if events:  # the events right after `head`: the oldest kept ones make room for them
            self._kept.extend(events)
            self._first = self._kept[0].seq
            self.head = events[-1].seq
        self.status = status
        return new

    def _moved_to(self, head: int, status: str) -> bool:
        """A head read alone (no events): what is kept no longer reaches it if it moved."""
        new = head != self.head or status != self.status
        if head != self.head:
            self._kept.clear()
            self.head, self._first = head, head + 1
        self.status = status
        return new

    def follow(self) -> None:
        self.followers += 1
        if self.followers == 1:
            self._nudge.set()  # from now on the feed reads events, and is woken by them

    async def run(
        self, source: FeedSource[E], bus: JournalBus, poll: float, waiters_poll: float
    ) -> None:
        wake = bus.subscribe(self.run_id)
        try:
            if not self.followers:  # a waiter has just read the run itself
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._nudge.wait(), waiters_poll)
            while self.followers or self.waiters:
                wake.clear()
                self._nudge.clear()
                full = False
                if self.head is None or not self.followers:
                    changed = self._moved_to(*await source.head(self.run_id))
                else:
                    events, status = await source.after(self.run_id, self.head, PAGE)
                    changed, full = self._took(events, status), len(events) == PAGE
                if changed:
                    self._announce()
                if full:
                    continue
                woken, rest = (wake, poll) if self.followers else (self._nudge, waiters_poll)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), rest)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a store error ends the feed: each follower raises it
            log.warning("reading run %s for its followers failed: %s", self.run_id, exc)
            self.error = exc
            self._announce()
        finally:
            bus.unsubscribe(self.run_id, wake)


class RunFeeds(Generic[E]):
    """The feeds of this replica, one per run followed or waited on, gone with the last."""

    def __init__(
        self,
        source: FeedSource[E],
        bus: JournalBus,
        poll: float = POLL,
        waiters_poll: float = WAITERS_POLL,
    ) -> None:
        self._source = source
        self._bus = bus
        self._poll = poll
        self._waiters_poll = waiters_poll
        self._feeds: dict[str, RunFeed[E]] = {}

    def __len__(self) -> int:
        return len(self._feeds)

    @contextlib.contextmanager
    def joined(self, run_id: str, *, follower: bool) -> Iterator[RunFeed[E]]:
        """The run's feed for the block, started by its first follower or waiter."""
        feed = self._feeds.get(run_id)
        if feed is None or feed.error is not None:
            feed = self._feeds[run_id] = RunFeed(run_id)
        if follower:
            feed.follow()
        else:
            feed.waiters += 1
        if feed.task is None:
            feed.task = asyncio.create_task(
                feed.run(self._source, self._bus, self._poll, self._waiters_poll),
                name=f"feed-{run_id}",
            )
        try:
            yield feed
        finally:
            if follower:
                feed.followers -= 1
            else:
                feed.waiters -= 1
            if not feed.followers and not feed.waiters:
                feed.task.cancel()
                if self._feeds.get(run_id) is feed:
                    del self._feeds[run_id]
