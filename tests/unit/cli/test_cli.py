"""CLI conventions in process: durations read and refused, and the reconnect backoff (it
grows, is capped and jittered, and resets). The commands against a coordinator are
tests/integration/cli/test_cli.py."""

from __future__ import annotations

import random

import pytest

from shared.config import parse_duration
from shared.errors import InvalidArgumentError
from worker_agent.backoff import Backoff


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("10m", 600), ("1h", 3600), ("2d", 172800), ("1.5h", 5400)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "-1h", "1w", "1 hour"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_duration(text)


def test_backoff_grows_is_capped_jittered_and_resets() -> None:
    # No prompt window: every retry doubles the ceiling (the window has its own test).
    backoff = Backoff(base=0.5, cap=4.0, rng=random.Random(7), prompt_window=0.0)
    delays = [backoff.next_delay() for _ in range(12)]
    ceilings = [min(4.0, 0.5 * 2**i) for i in range(12)]
    assert all(0 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert len(set(delays)) == len(delays)  # jittered, never in lockstep
    assert max(delays[6:]) <= 4.0 and max(delays[6:]) > 2.0
    backoff.reset()
    assert backoff.next_delay() <= 0.5
