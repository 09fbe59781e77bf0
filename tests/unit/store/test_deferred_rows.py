"""Journal events and receipts are queued in their transaction and written as one Core
statement per table at commit, after the ORM's own flush: a read inside the transaction still
sees them, a transaction that fails writes none of them, and a new run's first events land
with it. In-process, on a store built by the real migrations."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, func, select, text
from sqlalchemy.orm import Session

from coordinator.store import Database, deferred, journal, runs as run_queries
from coordinator.store.models import ActionRow, JournalRow, ReceiptRow, RunRow
from coordinator.store.schema import upgrade
from shared.ids import new_id
from shared.receipts import content_hash


def _run(run_id: str) -> RunRow:
    now = time.time()
    return RunRow(
        id=run_id,
        owner_id="usr_owner",
        title="t",
        status="RUNNING",
        limits={},
        estimate_actions=1,
        estimate_seconds=1.0,
        actions_total=1,
        trace_id="0" * 32,
        last_seq=0,
        last_hash="",
        created_at=now,
        updated_at=now,
    )


def _action(run_id: str) -> ActionRow:
    return ActionRow(
        id=new_id("act"),
        run_id=run_id,
        idx=0,
        stage=0,
        kind="noop",
        intent="noop",
        args="{}",
        fingerprint="f",
        idempotent=True,
        route={},
        status="PENDING",
        worker_id="",
        attempt_id="",
        epoch=0,
        attempts=0,
        timeout_seconds=5.0,
        error="",
        origin="",
        receipt_id="",
        postcondition="",
        check_state="",
    )


def _receipt(run_id: str, action_id: str) -> dict[str, Any]:
    body = '{"status":"succeeded"}'
    return {
        "id": new_id("rcp"),
        "run_id": run_id,
        "action_id": action_id,
        "attempt_id": "att_1",
        "epoch": 1,
        "worker_id": "wrk_1",
        "status": "succeeded",
        "body": body,
        "sha256": content_hash(body),
        "created_at": time.time(),
        "traceparent": "",
    }


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    store = Database(url)
    yield store
    await store.close()


def _inserts_into(db: Database, table: str) -> list[str]:
    """Each INSERT statement into `table` the writer sends (one per executemany)."""
    seen: list[str] = []

    def on_execute(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if statement.lstrip().upper().startswith(f"INSERT INTO {table.upper()}"):
            seen.append(statement)

    event.listen(db._writer, "before_cursor_execute", on_execute)
    return seen


async def test_a_new_run_and_its_events_commit_together_in_one_statement(db: Database) -> None:
    run_id = new_id("run")
    journal_inserts = _inserts_into(db, "journal")

    def unit(s: Session) -> None:
        run = _run(run_id)
        s.add(run)  # not flushed: the events' foreign key names it
        for i in range(5):
            journal.append(s, run, "note", {"i": i})
        assert len(deferred.queued(s, deferred.JOURNAL)) == 5

    await db.write(unit)

    def check(s: Session) -> tuple[int, journal.Verification]:
        run = s.get(RunRow, run_id)
        assert run is not None
        return run.last_seq, journal.verify(s, run)

    last_seq, verified = await db.read(check)
    assert last_seq == 5
    assert verified.events == 5 and verified.problems == ()
    assert len(journal_inserts) == 1  # five rows, one statement


async def test_reads_inside_the_transaction_see_its_own_queued_rows(db: Database) -> None:
    run_id = new_id("run")

    def unit(s: Session) -> dict[str, Any]:
        run = _run(run_id)
        action = _action(run_id)
        s.add(run)
        s.flush()  # the ORM orders its inserts by relationships, and these rows have none
        s.add(action)
        journal.append(s, run, "first", {})
        seen: dict[str, Any] = {}
        seen["after"] = [r.seq for r in run_queries.journal_after(s, run_id, 0, 10)]
        journal.append(s, run, "second", {})
        seen["tail"] = [r.seq for r in run_queries.journal_tail(s, run_id, 0, 10)]
        receipt = _receipt(run_id, action.id)
        deferred.add(s, deferred.RECEIPTS, receipt)
        found = run_queries.receipt(s, receipt["id"])  # Session.get, not in the identity map
        seen["receipt"] = found.sha256 if found is not None else None
        journal.append(s, run, "third", {})
        # Core columns of the journal's table, no mapped class: the tables it names say.
        seen["core"] = s.execute(
            select(func.count())
            .select_from(deferred.JOURNAL)
            .where(deferred.JOURNAL.c.run_id == run_id)
        ).scalar()
        journal.append(s, run, "fourth", {})
        # A statement that names no table (text) may read anything: it is given everything.
        seen["text"] = s.execute(
            text("SELECT count(*) FROM journal WHERE run_id = :r"), {"r": run_id}
        ).scalar()
        seen["want_receipt"] = receipt["sha256"]
        return seen

    seen = await db.write(unit)
    assert seen["after"] == [1]
    assert seen["tail"] == [1, 2]
    assert seen["receipt"] == seen["want_receipt"]
    assert seen["core"] == 3
    assert seen["text"] == 4


async def test_a_read_of_other_tables_leaves_the_rows_queued(db: Database) -> None:
    run_id = new_id("run")

    def setup(s: Session) -> None:
        s.add(_run(run_id))

    await db.write(setup)
    journal_inserts = _inserts_into(db, "journal")

    def unit(s: Session) -> int:
        run = run_queries.run_for_update(s, run_id)
        assert run is not None
        for i in range(3):
            journal.append(s, run, "note", {"i": i})
            # The hot path's reads between events: runs and actions, not the journal; the
            # open stage's statement names no mapped entity, only actions' columns.
            s.execute(select(ActionRow.id).where(ActionRow.run_id == run_id)).all()
            s.get(RunRow, run_id)
            run_queries.first_open_stage(s, run_id)
        return len(deferred.queued(s, deferred.JOURNAL))

    assert await db.write(unit) == 3  # nothing was written early
    assert len(journal_inserts) == 1

    def count(s: Session) -> int:
        return int(s.scalar(select(func.count()).where(JournalRow.run_id == run_id)) or 0)

    assert await db.read(count) == 3


async def test_a_transaction_that_fails_writes_none_of_its_queued_rows(db: Database) -> None:
    run_id = new_id("run")
    action = _action(run_id)

    def setup(s: Session) -> None:
        s.add(_run(run_id))
        s.flush()
        s.add(action)

    await db.write(setup)

    def unit(s: Session) -> None:
        run = run_queries.run_for_update(s, run_id)
        assert run is not None
        journal.append(s, run, "note", {})
        deferred.add(s, deferred.RECEIPTS, _receipt(run_id, action.id))
        raise RuntimeError("the unit fails after queueing")

    with pytest.raises(RuntimeError):
        await db.write(unit)

    def counts(s: Session) -> tuple[int, int, int]:
        run = s.get(RunRow, run_id)
        assert run is not None
        events = s.scalar(select(func.count()).where(JournalRow.run_id == run_id)) or 0
        receipts = s.scalar(select(func.count()).where(ReceiptRow.run_id == run_id)) or 0
        return run.last_seq, int(events), int(receipts)

    assert await db.read(counts) == (0, 0, 0)


async def test_a_queued_row_that_breaks_a_constraint_fails_the_commit(db: Database) -> None:
    """Written at commit, a bad row still fails its transaction (the ingest then records the
    batch again message by message): the run's head does not move past what was written."""
    run_id = new_id("run")

    def setup(s: Session) -> None:
        run = _run(run_id)
        s.add(run)
        journal.append(s, run, "first", {})

    await db.write(setup)

    def unit(s: Session) -> None:
        run = run_queries.run_for_update(s, run_id)
        assert run is not None
        journal.append(s, run, "second", {})
        run.last_seq = 0  # the next event reuses seq 1: the primary key refuses it
        journal.append(s, run, "duplicate", {})

    with pytest.raises(Exception) as raised:
        await db.write(unit)
    assert "UNIQUE" in str(raised.value) or "constraint" in str(raised.value).lower()

    def head(s: Session) -> tuple[int, int]:
        run = s.get(RunRow, run_id)
        assert run is not None
        events = s.scalar(select(func.count()).where(JournalRow.run_id == run_id)) or 0
        return run.last_seq, int(events)

    assert await db.read(head) == (1, 1)


async def test_plain_reads_in_a_write_transaction_see_its_own_changes(db: Database) -> None:
    """Views read as plain rows on the connection (a stopped run's view for its waiters, in
    the transaction that stopped it) see the transaction's changes, as autoflush did."""
    run_id = new_id("run")
    action = _action(run_id)

    def setup(s: Session) -> None:
        s.add(_run(run_id))
        s.flush()
        s.add(action)

    await db.write(setup)

    def unit(s: Session) -> tuple[list[str], list[int]]:
        row = s.get(ActionRow, action.id)
        assert row is not None
        row.status = "SUCCEEDED"  # dirty in the session, not flushed
        statuses = [a.status for a in run_queries.action_views_of(s, run_id)]
        run = run_queries.run_for_update(s, run_id)
        assert run is not None
        journal.append(s, run, "note", {})  # queued, not written
        seqs = [r.seq for r in run_queries.journal_tail(s, run_id, 0, 10)]
        return statuses, seqs

    assert await db.write(unit) == (["SUCCEEDED"], [1])
