"""Metric labels as pure rules: hand-back reasons and retry causes are short codes drawn from
what the ledger writes. The endpoints of real processes are tests/e2e/observe/test_metrics.py."""

from __future__ import annotations

import pytest

from coordinator.model.notes import handback_reason, retry_cause


@pytest.mark.parametrize(
    ("status", "stop_reason", "waiting_code", "reason"),
    [
        ("WAITING_FOR_AUTHORITY", "", "needs_approval", "needs_approval"),
        ("WAITING_FOR_AUTHORITY", "", "human_active", "human_active"),
        ("WAITING_FOR_ENVIRONMENT", "", "input_lease_held", "input_lease_held"),
        ("WAITING_FOR_ENVIRONMENT", "", "no_eligible_worker", "no_eligible_worker"),
        (
            "HAND_BACK_TO_HUMAN",
            "unknown_outcome: action 0 ...",
            "unknown_outcome",
            "unknown_outcome",
        ),
        (
            "HAND_BACK_TO_HUMAN",
            "coordinator_restarted: the goal loop stopped",
            "",
            "coordinator_restarted",
        ),
        (
            "FAILED",
            "action 1 (diag.fail, act_x) failed: 3 attempts exhausted (last: t)",
            "",
            "recovery_exhausted",
        ),
        (
            "FAILED",
            "budget_exhausted: the action limit (5 attempts) is reached",
            "",
            "budget_exhausted",
        ),
        ("FAILED", "approval_denied by admin: not now", "", "approval_denied"),
        ("FAILED", "action 0 (diag.fail, act_x) failed (3 attempts): no", "", "action_failed"),
    ],
)
def test_hand_back_reasons_are_short_codes_from_the_stop_reasons_the_ledger_writes(
    status: str, stop_reason: str, waiting_code: str, reason: str
) -> None:
    assert handback_reason(status, stop_reason, waiting_code) == reason


@pytest.mark.parametrize(
    ("status", "cause", "code"),
    [
        ("FAILED", "no", "action_failed"),
        ("UNKNOWN", "its claimant stopped responding (lease expired)", "lease_expired"),
        ("UNKNOWN", "timed out after 5 s", "timeout"),
        ("UNKNOWN", "the worker stopped during the attempt", "worker_interrupted"),
        ("UNKNOWN", "the worker no longer knows the attempt", "worker_lost_attempt"),
        ("UNKNOWN", "something new", "unknown_outcome"),
    ],
)
def test_retry_causes_are_short_codes(status: str, cause: str, code: str) -> None:
    assert retry_cause(status, cause) == code
