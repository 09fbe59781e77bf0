"""Failed authentication, limited per peer host: a guesser gets a few tries a minute, then
waits. Kept in each replica's memory; behind N replicas a guesser gets N times the budget."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

from shared.errors import ResourceExhaustedError

log = logging.getLogger(__name__)

WINDOW = 60.0
# Failed authentications a host may make per WINDOW. Credentials and tokens are 256-bit
# random secrets, so this is not what keeps them safe: it keeps a scanner from costing a store
# read per guess, and makes one visible in the logs.
DEFAULT_AUTH_FAILURES = 30
MAX_HOSTS = 100_000


def host_of(peer: str) -> str:
    """`ipv4:10.0.0.5:51234` -> `ipv4:10.0.0.5`; `ipv6:[::1]:5` -> `ipv6:[::1]`."""
    head, sep, port = peer.rpartition(":")
    return head if sep and port.isdigit() else peer


class FailureLimiter:
    def __init__(
        self, allowed: int, window: float = WINDOW, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._allowed = allowed
        self._window = window
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}

    def check(self, host: str) -> None:
        """Refuse a host that failed `allowed` times within the window."""
        if self._allowed <= 0:
            return
        times = self._recent(host)
        if times is not None and len(times) >= self._allowed:
            wait = times[0] + self._window - self._clock()
            raise ResourceExhaustedError(
                f"too many failed authentications from {host}: try again in {max(wait, 1):.0f} s"
            )

    def failed(self, host: str) -> None:
        if self._allowed <= 0:
            return
        if len(self._failures) >= MAX_HOSTS:
            # Rare, and cheap to rebuild: forget hosts whose failures are all old.
            for key in [k for k in self._failures if not self._recent(k)]:
                del self._failures[key]
        times = self._failures.setdefault(host, deque())
        times.append(self._clock())
        if len(times) == self._allowed:
            log.warning(
                "%s failed to authenticate %d times in %.0f s; refusing it for a while",
                host,
                len(times),
                self._window,
            )

    def _recent(self, host: str) -> deque[float] | None:
        times = self._failures.get(host)
        if times is None:
            return None
        cutoff = self._clock() - self._window
        while times and times[0] <= cutoff:
            times.popleft()
        return times
