"""The worker index in process (milliseconds): what routing sees after connects, disconnects,
drains, revocations, label changes and replica leases, read from a SQLite store."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, delete, update
from sqlalchemy.orm import Session

from coordinator.store import Database, workers as worker_queries
from coordinator.store.engine import create_store_engine
from coordinator.store.models import Base, PresenceRow, ReplicaRow, WorkerRow
from coordinator.store.schema import upgrade
from coordinator.streams.worker_index import ELIGIBLE_CACHE, IndexUpdates, WorkerIndex

HEADLESS = {"capabilities": [{"name": "headless", "available": True}]}


class Fleet:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.index = WorkerIndex()
        self.started = time.time() - 60

    def replica(self, name: str, *, ttl: float = 3600.0, started: float | None = None) -> None:
        now = time.time()
        with Session(self.engine) as s, s.begin():
            s.merge(
                ReplicaRow(
                    name=name,
                    address=f"{name}:1",
                    started_at=self.started if started is None else started,
                    seen_at=now,
                    lease_expires_at=now + ttl,
                )
            )

    def enroll(self, worker_id: str, **labels: str) -> None:
        with Session(self.engine) as s, s.begin():
            s.add(
                WorkerRow(
                    id=worker_id,
                    name=worker_id,
                    secret_hash=f"h-{worker_id}",
                    state="active",
                    labels=labels,
                    allowed_capabilities=[],
                    advertisement={},
                    enrolled_at=time.time(),
                    enrollment_token_id="t",
                )
            )

    def connect(
        self, worker_id: str, replica: str = "r1", advertisement: dict[str, Any] | None = None
    ) -> None:
        now = time.time()
        with Session(self.engine) as s, s.begin():
            s.execute(delete(PresenceRow).where(PresenceRow.worker_id == worker_id))
            s.execute(
                update(WorkerRow)
                .where(WorkerRow.id == worker_id)
                .values(advertisement=advertisement or HEADLESS)
            )
            s.add(
                PresenceRow(
                    worker_id=worker_id,
                    replica=replica,
                    session_id=f"ses-{worker_id}-{now}",
                    connected_at=now,
                    last_heartbeat_at=now,
                    lease_expires_at=now + 15,
                )
            )

    def disconnect(self, worker_id: str) -> None:
        with Session(self.engine) as s, s.begin():
            s.execute(delete(PresenceRow).where(PresenceRow.worker_id == worker_id))

    def set(self, worker_id: str, **values: Any) -> None:
        with Session(self.engine) as s, s.begin():
            s.execute(update(WorkerRow).where(WorkerRow.id == worker_id).values(**values))

    def read(self, *worker_ids: str) -> None:
        """What a replica does after a change it made or was told of (all: its full read)."""
        with Session(self.engine) as s:
            self.index.read(s, list(worker_ids) if worker_ids else None)

    def online(self) -> set[str]:
        return {v.id for v in self.index.snapshot(time.time()) if v.online}

    def eligible(self, capability: str = "", app: str = "", **labels: str) -> list[str]:
        snapshot = self.index.snapshot(time.time())
        return [v.id for v in snapshot.eligible(capability, labels, app)]


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    engine = create_store_engine(f"sqlite:///{tmp_path / 'index.db'}")
    Base.metadata.create_all(engine)
    made = Fleet(engine)
    made.replica("r1")
    yield made
    engine.dispose()


def test_connects_and_disconnects_change_who_is_online_only_once_read(fleet: Fleet) -> None:
    fleet.enroll("w1")
    fleet.enroll("w2")
    fleet.read()
    assert fleet.online() == set()
    assert {v.id for v in fleet.index.snapshot(time.time())} == {"w1", "w2"}  # offline, known

    fleet.connect("w1")
    fleet.connect("w2")
    assert fleet.online() == set()  # the index reads the store, it does not watch it
    fleet.read("w1", "w2")
    assert fleet.online() == {"w1", "w2"}
    assert fleet.eligible("headless") == ["w1", "w2"]

    fleet.disconnect("w1")
    fleet.read("w1")
    assert fleet.online() == {"w2"}
    assert fleet.index.snapshot(time.time()).get("w1") is not None  # still enrolled
    assert fleet.eligible("headless") == ["w2"]


def test_drained_and_revoked_workers_take_no_new_work(fleet: Fleet) -> None:
    for w in ("w1", "w2", "w3"):
        fleet.enroll(w)
        fleet.connect(w)
    fleet.read()
    assert fleet.eligible() == ["w1", "w2", "w3"]

    fleet.set("w1", state="draining")
    fleet.set("w2", state="revoked", revoked_at=time.time())
    fleet.read("w1", "w2")
    snapshot = fleet.index.snapshot(time.time())
    assert fleet.eligible() == ["w3"]
    assert snapshot.serving == {"w3"}
    w1, w2 = snapshot.get("w1"), snapshot.get("w2")
    assert w1 is not None and w1.online and w1.state == "draining"  # online, not serving
    assert w2 is not None and not w2.online and w2.state == "revoked"  # a revoked one is never

    fleet.set("w1", state="active")
    fleet.read("w1")
    assert fleet.eligible() == ["w1", "w3"]


def test_labels_capabilities_and_apps_select_workers(fleet: Fleet) -> None:
    fleet.enroll("gpu", pool="gpu")
    fleet.enroll("cpu", pool="cpu")
    fleet.enroll("app", pool="cpu")
    fleet.connect("gpu")
    fleet.connect("cpu", advertisement={"capabilities": []})
    fleet.connect("app", advertisement={**HEADLESS, "research_apps": ["notes"]})
    fleet.read()
    assert fleet.eligible(pool="gpu") == ["gpu"]
    assert fleet.eligible("headless", pool="cpu") == ["app"]
    assert fleet.eligible("headless") == ["app", "gpu"]
    assert fleet.eligible(app="notes") == ["app"]
    assert fleet.eligible(pool="none") == []

    fleet.set("cpu", labels={"pool": "gpu"})  # a label changed in the store
    fleet.read("cpu")
    assert fleet.eligible(pool="gpu") == ["cpu", "gpu"]


def test_a_capability_the_token_did_not_grant_is_not_offered(fleet: Fleet) -> None:
    fleet.enroll("w")
    fleet.set("w", allowed_capabilities=["computer_use"])
    fleet.connect("w")
    fleet.read()
    assert fleet.eligible("headless") == []
    assert fleet.eligible() == ["w"]


def test_a_reconnect_brings_its_new_advertisement(fleet: Fleet) -> None:
    fleet.enroll("w")
    fleet.connect("w", advertisement={"capabilities": []})
    fleet.read()
    assert fleet.eligible("headless") == []
    fleet.connect("w")  # a new session with headless available
    fleet.read("w")
    assert fleet.eligible("headless") == ["w"]


def test_workers_go_offline_with_their_replicas_lease_and_with_its_restart(fleet: Fleet) -> None:
    fleet.replica("r2")
    fleet.enroll("here")
    fleet.enroll("there")
    fleet.connect("here", "r1")
    fleet.connect("there", "r2")
    fleet.read()
    assert fleet.online() == {"here", "there"}

    # r2 stops renewing: its workers go offline when its lease lapses, with no row changed.
    fleet.replica("r2", ttl=-1)
    fleet.read()
    assert fleet.online() == {"here"}
    fleet.replica("r2")
    fleet.index.set_leases(_leases(fleet))  # as a relay beat brings them
    assert fleet.online() == {"here", "there"}

    # r2's process restarts: rows of its previous process are stale until it clears them.
    fleet.replica("r2", started=time.time() + 1)
    fleet.index.set_leases(_leases(fleet))
    assert fleet.online() == {"here"}


def test_a_snapshot_is_kept_until_something_changes(fleet: Fleet) -> None:
    fleet.enroll("w")
    fleet.connect("w")
    fleet.read()
    first = fleet.index.snapshot(time.time())
    assert fleet.index.snapshot(time.time()) is first
    fleet.read("w")  # read again, unchanged
    assert fleet.index.snapshot(time.time()) is first
    fleet.set("w", state="draining")
    fleet.read("w")
    assert fleet.index.snapshot(time.time()) is not first
    assert first.serving == {"w"}  # what a transaction already took does not change under it


def test_a_worker_gone_from_the_store_leaves_the_index(fleet: Fleet) -> None:
    fleet.enroll("w")
    fleet.connect("w")
    fleet.read()
    with Session(fleet.engine) as s, s.begin():
        s.execute(delete(PresenceRow))
        s.execute(delete(WorkerRow))
    fleet.read("w")
    assert fleet.index.snapshot(time.time()).get("w") is None


def test_many_route_shapes_do_not_grow_a_snapshot_without_bound(fleet: Fleet) -> None:
    fleet.enroll("w")
    fleet.connect("w")
    fleet.read()
    snapshot = fleet.index.snapshot(time.time())
    for i in range(1000):  # an owner may name any labels
        assert snapshot.eligible("", {"k": str(i)}, "") == ()
    assert len(snapshot._eligible) <= ELIGIBLE_CACHE


def _recount(fleet: Fleet, now: float) -> list[tuple[str, int, int, int]]:
    """The counts worked out from scratch from every view (what a status used to aggregate)."""
    by: dict[str, list[int]] = {}
    for view in fleet.index.snapshot(now):
        if view.online:
            tally = by.setdefault(view.replica, [0, 0, 0])
            tally[0] += 1
            tally[1] += view.offers("headless")
            tally[2] += view.offers("computer_use")
    return [(r, *t) for r, t in sorted(by.items())]  # type: ignore[misc]


def test_the_counts_kept_with_each_change_equal_a_recount_of_the_fleet(fleet: Fleet) -> None:
    """Counts move with every view change instead of being aggregated per status: after each
    of a random walk of connects, disconnects, drains, revocations, grants, removals, lease
    lapses and replica restarts, they equal a count of the whole fleet."""
    both = {
        "capabilities": [*HEADLESS["capabilities"], {"name": "computer_use", "available": True}]
    }
    fleet.replica("r2")
    workers = [f"w{i:02d}" for i in range(12)]
    for worker in workers:
        fleet.enroll(worker)
    fleet.read()
    pick = random.Random(20261202)
    seen = set()
    for _ in range(300):
        worker, replica = pick.choice(workers), pick.choice(("r1", "r2"))
        step = pick.choice(
            ("connect", "connect", "disconnect", "state", "grant", "lease", "restart", "remove")
        )
        if step == "connect":
            fleet.connect(worker, replica, pick.choice((HEADLESS, both, {})))
        elif step == "disconnect":
            fleet.disconnect(worker)
        elif step == "state":
            fleet.set(worker, state=pick.choice(("active", "draining", "revoked")))
        elif step == "grant":
            fleet.set(
                worker, allowed_capabilities=pick.choice(([], ["headless"], ["computer_use"]))
            )
        elif step == "lease":  # a lease lapses or runs again, as a relay beat tells
            fleet.replica(replica, ttl=pick.choice((-1.0, 3600.0)))
        elif step == "restart":  # rows of the previous process stop counting
            fleet.replica(replica, started=time.time() + pick.choice((-120.0, 1.0)))
        elif step == "remove" and worker in workers[:3]:
            with Session(fleet.engine) as s, s.begin():
                s.execute(delete(PresenceRow).where(PresenceRow.worker_id == worker))
                s.execute(delete(WorkerRow).where(WorkerRow.id == worker))
            workers.remove(worker)
        if step in ("lease", "restart"):
            fleet.index.set_leases(_leases(fleet))
        else:
            fleet.read(worker)
        now = time.time()
        counts = [
            (c.replica, c.online, c.headless, c.computer_use) for c in fleet.index.counts(now)
        ]
        assert counts == _recount(fleet, now), step
        seen.add(tuple(counts))
    assert len(seen) > 20  # the walk went through many different fleets, not one


def _leases(fleet: Fleet) -> list[tuple[str, float, float]]:
    with Session(fleet.engine) as s:
        return worker_queries.replica_leases(s)


async def test_updates_merge_the_changes_told_while_a_read_is_under_way(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'updates.db'}"
    await asyncio.to_thread(upgrade, url)
    db = Database(url)
    try:
        fleet = Fleet(create_store_engine(url))
        fleet.replica("r1")
        for w in ("w1", "w2", "w3"):
            fleet.enroll(w)
        reads = 0
        real_read = db.read

        async def counting_read(*args: object, **kw: object) -> object:
            nonlocal reads
            reads += 1
            return await real_read(*args, **kw)  # type: ignore[arg-type]

        db.read = counting_read  # type: ignore[method-assign]
        updates = IndexUpdates(db, fleet.index)
        async with updates:
            assert reads == 1  # the start reads the whole fleet
            for w in ("w1", "w2", "w3"):
                fleet.connect(w)
            # Told of three changes at once, the index reads them in one go.
            updates.mark(["w1"])
            updates.mark(["w2"])
            await updates.refresh(["w3"])
            assert reads == 2
            assert fleet.online() == {"w1", "w2", "w3"}
            fleet.disconnect("w2")
            await updates.refresh(None)
            assert fleet.online() == {"w1", "w3"}
        fleet.engine.dispose()
    finally:
        await db.close()
