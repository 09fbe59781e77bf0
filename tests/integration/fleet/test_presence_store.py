"""Presence rules in process (milliseconds): the replica lease decides who is online, counts
come from one aggregate query, pages walk the fleet once, reconnects start fast."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from coordinator.fleet.service import page_token, parse_page_token
from coordinator.model.settings import CoordinatorConfig
from coordinator.model.workers import view_of
from coordinator.store import Database, replicas as replica_queries, workers as worker_queries
from coordinator.store.models import WorkerRow
from coordinator.store.schema import upgrade
from coordinator.streams.presence import Presence
from coordinator.streams.worker_index import IndexUpdates, WorkerIndex
from shared.advertisement import Advertisement

TTL = 15.0


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    url = (
        f"sqlite:///{tmp_path / 'fleet.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    await asyncio.to_thread(upgrade, url)
    database = Database(url)
    yield database
    await database.close()


def _enroll(
    s: Session, n: int, *, enrolled_at: float = 1000.0, allowed: list[str] | None = None
) -> list[str]:
    ids = []
    for i in range(n):
        worker_id = f"wrk_{i:03d}"
        s.add(
            WorkerRow(
                id=worker_id,
                name=f"w{i}",
                secret_hash=f"{i:064d}",
                state="active",
                labels={},
                allowed_capabilities=allowed or [],
                advertisement={},
                # Ties on purpose: pages order by (enrolled_at, id).
                enrolled_at=enrolled_at + i // 3,
                enrollment_token_id="tok",
            )
        )
        ids.append(worker_id)
    s.flush()
    return ids


def _claim(worker_id: str, *available: str) -> worker_queries.PresenceClaim:
    """A connect advertising `available` as measured usable, as a worker's welcome does."""
    advertisement = {"capabilities": [{"name": n, "available": True} for n in available]}
    return worker_queries.PresenceClaim(
        worker_id, f"ses_{worker_id}", advertisement, frozenset(available)
    )


async def test_online_is_the_replica_lease_and_counts_cover_every_replica(db: Database) -> None:
    now = time.time()

    def setup(s: Session) -> None:
        ids = _enroll(s, 4, allowed=["headless"])
        replica_queries.beat(s, "a", "a:1", now, now, TTL)
        replica_queries.beat(s, "b", "b:1", now, now, TTL)
        worker_queries.claim_presences(
            s,
            [_claim(ids[0], "headless"), _claim(ids[1], "headless", "computer_use")],
            "a",
            now,
            TTL,
        )
        # Streaming to the other replica: counted all the same.
        worker_queries.claim_presences(s, [_claim(ids[2], "headless")], "b", now, TTL)
        worker_queries.set_state(s, ids[1], "draining")

    await db.write(setup)
    index = WorkerIndex()  # what a replica reads from the store (its counts are kept there)
    await db.read(index.read)
    counts = index.counts(now + 1)
    assert [(c.replica, c.online, c.headless, c.computer_use) for c in counts] == [
        ("a", 2, 1, 0),  # the draining one is online, offers nothing; computer use not granted
        ("b", 1, 1, 0),
    ]
    # Replica b stops beating: its workers go offline when its lease lapses, all at once.
    later = now + TTL + 1
    await db.write(replica_queries.beat, "a", "a:1", now, later, TTL)
    await db.read(index.read)
    assert [(c.replica, c.online) for c in index.counts(later)] == [("a", 2)]
    rows = await db.read(worker_queries.workers_with_presence, include_revoked=False)
    online = {w.id: view_of(w, p, later).online for w, p in rows}
    assert online == {"wrk_000": True, "wrk_001": True, "wrk_002": False, "wrk_003": False}
    # Nothing about the workers was written to keep them online.
    await db.write(worker_queries.release_presences, [("wrk_000", "ses_wrk_000")])
    await db.read(index.read, ["wrk_000"])
    assert [(c.replica, c.online) for c in index.counts(later)] == [("a", 1)]


