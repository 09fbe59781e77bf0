"""Capped exponential backoff with full jitter, for reconnecting to the coordinator."""

from __future__ import annotations

import random


class Backoff:
    def __init__(self, base: float = 0.5, cap: float = 30.0, rng: random.Random | None = None):
        self.base = base
        self.cap = cap
        self.attempt = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        """The wait before the next attempt: uniform in [0, min(cap, base * 2^attempt)]."""
        ceiling = min(self.cap, self.base * (2**self.attempt))
        self.attempt = min(self.attempt + 1, 32)
        return self._rng.uniform(0, ceiling)

    def reset(self) -> None:
        self.attempt = 0
