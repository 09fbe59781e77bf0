"""Who follows runs on this replica: the per-principal cap on open WatchRun and WaitRun calls,
and one feed per followed run that all its watchers and waiters share (30.7).

A following WatchRun used to read the store once a second, and a WaitRun every 2 s, each for
itself, in case a wake-up was missed (a run changed on another replica wakes this one only
through the store's notifications): 200 idle followers of one run cost 13-22% of a core. A
`RunFeed` is the one reader of a followed run: it reads the run's new events once and keeps
the newest for its followers, who take them from it; one whose place is older than what the
feed keeps (it is still reading history, or fell far behind) reads its own page from the store.

A feed reads events only when it is woken: by the journal bus (the run grew on this replica)
or by the replica's one look at the heads of every followed run (`RunFeeds`), which finds the
runs whose last sequence number or status moved where no wake-up announced it. That look is
one store read a second however many runs are followed: with a feed polling its own run,
256 idle followers spread over 200 runs cost 21% of a core against 1.6% on one run (B9).
A feed with waiters only takes its head from the look itself, every 2 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Generic, Protocol, TypeVar

from coordinator.streams.journal_bus import JournalBus
from shared.errors import NotFoundError, ResourceExhaustedError

log = logging.getLogger(__name__)

POLL = 1.0  # seconds between looks at the followed runs' heads
# A feed with waiters only is looked at this often: a waiter is woken by its run's stop
# itself, and the look only covers a wake-up that was missed.
WAITERS_POLL = 2.0
PAGE = 500  # events read at once
KEEP = 500  # newest events a feed keeps for followers that are behind


class Sequenced(Protocol):
    @property
    def seq(self) -> int: ...


E = TypeVar("E", bound=Sequenced)
E_co = TypeVar("E_co", bound=Sequenced, covariant=True)


class FeedSource(Protocol[E_co]):
    """How feeds read runs, each call one transaction: the heads (last sequence number and
    status) of many runs at once, a missing run left out; a run's events after a sequence
    number, with its status as of that read."""

    async def heads(self, run_ids: Collection[str]) -> Mapping[str, tuple[int, str]]: ...

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

    def __init__(self, run_id: str, looked: float = 0.0) -> None:
        self.run_id = run_id
        self.followers = 0  # WatchRun(follow) calls: they want the events
        self.waiters = 0  # WaitRun calls: they want the status only
        self.head: int | None = None  # the newest sequence number read; None: not yet read
        self.status = ""
        self.error: BaseException | None = None  # the read that failed; the feed has ended
        self.looked = looked  # when the run's head was last read (monotonic)
        self._kept: deque[E] = deque(maxlen=KEEP)
        self._first = 0  # the feed holds every event from here to `head`
        self._changed = asyncio.Event()
        self._wake: asyncio.Event | None = None  # the reader's, while the feed has followers
        self.task: asyncio.Task[None] | None = None  # the reader of events, for followers

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

    def saw(self, head: int, status: str, at: float) -> None:
        """What the look at every feed's run found for this one. With followers, a head or
        status that moved wakes the reader, which reads the events; with waiters only, the
        head is taken as it is."""
        self.looked = at
        if self._wake is not None:
            if self.head is not None and (head > self.head or status != self.status):
                self._wake.set()
        elif self._moved_to(head, status):
            self._announce()

    def failed(self, error: BaseException) -> None:
        """The feed ends with `error`: each of its followers and waiters raises it."""
        self.error = error
        self._announce()

    async def read(self, source: FeedSource[E], wake: asyncio.Event) -> None:
        """Read the run's events for its followers whenever `wake` is set (by the journal
        bus or the look at every feed's run), until cancelled or a read fails."""
        self._wake = wake
        try:
            while True:
                wake.clear()
                full = False
                if self.head is None:  # the feed's first look: the run's head
                    found = (await source.heads([self.run_id])).get(self.run_id)
                    if found is None:
                        raise NotFoundError(f"no run {self.run_id!r}")
                    changed = self._moved_to(*found)
                else:
                    events, status = await source.after(self.run_id, self.head, PAGE)
                    changed, full = self._took(events, status), len(events) == PAGE
                if changed:
                    self._announce()
                if not full:
                    await wake.wait()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a store error ends the feed: each follower raises it
            log.warning("reading run %s for its followers failed: %s", self.run_id, exc)
            self.failed(exc)
        finally:
            if self._wake is wake:  # a follower may have joined since: its reader's wake stays
                self._wake = None


