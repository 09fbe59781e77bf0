"""Journal search: what a query finds in stored (canonical ASCII JSON) text, and its cursor.

The rules run in-process; the same searches then run against real coordinators on SQLite and
on PostgreSQL, whose LIKE reads backslashes, `%` and `_` differently.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.recall import MAX_CURSOR_NUMBER, find_all, needle_of, parse_cursor
from coordinator.store.runs import like_escaped
from shared.errors import InvalidArgumentError
from shared.receipts import encode_result
from tests.harness import CoordinatorProcess, journal, submit, write_plan


def _found(text: str, query: str) -> list[int]:
    stored = encode_result({"value": text})
    return list(find_all(stored.lower(), needle_of(query), 0))


@pytest.mark.parametrize("query", ['say "hi"', "café", "back\\slash", "tab\there", "😀", "%_"])
def test_a_query_finds_its_text_in_stored_json(query: str) -> None:
    assert len(_found(f"before {query} after, and {query} again", query)) == 2


def test_a_query_never_matches_inside_an_escape() -> None:
    assert _found("café", "u00e9") == []  # é is stored as \u00e9
    assert _found("line\nbreak", "nbreak") == []  # the newline is stored as \n
    assert _found("a\\nb", "\n") == []  # a backslash then n is not a newline
    assert _found("a\\nb", "\\n") != []
    assert _found("\\\\u00e9", "u00e9") != []  # two backslashes, then plain text
    assert _found('say "hi"', 'hi"') != []


def test_case_is_ignored_for_ascii_letters() -> None:
    assert len(_found("Café CAFÉ", "CAF")) == 2


def test_like_patterns_escape_backslash_percent_and_underscore() -> None:
    assert like_escaped(r"say \"hi\" 100%_") == r'say \\"hi\\" 100\%\_'


@pytest.mark.parametrize("cursor", ["", "1:0", "7:120", f"{MAX_CURSOR_NUMBER}:{MAX_CURSOR_NUMBER}"])
def test_cursors_from_a_search_are_read_back(cursor: str) -> None:
    seq, offset = parse_cursor(cursor)
    assert (seq, offset) == ((1, 0) if not cursor else tuple(int(p) for p in cursor.split(":")))


@pytest.mark.parametrize(
    "cursor",
    [
        "99999999999999999999999:1",
        f"{MAX_CURSOR_NUMBER + 1}:0",
        f"1:{MAX_CURSOR_NUMBER + 1}",
        "-1:0",
        "1:-5",
        "0:0",
        "1",
        "1:2:3",
        " 1:0",
        "1_0:0",
        "\u0661:0",  # an Arabic-Indic digit: int() would take it
        "x" * 10_000,
    ],
)
def test_bad_cursors_are_refused_naming_the_field(cursor: str) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        parse_cursor(cursor)
    assert refused.value.message.startswith("cursor: ")
    assert len(refused.value.message) < 200


# ------------------------------------------------------------------ real coordinators


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
    from sqlalchemy import text
    from sqlalchemy.orm import Session

    from coordinator.store import Database
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
