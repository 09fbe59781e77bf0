"""What the store's threads spend in transactions (`Database.busy`, reported on /metrics as
`deskfleet_store_*`), in process on a temporary SQLite store."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from coordinator.store import Database, replicas
from coordinator.store.schema import upgrade


@pytest.fixture
async def db(tmp_path: Path) -> Database:
    url = f"sqlite:///{tmp_path / 'busy.db'}"
    upgrade(url)
    found = Database(url)
    yield found  # type: ignore[misc]
    await found.close()


async def test_a_write_is_counted_with_its_unit_and_its_commit_apart(db: Database) -> None:
    def slow_unit(s: Session) -> None:
        replicas.beat(s, "r1", "", 0.0, 0.0)
        time.sleep(0.05)  # the unit's own time, not the commit's

    await db.write(slow_unit)
    write = db.busy["write"]
    assert write.transactions == 1
    assert write.unit_seconds >= 0.05
    assert 0 < write.commit_seconds < 0.05  # COMMIT and its fsync, not the sleep
    assert write.cpu_seconds < 0.05  # asleep, the thread used no CPU
    assert db.busy["read"].transactions == 0


async def test_a_read_and_a_failed_write_are_counted_and_the_failure_has_no_commit(
    db: Database,
) -> None:
    await db.read(lambda s: s.execute(text("SELECT 1")).scalar())

    def refused(s: Session) -> None:
        replicas.beat(s, "r1", "", 0.0, 0.0)
        time.sleep(0.02)
        raise ValueError("refused")

    with pytest.raises(ValueError):
        await db.write(refused)
    write = db.busy["write"]
    assert db.busy["read"].transactions == 1
    assert write.transactions == 1
    # Everything until the error counts as the unit's, rolling back included; nothing was
    # committed.
    assert write.unit_seconds >= 0.02
    assert write.commit_seconds == 0
