"""Following runs (30.7): N watchers or waiters of one run cost one look at the store, not N;
followers of many runs cost one look a second at all their heads, not one per run, and a
run's events are read only when its head moved (B9); each watcher still gets every event
exactly once, in order; and one principal holds at most `serve --max-watch-streams` WatchRun
and WaitRun calls open.

The sharing runs in-process on a real SQLite store (the store's reads are counted where they
are made, `Database.read`); the limit runs against a real coordinator."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from coordinator.heart import ledger
from coordinator.model.identity import Principal, Role
from coordinator.runs.service import Event, Runs, new_run
from coordinator.store import Database
from coordinator.store.journal import append
from coordinator.store.models import RunRow
from coordinator.store.schema import upgrade
from coordinator.streams.followers import KEEP, RunFeed
from coordinator.streams.journal_bus import JournalBus

OWNER = Principal("usr_follower", "follower", Role.OWNER)
LIMITS = {"max_actions": 1, "max_seconds": 1.0, "estimate_actions": 1, "estimate_seconds": 1.0,
          "action_timeout_seconds": 1.0}  # fmt: skip


class Reads:
    """Every transaction a store reader makes, counted where it is made; `by` counts them by
    the function run in the transaction (`run_heads`: the look at every followed run)."""

    def __init__(self, db: Database) -> None:
        self.count = 0
        self.by: Counter[str] = Counter()
        real = db.read

        async def read(fn: Callable[..., Any], *args: Any) -> Any:
            self.count += 1
            self.by[fn.__qualname__] += 1
            return await real(fn, *args)

        db.read = read  # type: ignore[method-assign, assignment]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[tuple[Database, JournalBus, Runs]]:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    await asyncio.to_thread(upgrade, url)
    db = Database(url)
    bus = JournalBus()
    yield db, bus, Runs(db, dispatcher=None, bus=bus)  # type: ignore[arg-type]
    await db.close()


async def _new_run(db: Database, events: int) -> str:
    run_id = f"run_{time.monotonic_ns()}"

    def unit(s: Session) -> None:
        run = new_run(run_id, OWNER.id, "t", LIMITS, kind="plan", spec={}, actions_total=0,
                      now=time.time())  # fmt: skip
        s.add(run)
        s.flush()
        for i in range(events):
            append(s, run, "note", {"i": i})

    await db.write(unit)
    return run_id


async def _grow(db: Database, bus: JournalBus, run_id: str, events: int, status: str = "") -> None:
    """Events appended (and the run stopped, with `status`) as a ledger commit does, then the
    bus told, as the dispatcher tells it after the commit."""

    def unit(s: Session) -> None:
        run = s.get(RunRow, run_id)
        assert run is not None
        for _ in range(events):
            append(s, run, "note", {"at": time.time()})
        if status:
            run.status = status

    await db.write(unit)
    bus.notify([run_id], [run_id] if status else [])


async def _follow(runs: Runs, run_id: str, seen: list[int], after: int = 0) -> None:
    async for event in runs.watch(OWNER, run_id, after, True):
        seen.append(event.seq)


async def _until(check: Callable[[], bool], within: float = 10) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_followers_of_one_run_share_one_look_and_each_gets_every_event_once(
    store: tuple[Database, JournalBus, Runs],
) -> None:
    db, bus, runs = store
    run_id = await _new_run(db, 3)
    reads = Reads(db)
    seen: list[list[int]] = [[] for _ in range(50)]
    tasks = [asyncio.create_task(_follow(runs, run_id, mine)) for mine in seen]
    await _until(lambda: all(len(mine) == 3 for mine in seen))
    # Idle: the run's feed looks about once a second, for all 50. Each follower used to look
    # once a second for itself: some 150 reads in these 3 seconds.
    await asyncio.sleep(0.5)
    reads.count = 0
    await asyncio.sleep(3)
    assert reads.count <= 5, reads.count
    # New events are read once for everyone, and reach everyone, each once, in order.
    reads.count = 0
    await _grow(db, bus, run_id, 4)
    await _until(lambda: all(len(mine) == 7 for mine in seen))
    assert reads.count <= 3, reads.count
    await _grow(db, bus, run_id, 1, status=ledger.SUCCEEDED)
    await asyncio.wait_for(asyncio.gather(*tasks), 10)  # the run stopped: the streams end
    assert all(mine == list(range(1, 9)) for mine in seen)


async def test_followers_joining_while_the_run_grows_miss_nothing_and_repeat_nothing(
    store: tuple[Database, JournalBus, Runs],
) -> None:
    db, bus, runs = store
    run_id = await _new_run(db, 1)
    seen: list[list[int]] = []
    tasks = []
    for i in range(30):
        mine: list[int] = []
        seen.append(mine)
        tasks.append(asyncio.create_task(_follow(runs, run_id, mine, after=i % 3)))
        await _grow(db, bus, run_id, 1 + i % 4)  # a few events between joins
    last = 1 + sum(1 + i % 4 for i in range(30))
    await _grow(db, bus, run_id, 1, status=ledger.SUCCEEDED)
    await asyncio.wait_for(asyncio.gather(*tasks), 20)
    for i, mine in enumerate(seen):
        assert mine == list(range(i % 3 + 1, last + 2)), i


async def test_waiters_of_one_run_share_one_look(store: tuple[Database, JournalBus, Runs]) -> None:
    db, bus, runs = store
    run_id = await _new_run(db, 1)
    reads = Reads(db)
    waits = [asyncio.create_task(runs.wait(OWNER, run_id, 30)) for _ in range(50)]
    await asyncio.sleep(0.5)  # each read the run once, found it active
    reads.count = 0
    await asyncio.sleep(4)
    # One look every 2 s for the 50; each waiter used to look every 2 s: some 100 reads.
    assert reads.count <= 4, reads.count
    await _grow(db, bus, run_id, 1, status=ledger.SUCCEEDED)
    views = await asyncio.wait_for(asyncio.gather(*waits), 10)
    assert {v.run.status for v in views} == {ledger.SUCCEEDED}


async def test_a_run_stopped_on_another_replica_ends_its_waiters_through_the_feed(
    store: tuple[Database, JournalBus, Runs],
) -> None:
    """No wake-up reaches this replica (the bus is not told): the feed's look finds it."""
    db, _, runs = store
    run_id = await _new_run(db, 1)
    waits = [asyncio.create_task(runs.wait(OWNER, run_id, 30)) for _ in range(5)]
    followers = [asyncio.create_task(_follow(runs, run_id, [])) for _ in range(5)]
    await asyncio.sleep(0.3)
    await _grow(db, JournalBus(), run_id, 1, status=ledger.FAILED)  # another replica's bus
    started = time.monotonic()
    views = await asyncio.wait_for(asyncio.gather(*waits), 10)
    await asyncio.wait_for(asyncio.gather(*followers), 10)
    assert {v.run.status for v in views} == {ledger.FAILED}
    assert time.monotonic() - started < 4  # within a look or two, not the 30 s asked for


