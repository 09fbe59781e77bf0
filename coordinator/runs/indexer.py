"""The journal search indexer: on SQLite, events reach the search index in batches behind
the journal, off the transactions that write them (`store/search.py`). A search stays exact
meanwhile: it reads the events not yet indexed directly. PostgreSQL indexes as it inserts
(a trigram GIN index with fastupdate), so there is nothing to do there.
"""

from __future__ import annotations

import asyncio
import logging

from coordinator.store import Database, search as queries
from coordinator.store.engine import Dialect
from shared.errors import DeskfleetError

log = logging.getLogger(__name__)

BATCH = 500  # events per indexing transaction: about 20-40 ms of the one writer
INTERVAL = 1.0  # seconds between looks when caught up


class JournalIndexer:
    def __init__(self, db: Database, *, interval: float = INTERVAL, batch: int = BATCH) -> None:
        self._db = db
        self._interval = interval
        self._batch = batch
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> JournalIndexer:
        if self._db.dialect is Dialect.SQLITE:
            self._task = asyncio.create_task(self._loop(), name="journal-indexer")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def catch_up(self) -> int:
        """Index every event written so far, a batch per transaction; how many."""
        total = 0
        while True:
            done = await self._db.write(queries.index_next, self._batch)
            total += done
            if done < self._batch:
                return total

    async def _loop(self) -> None:
        while True:
            try:
                await self.catch_up()
            except DeskfleetError as exc:
                # The mark did not move: the next look indexes the same events.
                log.warning("could not index the journal for search: %s", exc)
            await asyncio.sleep(self._interval)
