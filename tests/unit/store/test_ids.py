"""Identifiers: the kind prefix, then milliseconds and random digits in Crockford base32."""

from __future__ import annotations

import os
import threading
import time

from shared import ids
from shared.ids import new_id


def _reference(value: int, length: int) -> str:
    """The reference encoding: `length` base-32 digits of `value`, most significant first."""
    return "".join(ids._ALPHABET[(value >> (5 * i)) & 31] for i in reversed(range(length)))


def test_the_digits_are_the_milliseconds_then_the_random_part_in_crockford_base32() -> None:
    for millis, rand in (
        (0, 0),
        (1_764_633_600_123, 0x0123456789ABCDEF0123),
        (2**50 - 1, 2**80 - 1),
        (1, 1),
    ):
        assert ids._digits(millis, rand) == _reference(millis, 10) + _reference(rand, 16)


def test_an_id_is_its_prefix_then_the_time_it_was_made() -> None:
    before = int(time.time() * 1000)
    made = new_id("rcp")
    after = int(time.time() * 1000)
    assert made.startswith("rcp_") and len(made) == 4 + 26
    assert _reference(before, 10) <= made[4:14] <= _reference(after, 10)


def test_ids_sort_by_time_and_use_only_the_alphabet() -> None:
    made = []
    for _ in range(3):
        made.append(new_id("run"))
        time.sleep(0.002)
    assert made == sorted(made)
    assert all(len(i) == 4 + 26 and set(i[4:]) <= set(ids._ALPHABET) for i in made)
    assert len({new_id("x") for _ in range(1000)}) == 1000


def test_the_random_digits_come_from_the_os_a_batch_at_a_time_per_thread() -> None:
    pool = ids._pool
    pool.at = len(pool.data)  # used up: the next draw reads a new batch
    first = ids._random()
    batch = pool.data
    assert len(batch) == ids._RANDOM_BYTES * ids._BATCH
    drawn = [first] + [ids._random() for _ in range(ids._BATCH - 1)]
    assert pool.data is batch  # a whole batch drawn from one read
    assert len(set(drawn)) == len(drawn)  # no slice of the pool is handed out twice
    ids._random()
    assert pool.data is not batch  # the next draw read a new batch
    seen: list[bytes] = []
    thread = threading.Thread(target=lambda: (ids._random(), seen.append(ids._pool.data)))
    thread.start()
    thread.join()
    assert seen[0] is not pool.data  # another thread reads its own pool


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


def test_the_ids_we_make_are_in_the_alphabet_that_worker_ids_are_checked_against() -> None:
    """Worker messages are checked against the alphabet of ids (`foreign_character`) before
    anything reaches the store (B8): an id of ours always passes, anything else is found."""
    for prefix in ("act", "att", "run", "kill", "pk", "wkr", "rcp", "apr"):
        assert ids.foreign_character(new_id(prefix)) == -1
    assert ids.foreign_character("") == -1  # the length is the caller's rule
    for text, at in [
        ("kill_\x00", 5),
        ("act_A", 4),
        ("act 1", 3),
        ("act-1", 3),
        ("\u0430ct_1", 0),  # a Cyrillic a
        ("act_1\n", 5),
        ("act_\udc80", 4),
    ]:
        assert ids.foreign_character(text) == at, text
