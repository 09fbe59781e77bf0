"""Identifiers: a short kind prefix and a time-ordered random part (sortable, URL-safe)."""

from __future__ import annotations

import base64
import os
import re
import threading
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case
# RFC 4648's base32 digits to Crockford's: the encoding is done by the C codec, one call per
# id instead of a Python loop over 26 digits.
_TO_CROCKFORD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", _ALPHABET.encode())
_RANDOM_BYTES = 10
# Random bytes are read from the OS this many ids at a time: one system call (which gives up
# the GIL and must win it back) per batch instead of per id. Kept per thread: no lock needed.
_BATCH = 256


class _Pool(threading.local):
    def __init__(self) -> None:
        self.data = b""
        self.at = 0


_pool = _Pool()


def _forget_pool() -> None:
    # A forked child starts with a copy of the parent's unread bytes: it would hand out the
    # same ids as the parent. It reads its own instead.
    global _pool
    _pool = _Pool()


os.register_at_fork(after_in_child=_forget_pool)


def _random() -> int:
    pool = _pool
    if pool.at >= len(pool.data):
        pool.data = os.urandom(_RANDOM_BYTES * _BATCH)
        pool.at = 0
    start = pool.at
    pool.at = start + _RANDOM_BYTES
    return int.from_bytes(pool.data[start : start + _RANDOM_BYTES], "big")


def new_id(prefix: str) -> str:
    """`prefix_` + 10 chars of milliseconds + 16 random chars, e.g. `wkr_01jd...`."""
    return f"{prefix}_{_digits(int(time.time() * 1000), _random())}"


def _digits(millis: int, rand: int) -> str:
    """The low 50 bits of `millis`, then the 80 of `rand`: 26 Crockford digits."""
    value = ((millis & (2**50 - 1)) << 80) | rand
    # 160 bits are 32 digits; the first 6 hold the 30 zero bits above the 50 + 80 used.
    return base64.b32encode(value.to_bytes(20, "big")).translate(_TO_CROCKFORD)[6:].decode()


# Every character an id of `new_id` can hold: its lower-case prefix, the "_", Crockford digits.
# A worker only ever sends back ids the coordinator gave it, so anything else in one names no
# row (and NUL, which PostgreSQL text cannot hold, would fail the statement it reached).
ID_CHARACTERS = "0-9, a-z and _"
_ID_TEXT = re.compile(r"[0-9a-z_]*")
_NOT_ID = re.compile(r"[^0-9a-z_]")


def foreign_character(text: str) -> int:
    """Where `text` holds the first character no id has; -1 when it holds none."""
    if _ID_TEXT.fullmatch(text):
        return -1
    found = _NOT_ID.search(text)
    assert found is not None
    return found.start()
