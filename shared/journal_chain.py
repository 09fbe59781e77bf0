"""The journal's hash chain: how each event's hash is made from the one before it.

The coordinator chains every run's events with `event_hash` as it writes them
(`coordinator/store/journal.py`), and `deskfleet verify` re-computes the chain of an exported
bundle with the very same function (`shared/bundle_verify.py`): one definition, so an export can
never be checked by a rule that differs from the one that wrote it.
"""

from __future__ import annotations

import hashlib

GENESIS = "0" * 64  # the `prev_hash` of a run's first event


def event_hash(prev_hash: str, run_id: str, seq: int, kind: str, at: float, data: str) -> str:
    """sha256 hex over the previous hash and the event's fields; `at` by its repr, so that the
    float read back from JSON or the store hashes as it was written."""
    material = f"{prev_hash}\n{run_id}\n{seq}\n{kind}\n{at!r}\n{data}"
    return hashlib.sha256(material.encode("utf-8")).hexdigest()
