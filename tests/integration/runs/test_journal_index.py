"""Journal search on a running coordinator: what it journals is found at once. The index's
rules on a store in process are tests/unit/runs/test_journal_index.py."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text
from sqlalchemy.orm import Session

from coordinator.store import search
from coordinator.store.schema import sync_engine
from tests.harness import CoordinatorProcess, submit, wait_until, write_plan


def test_a_running_coordinator_indexes_what_it_journals(tmp_path: Path) -> None:
    coordinator = CoordinatorProcess(tmp_path / "coord").start()
    try:
        plan = write_plan(
            tmp_path / "plan.json", [{"kind": "diag.echo", "args": {"value": "x"}}], title="kelp"
        )
        run = submit(coordinator, plan)  # no worker: the run waits, its events are written
        engine = sync_engine(coordinator.db_url)
        try:

            def caught_up() -> bool:
                with Session(engine) as s:
                    return search.indexed_to(s) == search.last_event(s) > 0

            wait_until(caught_up, 30, 0.1, "the indexer to index the run's events")
            with Session(engine) as s:
                only_index = s.execute(
                    text("SELECT count(*) FROM journal_fts WHERE data LIKE '%kelp%'")
                ).scalar()
            assert only_index == 1  # the submission event, from the index itself
        finally:
            engine.dispose()
        found = coordinator.cli_json("journal", "search", run["id"], "kelp")
        assert len(found["matches"]) == 1
    finally:
        coordinator.stop()
