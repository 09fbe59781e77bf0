"""The per-run journal: append-only, ordered by sequence number, hash-chained.

Each event holds the hash of the one before, so `verify` finds an edited, removed or
reordered event; receipts carry their own content hash, checked on every read.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from coordinator.store import deferred, quotas, runs as run_queries
from coordinator.store.models import JournalRow, ReceiptRow, RunRow
from shared.errors import DataIntegrityError
from shared.journal_chain import GENESIS, event_hash
from shared.receipts import content_hash, decode_result, encode_result

__all__ = ["GENESIS", "Chain", "Verification", "append", "event_hash", "read_receipt", "verify"]


def append(s: Session, run: RunRow, kind: str, data: dict[str, Any], *, charge: bool = True) -> int:
    """Add one event to the run's journal (the run row must be locked); returns its seq.
    `charge=False`: the event is not the owner's doing (a worker's refused report), and is
    not counted in what the owner's runs store."""
    seq = run.last_seq + 1
    at = time.time()
    text = encode_result(data)
    prev = run.last_hash or GENESIS
    digest = event_hash(prev, run.id, seq, kind, at, text)
    row = {
        "run_id": run.id,
        "seq": seq,
        "kind": kind,
        "at": at,
        "data": text,
        "prev_hash": prev,
        "hash": digest,
        "trace_id": run.trace_id,
    }
    deferred.add(s, deferred.JOURNAL, row)  # inserted with the transaction's other events
    run.last_seq = seq
    run.last_hash = digest
    run.updated_at = at
    if charge:
        quotas.charge(s, run.owner_id, len(text))  # ASCII: characters are bytes
    return seq


def read_receipt(row: ReceiptRow) -> Any:
    """The receipt's decoded body, after checking it against its stored content hash."""
    if content_hash(row.body) != row.sha256:
        raise DataIntegrityError(
            f"receipt {row.id} does not match its content hash: the stored receipt was altered"
        )
    return decode_result(row.body)


class Chain:
    """Follows a journal read page by page from its first event, refusing any event that does
    not follow the one before it or does not match its hash: what is rebuilt from a journal is
    rebuilt from what was written."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.prev = GENESIS
        self.seq = 0

    def follow(self, row: JournalRow) -> None:
        digest = event_hash(row.prev_hash, row.run_id, row.seq, row.kind, row.at, row.data)
        if row.seq != self.seq + 1 or row.prev_hash != self.prev or digest != row.hash:
            raise DataIntegrityError(
                f"the journal of run {self.run_id} was altered: event {row.seq} ({row.kind})"
                f" does not follow event {self.seq} or does not match its hash"
            )
        self.prev, self.seq = row.hash, row.seq


@dataclass(frozen=True)
class Verification:
    events: int
    receipts: int
    problems: tuple[str, ...]


def verify(s: Session, run: RunRow) -> Verification:
    """Walk the chain from the first event and check every receipt's content hash."""
    problems: list[str] = []
    prev = GENESIS
    expected_seq = 1
    events = 0
    after = 0
    while True:
        page = run_queries.journal_after(s, run.id, after, 1000)
        if not page:
            break
        for row in page:
            events += 1
            if row.seq != expected_seq:
                problems.append(f"event {expected_seq} is missing (next is {row.seq})")
            if row.prev_hash != prev:
                problems.append(f"event {row.seq} does not follow the event before it")
            if (
                event_hash(row.prev_hash, row.run_id, row.seq, row.kind, row.at, row.data)
                != row.hash
            ):
                problems.append(f"event {row.seq} ({row.kind}) was altered after it was written")
            prev = row.hash
            expected_seq = row.seq + 1
            after = row.seq
    if events != run.last_seq or (run.last_hash and prev != run.last_hash):
        problems.append(f"the run's head says {run.last_seq} events; the journal holds {events}")
    receipts: Sequence[ReceiptRow] = run_queries.receipts_of(s, run.id)
    for receipt in receipts:
        if content_hash(receipt.body) != receipt.sha256:
            problems.append(f"receipt {receipt.id} does not match its content hash")
    return Verification(events, len(receipts), tuple(problems))
