"""Identifiers: the kind prefix, then milliseconds and random digits in Crockford base32."""

from __future__ import annotations

import os
import threading
import time

import pytest

from shared import ids
from shared.ids import new_id


def _digits(value: int, length: int) -> str:
    """The reference encoding: `length` base-32 digits of `value`, most significant first."""
    return "".join(ids._ALPHABET[(value >> (5 * i)) & 31] for i in reversed(range(length)))


def test_an_id_is_its_prefix_its_milliseconds_then_its_random_digits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for millis, rand in (
        (0, 0),
        (1_764_633_600_123, 0x0123456789ABCDEF0123),
        (2**50 - 1, 2**80 - 1),
        (1, 1),
    ):
        monkeypatch.setattr(ids.time, "time", lambda m=millis: m / 1000)
        monkeypatch.setattr(ids, "_random", lambda r=rand: r)
        assert new_id("rcp") == f"rcp_{_digits(millis, 10)}{_digits(rand, 16)}"


def test_ids_sort_by_time_and_use_only_the_alphabet() -> None:
    made = []
    for _ in range(3):
        made.append(new_id("run"))
        time.sleep(0.002)
    assert made == sorted(made)
    assert all(len(i) == 4 + 26 and set(i[4:]) <= set(ids._ALPHABET) for i in made)
    assert len({new_id("x") for _ in range(1000)}) == 1000


def test_the_random_digits_come_from_the_os_a_batch_at_a_time_per_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[int] = []
    real = ids.os.urandom

    def urandom(n: int) -> bytes:
        reads.append(n)
        return real(n)

    monkeypatch.setattr(ids.os, "urandom", urandom)
    monkeypatch.setattr(ids, "_pool", ids._Pool())
    drawn = [ids._random() for _ in range(ids._BATCH + 1)]
    assert reads == [ids._RANDOM_BYTES * ids._BATCH] * 2
    assert len(set(drawn)) == len(drawn)  # no slice of the pool is handed out twice
    seen: list[int] = []
    thread = threading.Thread(target=lambda: seen.append(ids._random()))
    thread.start()
    thread.join()
    assert len(reads) == 3 and seen[0] not in drawn  # another thread reads its own pool


def test_a_forked_child_draws_its_own_random_digits() -> None:
    ids._random()  # the parent holds unread bytes of its pool
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next digits, to the parent
        os.close(read)
        os.write(write, ids._random().to_bytes(ids._RANDOM_BYTES, "big"))
        os._exit(0)
    os.close(write)
    try:
        child = int.from_bytes(os.read(read, ids._RANDOM_BYTES), "big")
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert child != ids._random()  # the parent's next digits, from the same pool position
