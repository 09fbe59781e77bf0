"""Test-only fault hooks: the process dies at a named point, so tests can see what survives.

Armed only by the environment the coordinator process starts with (`DESKFLEET_TEST_FAULT`,
comma-separated names), read once at import. No setting, flag, file or RPC arms one, so nothing
that reaches the coordinator over the network can. Unarmed, a hook is one set lookup.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

ENV = "DESKFLEET_TEST_FAULT"
# A batch of receipts is committed, and the process dies before any worker is acknowledged.
EXIT_AFTER_RECEIPT_COMMIT = "exit-after-receipt-commit"
KNOWN = frozenset({EXIT_AFTER_RECEIPT_COMMIT})
EXIT_CODE = 86

_ARMED = frozenset(n.strip() for n in os.environ.get(ENV, "").split(",") if n.strip()) & KNOWN


def armed(name: str) -> bool:
    return name in _ARMED


def crash(name: str) -> None:
    """Exit at once, with no cleanup (as a power cut or kill -9 would), if `name` is armed."""
    if name in _ARMED:
        log.critical("test fault %s: exiting now", name)
        logging.shutdown()
        os._exit(EXIT_CODE)
