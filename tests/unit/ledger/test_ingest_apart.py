"""How a batch of worker messages is recorded when its transaction fails (`heart/ingest.py`),
as a pure rule over a stand-in for the store's transactions: message by message after any
failure but an outage, each that fails alone refused; an outage refuses nothing and stops.
The dispatcher over a real store: tests/integration/ledger/test_poisoned_batches.py."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from coordinator.heart.ingest import Ingest, one_line
from shared.errors import InternalError, StoreUnavailableError


class _Store:
    """Transactions that fail when they hold a poisoned message, or when the store is down."""

    def __init__(self, poisoned: set[str], down_after: int | None = None) -> None:
        self.poisoned = poisoned
        self.down_after = down_after  # transactions that work before the store goes away
        self.transactions: list[list[str]] = []
        self.recorded: list[str] = []
        self.refused: list[tuple[str, str]] = []

    async def record(self, batch: Sequence[str]) -> None:
        self.transactions.append(list(batch))
        if self.down_after is not None and len(self.transactions) > self.down_after:
            raise StoreUnavailableError("the coordinator's store is unavailable: gone")
        if self.poisoned & set(batch):
            raise InternalError("internal error (ref err_1)")
        self.recorded += batch

    def refuse(self, message: str, exc: Exception) -> None:
        self.refused.append((message, one_line(exc)))


async def test_a_failed_batch_is_recorded_again_one_message_per_transaction() -> None:
    store = _Store({"b", "d"})
    await Ingest("worker messages", store.record, store.refuse)(["a", "b", "c", "d", "e"])
    assert store.transactions == [["a", "b", "c", "d", "e"], ["a"], ["b"], ["c"], ["d"], ["e"]]
    assert store.recorded == ["a", "c", "e"]
    assert store.refused == [
        ("b", "internal error (ref err_1)"),
        ("d", "internal error (ref err_1)"),
    ]


async def test_a_message_alone_that_fails_is_refused_without_a_second_try() -> None:
    store = _Store({"a"})
    await Ingest("worker messages", store.record, store.refuse)(["a"])
    assert store.transactions == [["a"]] and [m for m, _ in store.refused] == ["a"]


async def test_a_store_outage_refuses_nothing() -> None:
    """Not the messages' fault: unanswered, the workers send them again."""
    store = _Store(set(), down_after=0)
    await Ingest("worker messages", store.record, store.refuse)(["a", "b"])
    assert store.transactions == [["a", "b"]] and store.refused == [] and store.recorded == []
    # An outage that starts while the messages are recorded one by one stops there.
    store = _Store({"a"}, down_after=2)
    await Ingest("worker messages", store.record, store.refuse)(["a", "b", "c", "d"])
    assert store.transactions == [["a", "b", "c", "d"], ["a"], ["b"]]
    assert [m for m, _ in store.refused] == ["a"] and store.recorded == []


async def test_failed_batches_are_logged_at_a_bounded_rate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = _Store({"x"})
    ingest = Ingest("worker messages", store.record, store.refuse)
    with caplog.at_level(logging.WARNING, logger="coordinator.heart.ingest"):
        for _ in range(50):
            await ingest(["a", "x"])
    [line] = [r.getMessage() for r in caplog.records]
    assert line == (
        "a batch of 2 worker messages could not be recorded (internal error (ref err_1));"
        " recording them one at a time (1 such batches since start)"
    )
    assert ingest.batches_failed == 50


def test_an_error_is_told_in_one_line() -> None:
    assert one_line(RuntimeError("first\nsecond")) == "RuntimeError: first"
    assert one_line(InternalError("x" * 1000)) == "x" * 300
    assert one_line(ValueError()) == "ValueError:"
