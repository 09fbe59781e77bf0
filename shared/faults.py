"""Test-only fault hooks: the process dies at a named point, so tests can see what survives.

Armed only by the environment the coordinator or worker process starts with
(`DESKFLEET_TEST_FAULT`, comma-separated names, each `NAME` or `NAME@N`: at the point's Nth
occurrence, the first by default), read once at import. No setting, flag, file or RPC arms one,
so nothing that reaches either process over the network can. Unarmed, a hook is one dictionary
lookup.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

ENV = "DESKFLEET_TEST_FAULT"
# A batch of receipts is committed, and the process dies before any worker is acknowledged.
EXIT_AFTER_RECEIPT_COMMIT = "exit-after-receipt-commit"
# A dispatch has been handed to a worker's stream (the attempt may be running there).
EXIT_AFTER_DISPATCH = "exit-after-dispatch"
# The worker: an attempt that is not harmless to rerun has its started record on disk, and the
# worker dies before acting (nothing happened) or right after (it happened, with no receipt).
WORKER_EXIT_BEFORE_EFFECT = "worker-exit-before-effect"
WORKER_EXIT_AFTER_EFFECT = "worker-exit-after-effect"
# A guidance message is committed, and the process dies before the sender has its answer.
EXIT_AFTER_GUIDANCE_COMMIT = "exit-after-guidance-commit"
KNOWN = frozenset(
    {
        EXIT_AFTER_RECEIPT_COMMIT,
        EXIT_AFTER_GUIDANCE_COMMIT,
        EXIT_AFTER_DISPATCH,
        WORKER_EXIT_BEFORE_EFFECT,
        WORKER_EXIT_AFTER_EFFECT,
    }
)
EXIT_CODE = 86


def _parse(text: str) -> dict[str, int]:
    armed: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        name, _, at = item.partition("@")
        if name in KNOWN:
            armed[name] = int(at) if at.isdigit() and int(at) > 0 else 1
    return armed


_ARMED = _parse(os.environ.get(ENV, ""))
_SEEN: dict[str, int] = {}


def armed(name: str) -> bool:
    return name in _ARMED


def crash(name: str, occurrences: int = 1) -> None:
    """Count `occurrences` of the point; exit at once, with no cleanup (as a power cut or
    kill -9 would), when that reaches the count it was armed for."""
    at = _ARMED.get(name)
    if at is None or occurrences <= 0:
        return
    _SEEN[name] = _SEEN.get(name, 0) + occurrences
    if _SEEN[name] >= at:
        log.critical("test fault %s (occurrence %d): exiting now", name, _SEEN[name])
        logging.shutdown()
        os._exit(EXIT_CODE)