async def test_pages_walk_every_worker_exactly_once_with_filters(db: Database) -> None:
    now = time.time()

    def setup(s: Session) -> list[str]:
        ids = _enroll(s, 10)
        replica_queries.beat(s, "a", "a:1", now, now, TTL)
        worker_queries.claim_presences(s, [_claim(w, "headless") for w in ids[::2]], "a", now, TTL)
        return ids

    ids = await db.write(setup)

    async def walk(where: worker_queries.WorkerFilter, limit: int) -> list[str]:
        seen: list[str] = []
        after = None
        while True:
            page, more = await db.read(worker_queries.workers_page, where, after, limit, now)
            seen += [w.id for w, _ in page]
            if not more:
                return seen
            last = page[-1][0]
            after = parse_page_token(page_token(last.enrolled_at, last.id))

    assert await walk(worker_queries.WorkerFilter(), 3) == ids
    assert await walk(worker_queries.WorkerFilter(), 10) == ids
    assert await walk(worker_queries.WorkerFilter(online=True), 2) == ids[::2]
    assert await walk(worker_queries.WorkerFilter(online=False), 4) == ids[1::2]
    assert await walk(worker_queries.WorkerFilter(capability="headless"), 1) == ids[::2]
    assert await walk(worker_queries.WorkerFilter(replica="b"), 5) == []


async def test_the_text_filter_finds_ids_names_replicas_and_labels_ignoring_case(
    db: Database,
) -> None:
    now = time.time()

    def setup(s: Session) -> list[str]:
        ids = _enroll(s, 4)
        for worker_id, labels in zip(
            ids, ({"site": "Lab"}, {"site": "home"}, {"room": "lab_2%"}, {}), strict=True
        ):
            s.get(WorkerRow, worker_id).labels = labels  # type: ignore[union-attr]
        replica_queries.beat(s, "east", "east:1", now, now, TTL)
        worker_queries.claim_presences(s, [_claim(ids[3], "headless")], "east", now, TTL)
        return ids

    ids = await db.write(setup)

    async def found(text: str) -> list[str]:
        where = worker_queries.WorkerFilter(text=text)
        page, _ = await db.read(worker_queries.workers_page, where, None, 50, now)
        return [w.id for w, _ in page]

    assert await found("WRK_001") == [ids[1]]
    assert await found("w2") == [ids[2]]
    assert await found("lab") == [ids[0], ids[2]]
    assert await found("site=lab") == [ids[0]]  # the pair, not any key's "lab"
    assert await found("2%") == [ids[2]]  # LIKE's wildcards are plain characters
    assert await found("EAST") == [ids[3]]
    assert await found("nowhere") == []


async def test_connects_of_a_moment_are_one_write_and_the_welcome_learns_rotation(
    db: Database,
) -> None:
    def setup(s: Session) -> None:
        _enroll(s, 50)
        s.get_one(WorkerRow, "wrk_007").rotation_requested = True
        replica_queries.beat(s, "r", "r:1", time.time(), time.time(), TTL)

    await db.write(setup)
    writes = 0
    real_write = db.write

    async def counting_write(*args: object, **kw: object) -> object:
        nonlocal writes
        writes += 1
        return await real_write(*args, **kw)  # type: ignore[arg-type]

    db.write = counting_write  # type: ignore[method-assign]
    config = CoordinatorConfig(db_url="", replica="r")
    advertisement = Advertisement.from_json({})
    updates = IndexUpdates(db, WorkerIndex())
    async with updates, Presence(db, config, updates) as presence:
        assert updates.index.snapshot(time.time()).online == 0
        sessions = await asyncio.gather(
            *(presence.open(f"wrk_{i:03d}", advertisement) for i in range(50))
        )
        assert writes == 1
        assert [s.worker_id for s in sessions if s.rotate_credential] == ["wrk_007"]
        assert presence.connected == 50
        # Routing knows of the connects once they are welcomed, without a fleet read of its own.
        assert updates.index.snapshot(time.time()).online == 50
        for session in sessions:
            await presence.close(session)
        for _ in range(100):  # the disconnects' write, then the index reading them back
            if updates.index.snapshot(time.time()).online == 0:
                break
            await asyncio.sleep(0.05)
        assert writes == 2
        assert updates.index.snapshot(time.time()).online == 0
    rows = await db.read(worker_queries.workers_with_presence, include_revoked=True)
    assert [p for _, p in rows if p is not None] == []  # every presence row released
