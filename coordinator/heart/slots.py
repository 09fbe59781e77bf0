"""The line of runs waiting for worker slots, and the rule that gives slots out.

Every ledger transaction ends here (`Dispatcher.run_unit`). A run with units no worker has
taken yet holds a place in line (`runs.queued_at`, indexed); `ledger.advance` only puts it
there. When the transaction freed a slot (a receipt, a failure, a timeout, a cancelled attempt's
receipt, a worker reconnecting), added capacity (a worker connecting or undrained) or queued
runs, the free slots are given out in the same transaction:

- **Oldest place first, one unit per turn.** The run at the front dispatches one unit and, if
  it has more waiting, goes to the back of the line. A run whose receipt just arrived is put
  at the back too, so it cannot take the slot it freed ahead of runs that waited longer: one
  owner's 1,000-unit run and another's 1-unit run take turns.
- **A run never waits while a slot it could use is free.** Slot counts come from the store
  (after the transaction's own changes are flushed) and follow every status change made in the
  transaction (`ledger.move`), so a batch of receipts frees its slots before the line is
  served. The line is served without autoflush: the claims of one serving go out together at
  commit.
- Runs this transaction queued are tried even when no slot is free, so that their state says
  why they wait; the rest of the line is only walked while slots are free.

Cost: the line is read from its index a page at a time, only as far as the serving walks it
(usually one page of `LINE_PAGE`, whatever the length of the line). The runs the free slots
can go to next are locked, and their stages read, as one group (`_read_ahead`: a few statements
whether 4 runs are served or 64; none for a run this transaction holds already, a receipt's
run). A run that cannot use the free slots (other labels or capability) is looked at each time.
"""

from __future__ import annotations

import itertools
from collections import deque

from sqlalchemy.orm import Session

from coordinator.heart import ledger
from coordinator.heart.context import Context
from coordinator.model.orders import Order
from coordinator.store import runs as run_queries

# Runs read from the line's index at a time.
LINE_PAGE = 64


class _Line:
    """The line as one serving walks it: the store's line a page at a time, then the runs this
    serving sent to the back (their new places come after every place in the store).

    A run this serving sent to the back is met there, not again in a later page (where its new
    place shows once the transaction's changes are flushed for a slot count)."""

    def __init__(self, s: Session) -> None:
        self._s = s
        self._page: deque[str] = deque()
        self._after: tuple[float, str] | None = None
        self._more = True
        self._back: deque[str] = deque()
        self._moved: set[str] = set()

    def next(self) -> str | None:
        if not self._page and self._more:
            rows = run_queries.line_page(self._s, self._after, LINE_PAGE)
            self._more = len(rows) == LINE_PAGE
            if rows:
                run_id, at = rows[-1]
                self._after = (at, run_id)
            self._page.extend(run_id for run_id, _ in rows if run_id not in self._moved)
        if self._page:
            return self._page.popleft()
        return self._back.popleft() if self._back else None

    def ahead(self, n: int) -> list[str]:
        """Up to `n` runs that `next` gives after the one it gave last, from the page read."""
        return list(itertools.islice(self._page, n))

    def to_back(self, run_id: str) -> None:
        self._back.append(run_id)
        self._moved.add(run_id)


def serve(s: Session, ctx: Context) -> list[Order]:
    """Give the free worker slots to the runs in line, oldest place first, one unit a turn."""
    if not ctx.queued and not ctx.capacity_changed:
        return []
    s.flush()  # places given in this transaction must be in the line read below
    # The claims made below are flushed together at commit, not one run's at a time before
    # each query: the queries that need the transaction's changes flush first (`Context.busy`)
    # or read the session's own rows (`ledger.open_stage`).
    with s.no_autoflush:
        return _serve_line(s, ctx)


def _serve_line(s: Session, ctx: Context) -> list[Order]:
    line = _Line(s)
    must_try = set(ctx.queued)
    orders: list[Order] = []
    while (run_id := line.next()) is not None:
        fresh = run_id in must_try
        must_try.discard(run_id)
        if not fresh and ctx.free_slots(s) <= 0:
            if not must_try:
                break
            continue
        if not run_queries.is_held(s, run_id):
            _read_ahead(s, ctx, [run_id, *line.ahead(max(0, ctx.free_slots(s) - 1))])
        run = run_queries.run_for_update(s, run_id)
        if run is None or run.queued_at is None:
            continue
        sent, more = ledger.dispatch_one(s, run, ctx)
        orders += sent
        if not more:
            run.queued_at = None
        elif sent:  # served: to the back of the line
            run.queued_at = ctx.next_position()
            line.to_back(run_id)
    return orders


def _read_ahead(s: Session, ctx: Context, run_ids: list[str]) -> None:
    """Lock the runs the free slots can go to next, and read their open stages, for the group
    at once: their turns then read nothing (a receipt's run was read with its batch)."""
    run_queries.lock_runs(s, run_ids)
    ledger.read_stages_ahead(s, run_ids, ctx)
