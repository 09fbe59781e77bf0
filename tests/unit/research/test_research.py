"""Research requests checked at the coordinator, in process: app routes in the policy, and the
fan-out limits. Research runs end to end are tests/e2e/research/test_research.py."""

from __future__ import annotations

import pytest

from coordinator.runs.research import routing
from shared.errors import InvalidArgumentError
from tests.e2e.research.test_research import HEADLESS_ROUTE


def test_app_routes_in_the_policy_are_checked() -> None:
    policy = routing.parse(
        {"research": {"routes": [{"name": "deep", "app": "deep-research"}, HEADLESS_ROUTE]}}
    )
    assert policy.research[0] == {"name": "deep", "app": "deep-research", "timeout": 120.0}
    for route, message in (
        ({"name": "x", "app": "two words"}, r"routes\[0\]\.app: the name a worker gives"),
        ({"name": "x", "app": "a", "timeout": 0}, r"routes\[0\]\.timeout: seconds"),
        ({"name": "x", "app": "a", "capability": "headless"}, "takes no capability"),
    ):
        with pytest.raises(InvalidArgumentError, match=message):
            routing.parse({"research": {"routes": [route]}})


def test_research_fan_out_limits_are_refused_outside_their_bounds() -> None:
    from coordinator.runs.research.runs import (
        MAX_BYTES,
        MAX_PAGES,
        MAX_SOURCES,
        ResearchRequest,
        research_plan,
    )

    def error(**fields: object) -> str:
        try:
            research_plan(ResearchRequest(**{"query": "varn", **fields}))  # type: ignore[arg-type]
        except InvalidArgumentError as exc:
            return exc.message
        return ""

    assert error(max_sources=0) == error(max_sources=MAX_SOURCES + 1)
    assert error(max_sources=MAX_SOURCES + 1) == f"max_sources: between 1 and {MAX_SOURCES}"
    assert error(max_pages=MAX_PAGES + 1) == f"max_pages: between 1 and {MAX_PAGES}"
    assert error(max_pages=-1) == f"max_pages: between 1 and {MAX_PAGES}"
    assert error(max_bytes=MAX_BYTES + 1) == f"max_bytes: between 1 and {MAX_BYTES}"
    assert error(max_sources=MAX_SOURCES, max_pages=MAX_PAGES) == ""
