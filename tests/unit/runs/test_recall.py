"""Journal search: what a query finds in stored (canonical ASCII JSON) text, and its cursor.

The rules run in process; the same searches against both stores (PostgreSQL's LIKE reads
backslashes, `%` and `_` differently) are tests/integration/runs/test_recall.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from coordinator.heart.ledger import new_action
from coordinator.model.identity import Principal, Role
from coordinator.runs.recall import (
    MAX_CURSOR_NUMBER,
    MAX_PAGE,
    SCAN_BYTES,
    Recall,
    find_all,
    needle_of,
    parse_cursor,
)
from coordinator.runs.service import new_run
from coordinator.store import Database
from coordinator.store.journal import (
    Verification,
    append as journal_append,
    verify as verify_journal,
)
from coordinator.store.models import ReceiptRow, RunRow
from coordinator.store.runs import like_escaped
from coordinator.store.schema import upgrade
from shared.errors import DataIntegrityError, InvalidArgumentError, NotFoundError
from shared.ids import new_id
from shared.receipts import content_hash, encode_result


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


# ------------------------------------------------------------------ archived receipts (30.14)

OWNER = Principal("usr_reader", "reader", Role.OWNER)


@pytest.fixture
async def archive(tmp_path: Path) -> AsyncIterator[tuple[Database, Callable[..., Any]]]:
    """A real SQLite store, and a writer of runs whose events archive receipts (as
    heart/outcomes.py archives a bulky result): each body given is one receipt."""
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    await asyncio.to_thread(upgrade, url)
    db = Database(url)

    async def run_of(*bodies: str) -> str:
        run_id = new_id("run")

        def unit(s: Session) -> None:
            limits = {"max_actions": 1, "max_seconds": 1.0, "estimate_actions": 1,
                      "estimate_seconds": 1.0, "action_timeout_seconds": 1.0}  # fmt: skip
            run = new_run(run_id, OWNER.id, "t", limits, kind="plan", spec={},
                          actions_total=len(bodies), now=0.0)  # fmt: skip
            s.add(run)
            s.flush()
            for i, body in enumerate(bodies):
                action = new_action(run_id, i, i, "diag.echo", {}, idempotent=True, route={},
                                    intent="", timeout=1.0)  # fmt: skip
                s.add(action)
                s.flush()
                receipt = ReceiptRow(
                    id=f"rcp_{run_id}_{i}", run_id=run_id, action_id=action.id, attempt_id="a",
                    epoch=1, worker_id="w", status="succeeded", body=body,
                    sha256=content_hash(body), created_at=0.0,
                )  # fmt: skip
                s.add(receipt)
                archived = {"receipt": receipt.id, "length": len(body)}
                journal_append(s, run, "receipt", {"receipt": receipt.id, "archive": archived})

        await db.write(unit)
        return run_id

    yield db, run_of
    await db.close()


def _body(size: int, fill: str = "x", marker: str = "") -> str:
    return encode_result({"result": marker + fill * size + marker})


async def test_a_large_archived_receipt_is_hashed_once_however_many_pages_are_read(
    archive: tuple[Database, Callable[..., Any]],
) -> None:
    db, run_of = archive
    body = _body(12 * 1024 * 1024)
    run_id = await run_of(body)
    recall = Recall(db)
    pages, offset = [], 0
    while offset >= 0:
        page = await recall.read(OWNER, run_id, 1, offset, MAX_PAGE)
        assert page.archived and page.total_length == len(body)
        pages.append(page.text)
        offset = page.next_offset
    assert "".join(pages) == body and len(pages) == 193
    # The first page verified the whole body; the 192 others were cut by the store. Before,
    # every page hashed (and decoded) all 12 MiB again.
    assert recall.verified.hashed == 1


async def test_a_page_only_ever_returns_bytes_that_matched_their_hash(
    archive: tuple[Database, Callable[..., Any]],
) -> None:
    db, run_of = archive
    body = _body(200_000)
    run_id = await run_of(body)
    recall = Recall(db)
    first = await recall.read(OWNER, run_id, 1, 0, 100)

    def tamper(s: Session) -> None:
        s.execute(text("UPDATE receipts SET body = replace(body, 'xxxx', 'xxxy')"))

    await db.write(tamper)
    # Later pages come from the body this process verified, not from what the store holds now.
    again = await recall.read(OWNER, run_id, 1, 0, 100)
    last = await recall.read(OWNER, run_id, 1, len(body) - 100, 100)
    assert again == first and last.text == body[-100:] and recall.verified.hashed == 1
    # What has not verified it refuses it, and `journal verify` reads the store again.
    with pytest.raises(DataIntegrityError, match="does not match its content hash"):
        await Recall(db).read(OWNER, run_id, 1, 0, 100)

    def verify(s: Session) -> Verification:
        run = s.get(RunRow, run_id)
        assert run is not None
        return verify_journal(s, run)

    problems = (await db.read(verify)).problems
    assert problems == (f"receipt rcp_{run_id}_0 does not match its content hash",)


async def test_an_archive_names_a_receipt_of_its_own_run_only(
    archive: tuple[Database, Callable[..., Any]],
) -> None:
    db, run_of = archive
    theirs, mine = await run_of(_body(10, marker="theirs")), await run_of(_body(10))

    def point_at_theirs(s: Session) -> None:
        s.execute(
            text("UPDATE journal SET data = replace(data, :mine, :theirs) WHERE run_id = :run"),
            {"mine": f"rcp_{mine}_0", "theirs": f"rcp_{theirs}_0", "run": mine},
        )

    await db.write(point_at_theirs)
    recall = Recall(db)
    await recall.read(OWNER, theirs, 1, 0, 100)  # verified, and kept
    with pytest.raises(NotFoundError, match="is missing"):
        await recall.read(OWNER, mine, 1, 0, 100)


async def test_search_reads_a_bounded_share_of_archived_receipts_per_call(
    archive: tuple[Database, Callable[..., Any]],
) -> None:
    db, run_of = archive
    share = SCAN_BYTES // 2 + 1  # two receipts fill a call's share
    run_id = await run_of(*(_body(share, marker="needle") for _ in range(5)))
    recall = Recall(db)
    seen: list[int] = []
    cursor, calls = "", 0
    while True:
        page = await recall.search(OWNER, run_id, "needle", cursor, 100)
        calls += 1
        seen += [m.seq for m in page.matches]
        if not page.has_more:
            break
        assert len({m.seq for m in page.matches}) <= 2, "a call read more than its share"
        cursor = page.cursor
    assert seen == [seq for seq in range(1, 6) for _ in range(2)]  # twice in each, in order
    assert calls == 3
    # Searching again verifies nothing again.
    hashed = recall.verified.hashed
    await recall.search(OWNER, run_id, "needle", "", 100)
    assert recall.verified.hashed == hashed == 5
