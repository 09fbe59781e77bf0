"""Presence rules in process: the reconnect backoff (fast and jittered first, growing with full
jitter, prompt while an outage is young) and page tokens. The presence store itself is
tests/integration/fleet/test_presence_store.py."""

from __future__ import annotations

import random

import pytest

from coordinator.fleet.service import page_token, parse_page_token
from shared.errors import InvalidArgumentError
from worker_agent.backoff import Backoff


def test_backoff_first_retry_is_fast_and_jittered_then_grows_with_full_jitter() -> None:
    firsts = []
    for seed in range(50):
        backoff = Backoff(base=0.5, cap=4.0, rng=random.Random(seed))
        firsts.append(backoff.next_delay())
        later = [backoff.next_delay() for _ in range(10)]
        ceilings = [min(4.0, 0.5 * 2**i) for i in range(10)]
        assert all(0 <= d <= c for d, c in zip(later, ceilings, strict=True))
        backoff.reset()
        assert 0.05 <= backoff.next_delay() <= 0.2
    assert all(0.05 <= d <= 0.2 for d in firsts)
    assert len(set(firsts)) == len(firsts)  # spread out: a fleet does not come back in lockstep


def test_backoff_stays_prompt_while_an_outage_is_young_then_grows() -> None:
    """A coordinator that restarts within the prompt window finds its workers retrying at
    most a second apart; one that stays away is asked less and less often."""
    now = [100.0]
    backoff = Backoff(
        base=0.5,
        cap=30.0,
        rng=random.Random(3),
        prompt_ceiling=1.0,
        prompt_window=30.0,
        clock=lambda: now[0],
    )
    assert 0.05 <= backoff.next_delay() <= 0.2
    young = []
    while now[0] < 129.0:
        young.append(backoff.ceiling())
        delay = backoff.next_delay()
        assert 0 <= delay <= 1.0
        now[0] += max(delay, 0.01)
    assert len(young) > 40 and young[0] == 0.5 and set(young[1:]) == {1.0}
    now[0] = 131.0  # the outage is older than the window: the ceiling doubles up to the cap
    later = []
    for _ in range(8):
        later.append(backoff.ceiling())
        assert 0 <= backoff.next_delay() <= later[-1]
    assert later == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    backoff.reset()  # a welcome: the next outage starts prompt again, from its own start
    now[0] = 500.0
    backoff.next_delay()
    now[0] = 520.0
    assert backoff.ceiling() == 0.5 and backoff.next_delay() <= 0.5
    assert backoff.next_delay() <= 1.0 and backoff.ceiling() == 1.0


def test_page_tokens_round_trip_and_others_are_refused() -> None:
    assert parse_page_token("") is None
    assert parse_page_token(page_token(1234.5, "wrk_x")) == (1234.5, "wrk_x")
    for bad in ("nope", "w1.!!!", "w1." + "A" * 500, "w1.WzEsMl0", "w1.eyJhIjoxfQ"):
        with pytest.raises(InvalidArgumentError, match="page_token"):
            parse_page_token(bad)
