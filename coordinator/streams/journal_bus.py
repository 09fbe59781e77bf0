"""The journal bus: wakes the watchers of a run when its journal grows on this replica, and
its waiters when it stops. The journal itself (append, the hash chain, verify) is
`coordinator/store/journal.py`."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy.orm import Session

E = TypeVar("E", bound=asyncio.Event)


class StopWait(asyncio.Event):
    """A waiter for a run's end. `view` is what the transaction that stopped the run built for
    its waiters on this replica; None when it was stopped elsewhere (another replica) or when
    the waiter subscribed too late to be seen: the waiter then reads the run itself."""

    def __init__(self) -> None:
        super().__init__()
        self.view: Any = None


class JournalBus:
    """Wakes watchers of a run when its journal grows on this replica, and waiters for a run's
    end when it stops (they need no wake-up for every start and receipt on the way).

    Watchers also poll the store, so a missed or remote wake-up only delays them.
    """

    def __init__(self) -> None:
        self._events: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._stops: dict[str, set[StopWait]] = defaultdict(set)
        # Builds, in the transaction that stops a run, the view its waiters are handed (wired
        # by `coordinator.app.server`: `runs.stopped_view`); a waiter then answers without a read.
        self.stop_view: Callable[[Session, str], Any] | None = None

    def views_of_stops(self, s: Session, stopped: Collection[str]) -> dict[str, Any]:
        """The views of the runs in `stopped` that have waiters here, read in the transaction
        that stopped them. Called on a store thread: only membership of the waiters' map is
        read, which the event loop changes in single dictionary operations."""
        build = self.stop_view
        if build is None:
            return {}
        return {run_id: build(s, run_id) for run_id in stopped if run_id in self._stops}

    def notify(
        self,
        run_ids: Sequence[str] | set[str],
        stopped: Sequence[str] | set[str] | None = None,
        views: Mapping[str, Any] | None = None,
    ) -> None:
        """`run_ids` grew; `stopped` (by default: any of them, when not known) stopped, and
        `views` are what their waiters are handed (committed by the caller)."""
        for run_id in run_ids:
            for event in self._events.get(run_id, ()):
                event.set()
        for run_id in run_ids if stopped is None else stopped:
            view = views.get(run_id) if views else None
            for waiter in self._stops.get(run_id, ()):
                if view is not None:
                    waiter.view = view
                waiter.set()

    def subscribe(self, run_id: str) -> asyncio.Event:
        event = asyncio.Event()
        self._events[run_id].add(event)
        return event

    def subscribe_stop(self, run_id: str) -> StopWait:
        """Wait for the run's end only, not for each event on the way."""
        waiter = StopWait()
        self._stops[run_id].add(waiter)
        return waiter

    def unsubscribe(self, run_id: str, event: asyncio.Event) -> None:
        _discard(self._events, run_id, event)
        if isinstance(event, StopWait):
            _discard(self._stops, run_id, event)


def _discard(subscribers: dict[str, set[E]], run_id: str, event: E) -> None:
    found = subscribers.get(run_id)
    if found is not None:
        found.discard(event)
        if not found:
            del subscribers[run_id]
