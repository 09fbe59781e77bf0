"""Journal search with the index filled behind the journal (SQLite), in-process on a store
built by the real migrations: an event is found as soon as it is written, exactly once
before and after the indexer reaches it, through deletes, archives, a failed batch and a
restart of the indexer."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import MetaData, Table, text
from sqlalchemy.orm import Session

from coordinator.model.identity import Principal, Role
from coordinator.runs.indexer import JournalIndexer
from coordinator.runs.recall import Recall
from coordinator.store import Database, journal, runs as run_queries, search
from coordinator.store.models import JournalRow, RunRow
from coordinator.store.schema import _config, sync_engine, upgrade

OWNER = Principal("usr_owner", "owner", Role.OWNER)
RUN = "run_search"


def _new_run(s: Session) -> None:
    now = time.time()
    s.add(
        RunRow(
            id=RUN,
            owner_id=OWNER.id,
            title="t",
            status="RUNNING",
            limits={},
            estimate_actions=1,
            estimate_seconds=1.0,
            actions_total=1,
            trace_id="0" * 32,
            created_at=now,
            updated_at=now,
        )
    )


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    store = Database(url)
    await store.write(_new_run)
    yield store
    await store.close()


async def append(db: Database, *events: dict[str, Any]) -> list[int]:
    def unit(s: Session) -> list[int]:
        run = run_queries.run_for_update(s, RUN)
        assert run is not None
        return [journal.append(s, run, "note", data) for data in events]

    return await db.write(unit)


async def found(db: Database, query: str) -> list[int]:
    page = await Recall(db).search(OWNER, RUN, query, "", 100)
    return [m.seq for m in page.matches]


async def indexed(db: Database, word: str) -> list[int]:
    """Seqs of the events the index alone finds (not the events read past its mark)."""

    def unit(s: Session) -> list[int]:
        rows = s.execute(
            text(
                "SELECT journal.seq FROM journal_fts"
                " JOIN journal ON journal.rowid = journal_fts.rowid"
                " WHERE journal_fts.data LIKE :p ORDER BY journal.seq"
            ),
            {"p": f"%{word}%"},
        )
        return [int(seq) for (seq,) in rows]

    return await db.read(unit)


async def consistent(db: Database) -> None:
    """FTS5 checks its index against the journal: every event in it once, none missing."""

    def unit(s: Session) -> None:
        s.execute(text("INSERT INTO journal_fts(journal_fts, rank) VALUES ('integrity-check', 1)"))

    await db.write(unit)


async def test_an_event_is_found_at_once_and_once_after_it_is_indexed(db: Database) -> None:
    indexer = JournalIndexer(db)
    await indexer.catch_up()
    [first] = await append(db, {"text": "a lighthouse keeper"})
    assert await indexed(db, "lighthouse") == []  # not indexed on the write path
    assert await found(db, "lighthouse") == [first]
    assert await indexer.catch_up() == 1
    assert await indexed(db, "lighthouse") == [first]
    assert await found(db, "lighthouse") == [first]
    [second] = await append(db, {"text": "another lighthouse"})
    assert await found(db, "lighthouse") == [first, second]  # one indexed, one past the mark
    await indexer.catch_up()
    assert await found(db, "LightHouse") == [first, second]
    await consistent(db)


async def test_a_failed_batch_leaves_the_mark_and_a_new_indexer_resumes(db: Database) -> None:
    seqs = await append(db, *({"text": f"harbour {i}"} for i in range(7)))

    def dies_before_commit(s: Session) -> None:
        assert search.index_next(s, 100) == 7
        raise RuntimeError("the process died before the commit")

    with pytest.raises(RuntimeError):
        await db.write(dies_before_commit)
    assert await db.read(search.indexed_to) == 0
    assert await indexed(db, "harbour") == []
    assert await found(db, "harbour") == seqs
    # A new indexer (a restarted coordinator) starts from the mark, in batches.
    assert await JournalIndexer(db, batch=3).catch_up() == 7
    assert await db.read(search.indexed_to) == await db.read(search.last_event)
    assert await indexed(db, "harbour") == seqs
    assert await found(db, "harbour") == seqs
    await consistent(db)


async def test_deleted_events_leave_the_index_and_rowids_given_again_are_indexed(
    db: Database,
) -> None:
    indexer = JournalIndexer(db)
    seqs = await append(db, *({"text": f"ferry {i}"} for i in range(4)))
    await indexer.catch_up()
    unindexed = await append(db, {"text": "ferry late"})

    def delete(s: Session, seq: int) -> None:
        s.execute(text("DELETE FROM journal WHERE run_id = :r AND seq = :q"), {"r": RUN, "q": seq})

    await db.write(delete, unindexed[0])  # past the mark: the index never held it
    await db.write(delete, seqs[-1])  # the last indexed event: its rowid will be given again
    assert await found(db, "ferry") == seqs[:-1]
    await consistent(db)
    [again] = await append(db, {"text": "ferry again"})
    assert await found(db, "ferry") == [*seqs[:-1], again]
    await indexer.catch_up()
    assert await indexed(db, "ferry") == [*seqs[:-1], again]
    await consistent(db)


async def test_archived_events_are_candidates_before_and_after_indexing(db: Database) -> None:
    [archived] = await append(db, {"result_preview": "...", "archive": {"receipt": "rcp_x"}})
    [plain] = await append(db, {"text": "nothing here"})

    def candidates(s: Session) -> list[int]:
        return [r.seq for r in run_queries.journal_candidates(s, RUN, 0, "zyzzyva", 100)]

    assert await db.read(candidates) == [archived]
    await JournalIndexer(db).catch_up()
    assert await db.read(candidates) == [archived]
    assert plain not in await db.read(candidates)


def test_a_store_indexed_by_the_old_trigger_keeps_its_index(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = sync_engine(url)
    cfg = _config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0014_replica_presence")
    # The run is written with that schema's columns (the model has today's), its journal by
    # today's code, which writes the same journal rows.
    with Session(engine) as s, s.begin():
        then = {row[1] for row in s.execute(text("PRAGMA table_info(runs)"))}
        _new_run(s)
        run = next(iter(s.new))
        s.expunge(run)
        values: dict[str, Any] = {}
        for column in RunRow.__table__.columns:
            value = getattr(run, column.key, None)
            if value is None and column.default is not None and column.default.is_scalar:
                value = column.default.arg
            if column.name in then and value is not None:
                values[column.name] = value
        # Into the table as that schema has it: today's table would add today's defaults.
        then_runs = Table("runs", MetaData(), autoload_with=s.connection())
        s.execute(then_runs.insert().values(values))
        run.last_seq, run.last_hash = 0, ""
        for i in range(3):
            journal.append(s, run, "note", {"text": f"meadow {i}"})
        s.flush()  # the journal rows; the run row stays as inserted (it is not in the session)
    engine.dispose()
    upgrade(url)
    engine = sync_engine(url)
    try:
        with Session(engine) as s:
            assert search.indexed_to(s) == search.last_event(s) > 0
            rows = s.execute(
                text("SELECT count(*) FROM journal_fts WHERE data LIKE '%meadow%'")
            ).scalar()
            assert rows == 3
            assert len(run_queries.journal_candidates(s, RUN, 0, "meadow", 100)) == 3
            assert s.query(JournalRow).count() == 3
    finally:
        engine.dispose()
