"""What a kind of run adds to the ledger's rules, passed in at wiring (`server.py`).

A plan run needs nothing beyond the ledger. Research picks its sources when the search's
receipt arrives, chooses routes itself and writes a report when every unit is done; a desktop
or goal run stays open between actions, advances itself and decides what a failure means.
The dispatcher puts the kinds on every transaction's `Context`, so no module changes the ledger
when it is imported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from coordinator.heart.context import Context
    from coordinator.heart.orders import Order
    from coordinator.store.models import ActionRow, RunRow

ReceiptHook = Callable[["Session", "RunRow", "ActionRow", Any, "Context"], None]
# A completion hook may return the run's stop reason (research: why it found no evidence).
CompletionHook = Callable[["Session", "RunRow", "Sequence[ActionRow]", "Context"], str | None]
# A route hook that settles a unit without running it marks it SKIPPED and returns
# (None, SKIPPED, why); the run moves on.
RouteHook = Callable[["Session", "RunRow", "ActionRow", "Context"], tuple[str | None, str, str]]
AdvanceHook = Callable[["Session", "RunRow", "Context"], list["Order"]]
FailureHook = Callable[["Session", "RunRow", "ActionRow", "Context"], list["Order"]]


@dataclass(frozen=True)
class RunKind:
    """The steps a kind of run adds; each absent one is the ledger's plain rule."""

    on_receipt: ReceiptHook | None = None  # after a unit's successful receipt is recorded
    on_completion: CompletionHook | None = None  # when every unit is done, before SUCCEEDED
    route: RouteHook | None = None  # choose the worker for a unit
    advance: AdvanceHook | None = None  # the run advances itself (it stays open)
    on_failure: FailureHook | None = None  # what a failed unit means for the run


PLAN = RunKind()
