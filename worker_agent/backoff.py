"""Reconnect pacing: a fast first retry, a short ceiling while the outage is young, then capped
exponential backoff, every wait drawn with full jitter.

A coordinator that restarts (or a replica that dies) drops every stream at once. The first
retry comes soon, so the fleet is back within a second or two, and is spread over a window
(`first`) so that the workers do not arrive in lockstep. A restart takes seconds: for the
first `prompt_window` seconds of an outage the wait stops growing at `prompt_ceiling`, or a
worker whose wait had doubled to 8 s while the coordinator started would come back up to 8 s
after it was up (a connection refused by a host whose coordinator is down costs that host
next to nothing). A coordinator that stays away is then asked less and less often, each wait
drawn at random below a ceiling that doubles up to `cap`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

FIRST = (0.05, 0.2)
PROMPT_CEILING = 1.0
PROMPT_WINDOW = 30.0


class Backoff:
    def __init__(
        self,
        base: float = 0.5,
        cap: float = 30.0,
        rng: random.Random | None = None,
        first: tuple[float, float] = FIRST,
        prompt_ceiling: float = PROMPT_CEILING,
        prompt_window: float = PROMPT_WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.base = base
        self.cap = cap
        self.first = first
        self.prompt_ceiling = prompt_ceiling
        self.prompt_window = prompt_window
        self.attempt = 0
        self._grown = 0  # doublings of the ceiling so far
        self._since = 0.0  # when the outage began (the first retry after a reset)
        self._clock = clock
        self._rng = rng or random.Random()

    def ceiling(self) -> float:
        """The largest wait the next retry (after the first) may draw."""
        return min(self.cap, self.base * 2.0**self._grown)

    def next_delay(self) -> float:
        """The wait before the next attempt: uniform in `first` for the first retry, then
        uniform in [0, ceiling]; the ceiling starts at `base` and doubles after each retry up
        to `cap`, but not past `prompt_ceiling` in the first `prompt_window` seconds."""
        now = self._clock()
        attempt, self.attempt = self.attempt, min(self.attempt + 1, 64)
        if attempt == 0:
            self._since = now
            low, high = self.first
            return self._rng.uniform(low, min(high, self.cap))
        ceiling = self.ceiling()
        young = now - self._since < self.prompt_window
        if young:
            ceiling = min(ceiling, max(self.prompt_ceiling, self.base))
        if ceiling < self.cap and not (young and ceiling >= self.prompt_ceiling):
            self._grown = min(self._grown + 1, 32)
        return self._rng.uniform(0, ceiling)

    def reset(self) -> None:
        self.attempt = 0
        self._grown = 0
