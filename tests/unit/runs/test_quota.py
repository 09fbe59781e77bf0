"""Quota rules in process: one plan is capped in size, and sizes are read in binary units. The
limits on real coordinators are tests/integration/runs/test_quota.py."""

from __future__ import annotations

import pytest

from shared.errors import InvalidArgumentError
from shared.sizes import parse_size


def test_one_plan_is_capped_in_size() -> None:
    from coordinator.runs.plan import MAX_PLAN_CHARS, Plan, PlannedAction, validate

    action = PlannedAction("diag.echo", {"value": "x" * (3 * 1024 * 1024)}, True, {})
    with pytest.raises(InvalidArgumentError) as refused:
        validate(Plan((action,) * 3))
    assert refused.value.message.startswith(
        f"actions: the plan is larger than {MAX_PLAN_CHARS} bytes at actions[2]"
    )
    _, size = validate(Plan((action,) * 2))
    assert 6 * 1024 * 1024 < size <= MAX_PLAN_CHARS


def test_sizes_are_read_in_binary_units() -> None:
    assert parse_size("f", "0") == 0
    assert parse_size("f", "1MiB") == parse_size("f", "1m") == 1024 * 1024
    assert parse_size("f", "5GiB") == 5 * 1024**3
    for bad in ("", "1.5G", "-1", "1 PB", "\u0661"):
        with pytest.raises(InvalidArgumentError):
            parse_size("f", bad)
