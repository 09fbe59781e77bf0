"""The MCP tools' argument checks, as pure rules (the tools themselves: tests/test_mcp.py)."""

from __future__ import annotations

import math

import pytest

from coordinator.admin_cli.mcp_server import INT32_MAX, seconds, whole
from shared.errors import InvalidArgumentError


@pytest.mark.parametrize("value", [2**31, 2**62, 2**70, -1, True, 1.5, "3"])
def test_whole_numbers_outside_the_field_are_refused(value: object) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        whole("seq", value, 0)  # type: ignore[arg-type]
    assert caught.value.message.startswith(f"seq: a whole number from 0 to {INT32_MAX}, not ")
    assert len(caught.value.message) < 80  # a huge number is cut, the sentence stays short


@pytest.mark.parametrize("value", [0, 1, INT32_MAX])
def test_whole_numbers_inside_the_field_pass(value: int) -> None:
    assert whole("seq", value, 0) == value


@pytest.mark.parametrize("value", [0, -1, 1e300, math.inf, -math.inf, math.nan, True, "1"])
def test_seconds_must_be_finite_positive_and_bounded(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^ttl_seconds: a number of seconds"):
        seconds("ttl_seconds", value)  # type: ignore[arg-type]


def test_seconds_in_range_pass() -> None:
    assert seconds("ttl_seconds", 600) == 600.0