async def test_followers_of_many_runs_cost_one_look_a_second_and_events_are_read_when_moved(
    store: tuple[Database, JournalBus, Runs],
) -> None:
    """256 followers over 200 runs (B9): each run's feed used to read its run every second,
    some 200 reads a second while nothing happens. Now one read a second looks at every
    run's head, and a run's events are read only when its head moved."""
    db, _, runs = store
    run_ids = [await _new_run(db, 1) for _ in range(200)]
    seen: list[list[int]] = [[] for _ in range(256)]
    tasks = [
        asyncio.create_task(_follow(runs, run_ids[i % 200], mine)) for i, mine in enumerate(seen)
    ]
    await _until(lambda: all(mine == [1] for mine in seen))
    reads = Reads(db)
    await asyncio.sleep(3.2)
    assert reads.count <= 5, reads.by  # three or four looks
    assert set(reads.by) == {"run_heads"}, reads.by
    # A run grows where no wake-up reaches this replica (another replica's bus): the look
    # finds it, its feed reads its events once for its two followers, and no other run's.
    reads.by.clear()
    await _grow(db, JournalBus(), run_ids[7], 2)
    await _until(lambda: seen[7] == [1, 2, 3] and seen[207] == [1, 2, 3], within=5)
    await asyncio.sleep(1.2)  # another look: nothing else moved
    assert reads.by["_FeedSource.after.<locals>.unit"] == 1, reads.by
    assert set(reads.by) == {"run_heads", "_FeedSource.after.<locals>.unit"}, reads.by
    assert all(mine == [1] for i, mine in enumerate(seen) if i % 200 != 7)
    for run_id in run_ids:
        await _grow(db, JournalBus(), run_id, 1, status=ledger.SUCCEEDED)
    await asyncio.wait_for(asyncio.gather(*tasks), 20)  # each saw its run stop, by the look
    assert seen[7] == [1, 2, 3, 4] and seen[8] == [1, 2]


async def test_waiters_of_many_runs_share_one_look_every_two_seconds(
    store: tuple[Database, JournalBus, Runs],
) -> None:
    db, _, runs = store
    run_ids = [await _new_run(db, 1) for _ in range(100)]
    waits = [asyncio.create_task(runs.wait(OWNER, run_id, 30)) for run_id in run_ids]
    await asyncio.sleep(0.5)  # each read its run once, found it active
    reads = Reads(db)
    await asyncio.sleep(4.2)
    # One look every 2 s for the 100 runs; each run's feed used to look every 2 s: 200 reads.
    assert reads.count <= 3 and set(reads.by) == {"run_heads"}, reads.by
    for run_id in run_ids[:50]:  # stopped on another replica: the look ends their waiters
        await _grow(db, JournalBus(), run_id, 1, status=ledger.FAILED)
    views = await asyncio.wait_for(asyncio.gather(*waits[:50]), 10)
    assert {v.run.status for v in views} == {ledger.FAILED}
    assert not any(w.done() for w in waits[50:])
    for w in waits[50:]:
        w.cancel()
    await asyncio.gather(*waits[50:], return_exceptions=True)
    await asyncio.sleep(0)
    # The last waiter gone, its feed and the look at every feed are gone.
    assert len(runs._feeds) == 0 and runs._feeds._looking is None


def _events(first: int, last: int) -> list[Event]:
    return [Event("run_a", seq, "note", 0.0, "{}", "", "", "") for seq in range(first, last + 1)]


def test_a_feed_keeps_the_newest_events_and_sends_older_ones_to_the_store() -> None:
    feed: RunFeed[Event] = RunFeed("run_a")
    assert feed.after(0) == []  # nothing read yet: wait for it
    assert feed._moved_to(10, "RUNNING")  # started at the run's head, 10
    assert feed.after(10) == [] and feed.after(9) is None  # 10 is in the store only
    assert feed._took(_events(11, 12), "RUNNING")
    assert [e.seq for e in feed.after(10) or []] == [11, 12]
    assert feed.after(9) is None
    assert not feed._took([], "RUNNING")  # nothing new: nobody is woken
    feed._took(_events(13, 12 + KEEP), "RUNNING")  # 11 and 12 make room: 13 is the oldest
    assert feed.after(11) is None
    assert [e.seq for e in feed.after(12) or []] == list(range(13, 13 + KEEP))
    assert feed._took([], "SUCCEEDED")  # a status is news too


# ------------------------------------------------------------------ a real coordinator