class RunFeeds(Generic[E]):
    """The feeds of this replica, one per run followed or waited on, gone with the last; and
    the one look at all their runs' heads that wakes those whose run moved."""

    def __init__(
        self,
        source: FeedSource[E],
        bus: JournalBus,
        poll: float = POLL,
        waiters_poll: float = WAITERS_POLL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._bus = bus
        self._poll = poll
        self._waiters_poll = waiters_poll
        self._clock = clock
        self._feeds: dict[str, RunFeed[E]] = {}
        self._looking: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._feeds)

    @contextlib.contextmanager
    def joined(self, run_id: str, *, follower: bool) -> Iterator[RunFeed[E]]:
        """The run's feed for the block, made by its first follower or waiter."""
        feed = self._feeds.get(run_id)
        if feed is None or feed.error is not None:
            # A waiter has just read the run itself: the feed's first look can wait.
            feed = self._feeds[run_id] = RunFeed(run_id, looked=self._clock())
        if follower:
            feed.followers += 1
            if feed.task is None:
                feed.task = asyncio.create_task(self._read(feed), name=f"feed-{run_id}")
        else:
            feed.waiters += 1
        if self._looking is None:
            self._looking = asyncio.create_task(self._look(), name="feeds-look")
        try:
            yield feed
        finally:
            self._left(feed, follower)

    async def _read(self, feed: RunFeed[E]) -> None:
        wake = self._bus.subscribe(feed.run_id)
        try:
            await feed.read(self._source, wake)
        finally:
            self._bus.unsubscribe(feed.run_id, wake)

    def _left(self, feed: RunFeed[E], follower: bool) -> None:
        if follower:
            feed.followers -= 1
            if not feed.followers and feed.task is not None:
                feed.task.cancel()  # waiters, if any, are served by the look alone
                feed.task = None
        else:
            feed.waiters -= 1
        if not feed.followers and not feed.waiters and self._feeds.get(feed.run_id) is feed:
            del self._feeds[feed.run_id]
        if not self._feeds and self._looking is not None:
            self._looking.cancel()
            self._looking = None

    def due(self, now: float) -> list[RunFeed[E]]:
        """The feeds the next look covers: every one with followers whose reader has read
        its run once, and those with waiters only last looked at `waiters_poll` ago."""
        return [
            f
            for f in self._feeds.values()
            if f.error is None
            and (
                (f.followers and f.head is not None)
                or (not f.followers and now - f.looked >= self._waiters_poll)
            )
        ]

    async def look(self) -> None:
        """One look at the heads of the due feeds' runs, in one read."""
        now = self._clock()
        feeds = self.due(now)
        if not feeds:
            return
        try:
            heads = await self._source.heads([f.run_id for f in feeds])
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # as when a feed's own read fails: its followers raise it
            log.warning("reading the heads of %d followed runs failed: %s", len(feeds), exc)
            for feed in feeds:
                feed.failed(exc)
            return
        for feed in feeds:
            found = heads.get(feed.run_id)
            if feed.error is not None:
                continue
            if found is None:
                feed.failed(NotFoundError(f"no run {feed.run_id!r}"))
            else:
                feed.saw(*found, at=now)

    async def _look(self) -> None:
        while True:
            await asyncio.sleep(self._poll)
            await self.look()
