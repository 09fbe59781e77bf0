"""Batches of worker messages into store transactions, so that one message never costs another
its place.

Messages that arrive together share one transaction (one commit, one fsync). A batch whose
transaction fails for any reason but the store's being unavailable is recorded again one
message per transaction, and a message that still fails alone is handed to `refuse` (the
receipt's worker is answered, the refusal logged at a bounded rate); a store outage is no
message's fault, so nothing is refused and the workers send the messages again.

One transaction per message rather than a savepoint per message in one, measured in process
on the ledger's rules (256 receipts of 256 runs, in one thread, no gRPC; SQLite WAL with
synchronous=FULL, and the local PostgreSQL 15), per receipt, medians of 3:

  | | one transaction | a savepoint per receipt | a transaction per receipt |
  | --- | --- | --- | --- |
  | SQLite | 0.60 ms | 1.29 ms | 6.6 ms |
  | PostgreSQL | 1.14 ms | 2.94 ms | 14.0 ms |

A savepoint per receipt on the hot path would cost twice the receipt (each flushes, where the
batch's inserts go out together at its commit), so the hot path keeps one transaction and no
savepoint. Only a failed batch is recorded again, and then apart: what a ledger transaction
knows beside its session (slot counts, the stages it read, its notes, the owners' charges)
would survive a savepoint's rollback, so savepoints would need a ledger state per message
merged back, for a path that no known message takes (a batch of 256 costs ~1.7 s of the
SQLite writer then). A sender whose message fails alone has it counted against its stream
(`streams/worker_bounds.ReportBudget`), which bounds how often one worker can make it happen.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from shared.errors import DeskfleetError, StoreUnavailableError

log = logging.getLogger(__name__)

T = TypeVar("T")
LOG_EVERY = 30.0  # seconds between two lines saying that a batch failed


class Ingest(Generic[T]):
    """Records batches of `what` with `record` (one transaction for the messages given,
    raising what it raised), each message apart when the batch fails."""

    def __init__(
        self,
        what: str,
        record: Callable[[Sequence[T]], Awaitable[object]],
        refuse: Callable[[T, Exception], None],
    ) -> None:
        self.what = what
        self._record = record
        self._refuse = refuse
        self.batches_failed = 0
        self._logged_at = -LOG_EVERY

    async def __call__(self, batch: Sequence[T]) -> None:
        try:
            await self._record(batch)
            return
        except StoreUnavailableError as exc:
            # Not acknowledged: the workers keep these messages and send them again.
            log.warning("could not record %d %s: %s", len(batch), self.what, exc)
            return
        except Exception as exc:
            if len(batch) == 1:
                self._refuse(batch[0], exc)
                return
            self._batch_failed(len(batch), exc)
        for i, message in enumerate(batch):
            try:
                await self._record([message])
            except StoreUnavailableError as exc:
                log.warning("could not record %d %s: %s", len(batch) - i, self.what, exc)
                return
            except Exception as exc:
                self._refuse(message, exc)

    def _batch_failed(self, size: int, exc: Exception) -> None:
        self.batches_failed += 1
        now = time.monotonic()
        if now - self._logged_at < LOG_EVERY:
            return
        self._logged_at = now
        log.warning(
            "a batch of %d %s could not be recorded (%s); recording them one at a time"
            " (%d such batches since start)",
            size,
            self.what,
            one_line(exc),
            self.batches_failed,
        )


def one_line(exc: BaseException) -> str:
    """What an error says, as one line for a log or a peer (a driver's errors span several)."""
    text = exc.message if isinstance(exc, DeskfleetError) else f"{type(exc).__name__}: {exc}"
    lines = text.strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__
