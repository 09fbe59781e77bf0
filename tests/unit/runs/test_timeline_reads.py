"""A timeline read again and again while its run goes on (a status board polling GetRun):
only the events since the last read are read, and the timeline is the one a fresh read of
the whole journal builds, cut at the run row of the reader's own snapshot. In-process, on a
store built by the real migrations."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.orm import Session

from coordinator.runs import timeline
from coordinator.store import Database, journal, runs as run_queries
from coordinator.store.models import RunRow
from coordinator.store.schema import upgrade
from shared.ids import new_id


def _new_run(s: Session, run_id: str) -> None:
    now = time.time()
    s.add(
        RunRow(
            id=run_id,
            owner_id="usr_owner",
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
    yield store
    await store.close()


async def _append(db: Database, run_id: str, *events: tuple[str, dict[str, Any]]) -> None:
    def unit(s: Session) -> None:
        run = run_queries.run_for_update(s, run_id)
        assert run is not None
        for kind, data in events:
            journal.append(s, run, kind, data)

    await db.write(unit)


def _fresh(s: Session, run_id: str, now: float) -> timeline.Timeline:
    """What the whole journal builds, read and decoded anew."""
    rows = run_queries.journal_after(s, run_id, 0, 10_000)
    return timeline.build(timeline.entries(rows), now)


def _dispatched(i: int) -> tuple[str, dict[str, Any]]:
    return ("action.dispatched", {"action": f"act_{i}", "index": i, "kind": "diag.echo",
                                  "attempt": f"att_{i}", "epoch": 1, "worker": "wkr_a",
                                  "attempt_number": 1})  # fmt: skip


def _receipt(i: int) -> tuple[str, dict[str, Any]]:
    return ("receipt", {"action": f"act_{i}", "attempt": f"att_{i}", "epoch": 1,
                        "status": "succeeded", "receipt": f"rcp_{i}", "sha256": "", "error": "",
                        "result": {"value": i}})  # fmt: skip


def _statements_on_journal(db: Database) -> list[Any]:
    """The parameters of each statement on the journal the reads make."""
    seen: list[Any] = []

    def note(conn: Any, cursor: Any, statement: str, parameters: Any, *rest: Any) -> None:
        if "FROM journal" in statement:
            seen.append(parameters)

    event.listen(db._reader, "before_cursor_execute", note)  # the reads of db.read
    return seen


async def test_a_polled_timeline_reads_only_new_events_and_equals_a_fresh_build(
    db: Database,
) -> None:
    run_id = new_id("run")
    await db.write(_new_run, run_id)
    await _append(db, run_id, ("run.submitted", {"actions": 6}))
    rows_read: list[int] = []
    after_seq: list[int] = []

    def polled(s: Session) -> tuple[timeline.Timeline, timeline.Timeline]:
        run = s.get(RunRow, run_id)
        assert run is not None
        now = time.time()
        before = len(_seen)
        got = timeline.of_run(s, run_id, now, run.last_seq)
        rows_read.append(len(_seen) - before)
        after_seq.append(_seen[-1][1])  # (run_id, seq > ?, limit)
        return got, _fresh(s, run_id, now)

    _seen = _statements_on_journal(db)
    for i in range(6):
        await _append(db, run_id, _dispatched(i))
        got, fresh = await db.read(polled)
        assert got == fresh
        await _append(db, run_id, _receipt(i))
        got, fresh = await db.read(polled)
        assert got == fresh
    assert len(got.attempts) == 6 and all(a.status == "SUCCEEDED" for a in got.attempts)
    # Each poll read the journal once past what it had: one statement, not a page per 1,000.
    assert rows_read == [1] * 12
    # ... and only past the events it had decoded: the whole journal was read once.
    assert after_seq == [0, *range(2, 13)]


async def test_a_reader_behind_the_newest_decoding_sees_its_own_snapshot(db: Database) -> None:
    """A read whose snapshot holds fewer events than were decoded already (a newer read ran
    first on another thread) is cut at its own run row: its status and timeline agree."""
    run_id = new_id("run")
    await db.write(_new_run, run_id)
    await _append(db, run_id, ("run.submitted", {"actions": 2}), _dispatched(0))

    def at(upto: int) -> Any:
        def unit(s: Session) -> timeline.Timeline:
            return timeline.of_run(s, run_id, 1e12, upto)

        return unit

    await _append(db, run_id, _receipt(0), _dispatched(1))
    newest = await db.read(at(4))
    older = await db.read(at(2))  # as a snapshot taken before the last two events would
    assert len(newest.attempts) == 2
    assert len(older.attempts) == 1 and older.attempts[0].status != "SUCCEEDED"

    def fresh2(s: Session) -> timeline.Timeline:
        rows = run_queries.journal_after(s, run_id, 0, 2)
        return timeline.build(timeline.entries(rows), 1e12)

    assert older == await db.read(fresh2)


def _entries(n: int) -> tuple[timeline.JournalEntry, ...]:
    return tuple(timeline.JournalEntry(i + 1, "action.started", 0.0, {}) for i in range(n))


def test_the_decoded_journals_kept_are_bounded_in_runs_and_in_events() -> None:
    """An owner polling many long runs cannot grow a replica's memory without end."""
    kept = timeline._Entries(runs=3, events=100)
    for i in range(5):
        kept.put(f"run_{i}", _entries(10))
    assert kept.held == (3, 30)  # the runs read longest ago went first
    assert kept.get("run_0") == () and len(kept.get("run_4")) == 10
    kept.put("run_big", _entries(26))  # past a quarter of the bound alone: read whole each time
    assert kept.get("run_big") == () and kept.held == (3, 30)
    kept.put("run_4", _entries(25))
    kept.put("run_5", _entries(25))
    kept.put("run_6", _entries(25))
    kept.put("run_7", _entries(25))
    runs, events = kept.held
    assert events <= 100 and runs <= 3
    kept.put("run_7", _entries(24))  # an older snapshot's read never shrinks what is kept
    assert len(kept.get("run_7")) == 25
    kept.put("run_7", _entries(30))  # the run grew past the bound: no longer kept
    assert kept.get("run_7") == () and kept.held[1] <= 75


def test_the_decoded_journals_kept_are_bounded_in_the_characters_they_came_from() -> None:
    """Events carrying results of thousands of characters are bounded by what they hold,
    not only by their number."""
    kept = timeline._Entries(runs=100, events=1000, chars=40_000)
    for i in range(5):
        kept.put(f"run_{i}", _entries(2), chars=9_000)
    assert kept.held == (4, 8)  # 36,000 characters: the fifth run pushed the first out
    assert kept.get("run_0") == ()
    kept.put("run_big", _entries(2), chars=10_001)  # past a quarter alone: not kept
    assert kept.get("run_big") == () and kept.held == (4, 8)
    kept.put("run_4", _entries(3), chars=9_500)  # a run that grew is counted anew, once
    assert kept.chars_of("run_4") == 9_500 and kept.held == (4, 9)
