"""Exact recall of a run's journal: bounded pages of original text, and search with a cursor.

Bulky receipts are archived: their journal event keeps a preview, and reads of that event
return pages of the archived receipt's original serialized text instead.

An archived receipt is verified against its content hash when it is read back, once per
process: the first read of a receipt (a page or a search) loads its whole body and hashes it,
and the body found to match is kept in a cache bounded in bytes (`VERIFIED_BYTES`, least
recently used out first), from which later pages are cut. A console replay reads a 12 MiB
receipt in 64 KiB pages: loading, hashing and decoding the whole body for each of its 193
pages made the replay quadratic. On SQLite a page cannot be read more cheaply from the store
(a text value is read whole, even for `substr` or `length`), which is why the verified body
itself is kept rather than only the fact that it matched: what a page returns is always bytes
that were hashed and found to match, never bytes read after the check. `journal verify` hashes
every receipt from the store again, whatever the cache holds.

A search reads at most `SCAN_BYTES` of text per call (and always at least one event): past
it, the page ends with a cursor after the last event read, so archived receipts, which every
search must look into (their text is not in the journal's index), cost a bounded amount per
call however many a run holds.
"""

from __future__ import annotations

import bisect
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy.orm import Session

from coordinator.model.identity import Principal
from coordinator.runs.service import owned_run
from coordinator.store import Database, runs as run_queries
from coordinator.store.models import JournalRow
from shared.errors import DataIntegrityError, InvalidArgumentError, NotFoundError
from shared.receipts import content_hash, decode_result

DEFAULT_PAGE = 16384
MAX_PAGE = 65536
EXCERPT_RADIUS = 80
EXCERPT_BUDGET = 4000  # characters of excerpts per search response
SCAN_LIMIT = 2000  # candidate events (see journal_candidates) examined per search call
SCAN_BYTES = 8 * 1024 * 1024  # characters of text one search call reads (after its first event)
# Verified bodies kept for later pages: the largest receipt a worker can send (16 MiB, the
# server's message limit) fits four times over.
VERIFIED_BYTES = 64 * 1024 * 1024
# A cursor is "SEQ:OFFSET" as a previous search returned it: both fit the store's 32-bit
# integers (and the response's int32 fields), so anything larger is a bad cursor, not a query.
MAX_CURSOR_NUMBER = 2**31 - 1
CURSOR = re.compile(r"([0-9]{1,10}):([0-9]{1,10})")
# One JSON escape in the stored (ASCII) text: a backslash and the character it escapes, or
# \uXXXX. A match may start at an escape, never inside one.
ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{4}|.)", re.DOTALL)


@dataclass(frozen=True)
class Page:
    run_id: str
    seq: int
    kind: str
    text: str
    offset: int
    next_offset: int
    total_length: int
    archived: bool


@dataclass(frozen=True)
class Match:
    seq: int
    kind: str
    offset: int
    excerpt: str


@dataclass(frozen=True)
class SearchPage:
    matches: tuple[Match, ...]
    cursor: str
    has_more: bool
    match_limit_reached: bool


def _archived(row: JournalRow) -> str | None:
    """The id of the receipt archived for this event, if it holds only a preview."""
    data = decode_result(row.data)
    archive = data.get("archive") if isinstance(data, dict) else None
    return str(archive["receipt"]) if archive else None


class VerifiedReceipts:
    """Archived receipt bodies this process hashed and found matching, kept for later reads
    up to `budget` characters in all (ASCII: bytes), least recently used out first. Used from
    the store's reader threads: the map is changed under a lock, a body hashed outside it."""

    def __init__(self, budget: int = VERIFIED_BYTES) -> None:
        self._budget = budget
        self._kept: OrderedDict[str, tuple[str, str]] = OrderedDict()  # id -> (run, body)
        self._size = 0
        self._lock = threading.Lock()
        self.hashed = 0  # bodies hashed: what the cache saves is visible to the tests

    def body(self, s: Session, run_id: str, receipt_id: str) -> str:
        """The whole body of `run_id`'s archived receipt, verified against its content hash."""
        with self._lock:
            kept = self._kept.get(receipt_id)
            if kept is not None and kept[0] == run_id:
                self._kept.move_to_end(receipt_id)
                return kept[1]
        receipt = run_queries.receipt(s, receipt_id)
        if receipt is None or receipt.run_id != run_id:
            raise NotFoundError(f"archived receipt {receipt_id} is missing")
        body = receipt.body
        with self._lock:
            self.hashed += 1
        if content_hash(body) != receipt.sha256:
            raise DataIntegrityError(
                f"receipt {receipt_id} does not match its content hash: the stored receipt was"
                " altered"
            )
        if len(body) <= self._budget:
            with self._lock:
                if receipt_id not in self._kept:
                    self._kept[receipt_id] = (run_id, body)
                    self._size += len(body)
                while self._size > self._budget:
                    _, (_, dropped) = self._kept.popitem(last=False)
                    self._size -= len(dropped)
        return body


