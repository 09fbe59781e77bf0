"""Reconnect pacing: a fast first retry, then capped exponential backoff with full jitter.

A coordinator that restarts (or a replica that dies) drops every stream at once. The first
retry comes soon, so the fleet is back within a second or two, and is spread over a window
(`first`) so that the workers do not arrive in lockstep; a coordinator that stays away is
then asked less and less often, each wait drawn at random below a growing ceiling.
"""

from __future__ import annotations

import random

FIRST = (0.05, 0.2)


class Backoff:
    def __init__(
        self,
        base: float = 0.5,
        cap: float = 30.0,
        rng: random.Random | None = None,
        first: tuple[float, float] = FIRST,
    ):
        self.base = base
        self.cap = cap
        self.first = first
        self.attempt = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        """The wait before the next attempt: uniform in `first` for the first retry, then
        uniform in [0, min(cap, base * 2^(n-1))] for the n-th retry after it."""
        attempt, self.attempt = self.attempt, min(self.attempt + 1, 32)
        if attempt == 0:
            low, high = self.first
            return self._rng.uniform(low, min(high, self.cap))
        return self._rng.uniform(0, min(self.cap, self.base * (2 ** (attempt - 1))))

    def reset(self) -> None:
        self.attempt = 0
