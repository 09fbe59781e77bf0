"""Every state a run can be in (SPEC §3), in the order people read them."""

from __future__ import annotations

RUN_STATES = (
    "RUNNING",
    "WAITING_FOR_ENVIRONMENT",
    "WAITING_FOR_AUTHORITY",
    "RECOVERING",
    "DELEGATED",
    "HAND_BACK_TO_HUMAN",
    "SUCCEEDED",
    "FAILED",
    "CANCELLED",
)
