"""The journal bus in-process: who is woken, and what a run's waiters are handed when the
transaction that stopped it read the run for them."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from coordinator.streams.journal_bus import JournalBus, StopWait
from tests.harness.ledger import Store, apply_all, in_flight, receipt


def _bus(built: list[str]) -> JournalBus:
    bus = JournalBus()

    def view(s: Session, run_id: str) -> dict[str, str]:
        built.append(run_id)
        return {"run": run_id}

    bus.stop_view = view
    return bus


def test_views_are_read_only_for_stopped_runs_with_waiters_and_handed_to_each() -> None:
    built: list[str] = []
    bus = _bus(built)
    first, second = bus.subscribe_stop("run_a"), bus.subscribe_stop("run_a")
    watcher = bus.subscribe("run_a")
    session: Any = object()  # the builder is given the writing session; this one is not read
    views = bus.views_of_stops(session, {"run_a", "run_nobody_waits_for"})
    assert built == ["run_a"] and views == {"run_a": {"run": "run_a"}}
    bus.notify({"run_a"}, {"run_a"}, views)
    assert first.is_set() and second.is_set() and watcher.is_set()
    assert first.view == second.view == {"run": "run_a"}


def test_a_stop_seen_from_another_replica_wakes_waiters_with_nothing_to_hand() -> None:
    bus = _bus([])
    waiter = bus.subscribe_stop("run_a")
    bus.notify({"run_a"})  # a notification from the store: no view came with it
    assert waiter.is_set() and waiter.view is None


def test_growth_without_a_stop_wakes_watchers_but_not_waiters() -> None:
    bus = _bus([])
    waiter, watcher = bus.subscribe_stop("run_a"), bus.subscribe("run_a")
    bus.notify({"run_a"}, set())
    assert watcher.is_set() and not waiter.is_set()


def test_a_waiter_that_left_is_neither_read_for_nor_woken() -> None:
    built: list[str] = []
    bus = _bus(built)
    waiter: StopWait = bus.subscribe_stop("run_a")
    watcher = bus.subscribe("run_a")
    bus.unsubscribe("run_a", waiter)
    bus.unsubscribe("run_a", watcher)
    assert bus.views_of_stops(object(), {"run_a"}) == {} and built == []  # type: ignore[arg-type]
    bus.notify({"run_a"}, {"run_a"}, {"run_a": {"run": "run_a"}})
    assert not waiter.is_set() and waiter.view is None and not watcher.is_set()


def test_stop_waiters_are_events_a_task_can_wait_on() -> None:
    async def go() -> Any:
        bus = _bus([])
        waiter = bus.subscribe_stop("run_a")
        asyncio.get_running_loop().call_soon(bus.notify, {"run_a"}, {"run_a"}, {"run_a": 1})
        await asyncio.wait_for(waiter.wait(), 1)
        return waiter.view

    assert asyncio.run(go()) == 1


def test_a_waiter_handed_its_stopped_run_answers_without_reading_and_only_its_owner(
    tmp_path: Path,
) -> None:
    """On a real store that does not hold the run: a wait that read it would be NOT_FOUND."""
    from coordinator.model.identity import Principal, Role
    from coordinator.runs.service import Runs, RunView
    from coordinator.store import Database
    from coordinator.store.models import RunRow
    from coordinator.store.schema import upgrade
    from shared.errors import NotFoundError

    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    upgrade(url)
    handed = RunView(RunRow(id="run_a", owner_id="usr_alice", status="SUCCEEDED"))

    async def wait(who: str) -> Any:
        db = Database(url)
        try:
            runs = Runs(db, dispatcher=None, bus=JournalBus())  # type: ignore[arg-type]
            waiter = StopWait()
            waiter.view = handed
            waiter.set()
            owner = Principal(who, who, Role.OWNER)
            return await runs._wait(owner, "run_a", time.monotonic() + 5, waiter, woken=True)
        finally:
            await db.close()

    assert asyncio.run(wait("usr_alice")) is handed  # answered without a read
    # Anyone else's wait reads (and the store's read says NOT_FOUND): nothing is handed over.
    with pytest.raises(NotFoundError):
        asyncio.run(wait("usr_mallory"))


def test_the_view_handed_over_is_read_only_for_a_run_that_stayed_stopped(
    store: Store,
) -> None:
    from coordinator.runs.service import stopped_view

    store.worker("w")
    run_id = store.submit(2)
    assert store.read(lambda s: stopped_view(s, run_id)) is None  # still running: nothing
    for _ in range(2):
        store.run(apply_all([receipt(o) for o in in_flight(store)]))
    view = store.read(lambda s: stopped_view(s, run_id))
    assert view.run.status == "SUCCEEDED" and [a.status for a in view.actions] == ["SUCCEEDED"] * 2
    assert all(a.receipt_id for a in view.actions)
