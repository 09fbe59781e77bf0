"""Journal search on both stores (SQLite and PostgreSQL): quotes, backslashes and non-ASCII
text are found, an oversized cursor is a bad argument, and a value the store refuses is a
defect, not an outage. Search and paging in process are tests/unit/runs/test_recall.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from coordinator.store import Database
from tests.harness import CoordinatorProcess, journal, submit, write_plan


@pytest.fixture(params=["sqlite", "postgresql"])
def store_coordinator(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[CoordinatorProcess]:
    db_url = None
    if request.param == "postgresql":
        db_url = request.getfixturevalue("pg_url")
    proc = CoordinatorProcess(tmp_path / "coord", db_url).start()
    yield proc
    proc.stop()


TRICKY = ['say "hi"', "café", "back\\slash", "100%_sure"]


@pytest.mark.slow
def test_search_finds_quotes_backslashes_and_non_ascii_on_both_stores(
    store_coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    coordinator = store_coordinator
    # No worker: the run waits, and its submission event holds the title and the intents.
    plan = write_plan(
        tmp_path / "plan.json",
        [{"kind": "diag.echo", "args": {"value": "x"}, "intent": f"intent {t}"} for t in TRICKY],
        title=" / ".join(TRICKY),
    )
    run = submit(coordinator, plan)
    submitted = next(e for e in journal(coordinator, run["id"]) if e["kind"] == "run.submitted")
    for query in TRICKY:
        found = coordinator.cli_json("journal", "search", run["id"], query)
        # Once in the title, once in an intent.
        assert [m["seq"] for m in found["matches"]] == [submitted["seq"]] * 2, query
        assert json.dumps(query)[1:-1] in found["matches"][0]["excerpt"]
    for absent in ("u00e9", "100%_surf", 'say \\"hi'):
        found = coordinator.cli_json("journal", "search", run["id"], absent)
        assert found["matches"] == [], absent


@pytest.mark.slow
@pytest.mark.postgres
def test_an_oversized_cursor_is_a_bad_argument_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    coordinator = CoordinatorProcess(tmp_path / "coord", pg_url).start()
    try:
        plan = write_plan(tmp_path / "plan.json", [{"kind": "diag.echo", "args": {"value": "x"}}])
        run = submit(coordinator, plan)
        for cursor in ("99999999999999999999999:1", "2147483648:0", "-1:0"):
            args = ("journal", "search", run["id"], "echo", f"--cursor={cursor}")
            done = coordinator.cli(*args, check=False)
            assert done.returncode == 2, done.stderr  # INVALID_ARGUMENT, not UNAVAILABLE (5)
            assert done.stderr.startswith("deskfleet: cursor: not a cursor"), done.stderr
            assert "integer" not in done.stderr and "range" not in done.stderr
        page = coordinator.cli_json("journal", "search", run["id"], "echo", "--cursor", "1:0")
        assert page["matches"]
    finally:
        coordinator.stop()


@pytest.mark.postgres
async def test_a_value_the_store_refuses_is_a_defect_not_an_outage(pg_url: str) -> None:
    """Were a check ever missed, the store's refusal of a value is INTERNAL with a reference
    (its words only in the log), never UNAVAILABLE: that means the store cannot be reached."""
    from shared.errors import InternalError, StoreUnavailableError

    db = Database(pg_url)
    try:

        def overflow(s: Session) -> object:
            return s.execute(text("SELECT CAST(:n AS integer)"), {"n": 2**40}).scalar()

        with pytest.raises(InternalError) as failed:
            await db.read(overflow)
        assert not isinstance(failed.value, StoreUnavailableError)
        assert failed.value.message.startswith("internal error (ref err_")
        assert "range" not in failed.value.message
    finally:
        await db.close()