def parse_cursor(cursor: str) -> tuple[int, int]:
    """(seq, offset) where a search resumes: the start for an empty cursor.

    Checked before any query, so that a malformed or out-of-range cursor is the caller's
    mistake (INVALID_ARGUMENT naming the field), never a store error.
    """
    if not cursor:
        return 1, 0
    found = CURSOR.fullmatch(cursor)
    seq, offset = (int(found[1]), int(found[2])) if found else (0, -1)
    if not 1 <= seq <= MAX_CURSOR_NUMBER or not 0 <= offset <= MAX_CURSOR_NUMBER:
        raise InvalidArgumentError(
            f"cursor: not a cursor from a previous search (SEQ:OFFSET, SEQ from 1 and OFFSET"
            f" from 0, each at most {MAX_CURSOR_NUMBER}): {cursor[:40]!r}"
        )
    return seq, offset


def needle_of(query: str) -> str:
    """The query as it appears in stored text: events are canonical ASCII JSON, so quotes,
    backslashes, control and non-ASCII characters are there as their JSON escapes."""
    return json.dumps(query, ensure_ascii=True)[1:-1].lower()


class _Escapes:
    """Where the JSON escapes of one stored text are, found once and only if needed."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._starts: list[int] | None = None
        self._ends: list[int] = []

    def inside(self, pos: int) -> bool:
        """Whether `pos` falls inside an escape (after its backslash), not at a character."""
        if self._starts is None:
            spans = [m.span() for m in ESCAPE.finditer(self._text)]
            self._starts = [start for start, _ in spans]
            self._ends = [end for _, end in spans]
        i = bisect.bisect_left(self._starts, pos) - 1
        return i >= 0 and self._ends[i] > pos


def find_all(haystack: str, needle: str, start: int) -> Iterator[int]:
    """Offsets of `needle` in `haystack` (both lower-cased JSON text) from `start`, where a
    match starts at a character of the text: `u00e9` is not found in `caf\\u00e9`, nor `n`
    in a newline's `\\n`."""
    escapes = _Escapes(haystack)
    pos = haystack.find(needle, start)
    while pos >= 0:
        if not escapes.inside(pos):
            yield pos
        pos = haystack.find(needle, pos + 1)


class Recall:
    def __init__(self, db: Database, verified: VerifiedReceipts | None = None) -> None:
        self._db = db
        self.verified = verified or VerifiedReceipts()

    def _text(self, s: Session, row: JournalRow) -> tuple[str, bool]:
        """The event's serialized text, or the archived receipt's when it holds a preview
        (verified before any byte of it is returned)."""
        receipt_id = _archived(row)
        if receipt_id is None:
            return row.data, False
        return self.verified.body(s, row.run_id, receipt_id), True

    async def read(self, who: Principal, run_id: str, seq: int, offset: int, limit: int) -> Page:
        limit = limit or DEFAULT_PAGE
        if not 0 < limit <= MAX_PAGE:
            raise InvalidArgumentError(f"limit: between 1 and {MAX_PAGE} characters")
        if offset < 0:
            raise InvalidArgumentError("offset: must not be negative")

        def unit(s: Session) -> Page:
            owned_run(s, who, run_id)
            row = run_queries.journal_entry(s, run_id, seq)
            if row is None:
                raise NotFoundError(f"run {run_id} has no journal event {seq}")
            text, archived = self._text(s, row)
            if offset > len(text):
                raise InvalidArgumentError(f"offset: {offset} is past the end ({len(text)})")
            end = offset + limit
            return Page(
                run_id,
                seq,
                row.kind,
                text[offset:end],
                offset,
                end if end < len(text) else -1,
                len(text),
                archived,
            )

        return await self._db.read(unit)

    async def search(
        self, who: Principal, run_id: str, query: str, cursor: str, limit: int
    ) -> SearchPage:
        if not query:
            raise InvalidArgumentError("text: search for at least one character")
        if "\x00" in query:  # refused by name, as in every other text field: not "0 matches"
            raise InvalidArgumentError("text: must not contain NUL characters")
        limit = limit or 10
        if not 0 < limit <= 100:
            raise InvalidArgumentError("limit: between 1 and 100 matches")
        start_seq, start_offset = parse_cursor(cursor)
        needle = needle_of(query)

        def unit(s: Session) -> SearchPage:
            owned_run(s, who, run_id)
            matches: list[Match] = []
            budget = EXCERPT_BUDGET
            scanned = read = 0
            after = start_seq - 1
            while scanned < SCAN_LIMIT and read < SCAN_BYTES:
                rows = run_queries.journal_candidates(s, run_id, after, needle, 200)
                if not rows:
                    return SearchPage(tuple(matches), "", False, False)
                for row in rows:
                    if read >= SCAN_BYTES:
                        break  # the call has read its share: the cursor continues here
                    scanned += 1
                    text, _ = self._text(s, row)
                    read += len(text)
                    haystack = text.lower()
                    start = start_offset if row.seq == start_seq else 0
                    for pos in find_all(haystack, needle, start):
                        lo, hi = max(0, pos - EXCERPT_RADIUS), pos + len(needle) + EXCERPT_RADIUS
                        excerpt = text[lo:hi]
                        if len(excerpt) > budget:
                            return SearchPage(tuple(matches), f"{row.seq}:{pos}", True, True)
                        if len(matches) == limit:
                            return SearchPage(tuple(matches), f"{row.seq}:{pos}", True, False)
                        budget -= len(excerpt)
                        matches.append(Match(row.seq, row.kind, pos, excerpt))
                    after = row.seq
            more = bool(run_queries.journal_candidates(s, run_id, after, needle, 1))
            return SearchPage(tuple(matches), f"{after + 1}:0" if more else "", more, False)

        return await self._db.read(unit)
