"""Failed authentication, counted per peer host: a guesser gets a few tries a minute, then its
guesses are answered RESOURCE_EXHAUSTED instead of with their own error.

The count only ever answers a request whose credential already failed: a request with a valid
credential is never refused because of failures counted on its address, so that one client
(a console that forwards sign-ins, a browser behind the same NAT, a DNS-rebinding page) cannot
lock everyone else on its host out, the kill switch and worker connects included. Kept in each
replica's memory; behind N replicas a guesser gets N times the budget.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)

WINDOW = 60.0
MAX_KEYS = 100_000


def host_of(peer: str) -> str:
    """`ipv4:10.0.0.5:51234` -> `ipv4:10.0.0.5`; `ipv6:[::1]:5` -> `ipv6:[::1]`."""
    head, sep, port = peer.rpartition(":")
    return head if sep and port.isdigit() else peer


class FailureLimiter:
    """Failures per key within a sliding window; `allowed <= 0` turns counting off.

    What it holds is bounded whatever it is fed: each key keeps at most `allowed + 1` times,
    keys whose failures have all aged out are forgotten at least once a window, and past
    `max_keys` the oldest key makes room (a flood of new keys then forgets old ones sooner,
    which only ever lets a guesser try again, never refuses anyone)."""

    def __init__(
        self,
        allowed: int,
        window: float = WINDOW,
        clock: Callable[[], float] = time.monotonic,
        *,
        max_keys: int = MAX_KEYS,
    ) -> None:
        self._allowed = allowed
        self._window = window
        self._clock = clock
        self._max_keys = max_keys
        self._failures: dict[str, deque[float]] = {}
        self._swept = clock()

    def __len__(self) -> int:
        return len(self._failures)

    def failed(self, key: str) -> float | None:
        """Count a failure of `key`; when that puts it over its allowance, the seconds until
        its oldest counted failure ages out (at least 1), else None."""
        if self._allowed <= 0:
            return None
        now = self._clock()
        if now - self._swept >= self._window or len(self._failures) >= self._max_keys:
            self._sweep(now)
        times = self._recent(key)
        if times is None:
            while len(self._failures) >= self._max_keys:
                del self._failures[next(iter(self._failures))]  # the oldest key
            # One more than allowed is all the window needs to know it is over.
            times = self._failures[key] = deque(maxlen=self._allowed + 1)
        times.append(self._clock())
        if len(times) == self._allowed:
            log.warning(
                "%s failed to authenticate %d times in %.0f s; its next failures are refused",
                key,
                len(times),
                self._window,
            )
        if len(times) <= self._allowed:
            return None
        return max(times[0] + self._window - self._clock(), 1.0)

    def spent(self, key: str) -> float | None:
        """When `key` has used its whole allowance, the wait (as `failed`), without counting:
        for a caller that refuses before it tries."""
        if self._allowed <= 0:
            return None
        times = self._recent(key)
        if times is None or len(times) < self._allowed:
            return None
        return max(times[0] + self._window - self._clock(), 1.0)

    def _sweep(self, now: float) -> None:
        """Forget the keys whose failures have all aged out."""
        self._swept = now
        for old in [k for k in self._failures if not self._recent(k)]:
            del self._failures[old]

    def _recent(self, key: str) -> deque[float] | None:
        times = self._failures.get(key)
        if times is None:
            return None
        cutoff = self._clock() - self._window
        while times and times[0] <= cutoff:
            times.popleft()
        return times
