"""The recovery sweep in process, on a SQLite store: which lapsed leases it takes back right
after the coordinator started, and which it leaves to the reconnect grace."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from sqlalchemy import update
from sqlalchemy.orm import Session

from coordinator.heart.dispatch import RECONNECT_GRACE, Dispatcher
from coordinator.model.settings import CoordinatorConfig
from coordinator.store import Database
from coordinator.store.models import ActionRow
from coordinator.streams.journal_bus import JournalBus
from coordinator.streams.presence import Presence
from coordinator.streams.relay import Relay
from coordinator.streams.worker_index import IndexUpdates
from tests.harness.ledger import Store, in_flight

LEASE = 0.2


def _lease(store: Store, action_id: str, expires_at: float) -> None:
    with Session(store.engine) as s, s.begin():
        s.execute(
            update(ActionRow).where(ActionRow.id == action_id).values(lease_expires_at=expires_at)
        )


def _epoch(store: Store, action_id: str) -> int:
    with Session(store.engine) as s:
        return s.get_one(ActionRow, action_id).epoch


async def test_a_lease_this_process_granted_is_taken_back_at_once_an_older_one_after_the_grace(
    store: Store,
) -> None:
    """A worker that dies just after the coordinator started: its attempt, claimed by this
    process, moves on as soon as its lease lapses. An attempt whose lease a previous process
    granted waits for the reconnect grace: its worker may still be reconnecting to report it."""
    store.worker("w")
    store.submit(1)
    store.submit(1)
    mine, older = in_flight(store)
    url = str(store.engine.url)
    db = Database(url)
    presence = Presence(cast(Any, None), cast(Any, None), cast(Any, None))  # no streams here
    config = CoordinatorConfig(db_url=url, lease_ttl=LEASE)
    bus = JournalBus()
    # One replica: every order stays here.
    relay = Relay(db, presence, bus, config, IndexUpdates(db, store.index))
    dispatcher = Dispatcher(db, presence, bus, config, relay, store.index)
    started = dispatcher._started_wall  # the coordinator's start, as its dispatcher took it
    try:
        await asyncio.sleep(2 * LEASE)  # time for a lease of this process to lapse
        _lease(store, mine.action_id, started + LEASE + 0.05)  # granted (or renewed) since
        _lease(store, older.action_id, started - 1.0)  # granted before the start
        await dispatcher.sweep()
        assert (_epoch(store, mine.action_id), _epoch(store, older.action_id)) == (2, 1)

        dispatcher._started -= RECONNECT_GRACE  # the grace is over
        _lease(store, older.action_id, started - 1.0)
        await dispatcher.sweep()
        assert _epoch(store, older.action_id) == 2
    finally:
        await dispatcher.aclose()
        await db.close()
