"""What one ledger transaction did, noted for the metrics: state changes, finished attempts,
retries, recoveries, receipts and the workers' reports it refused. The transaction collects
`Notes` while it runs; the metrics apply them only once it has committed
(`coordinator/observe/metrics.py`), so a transaction that is rolled back or run again counts
once; the dispatcher hands the refused reports to the budgets of the workers' streams."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from coordinator.store import counts
from coordinator.store.models import RunRow
from shared.states import ActionState, RunState

# Run states that mean a person, an authority or a missing capability holds the run (SPEC §3).
HAND_BACK_STATES = (
    RunState.WAITING_FOR_ENVIRONMENT,
    RunState.WAITING_FOR_AUTHORITY,
    RunState.HAND_BACK_TO_HUMAN,
    RunState.FAILED,
)
_CODE = re.compile(r"^([a-z]+(?:_[a-z]+)+)\b")  # "budget_exhausted: ...", "approval_denied by"
_RETRY_CAUSES = (
    ("lease expired", "lease_expired"),
    ("timed out", "timeout"),
    ("worker stopped", "worker_interrupted"),
    ("no longer knows", "worker_lost_attempt"),
)


def handback_reason(status: str, stop_reason: str, waiting_code: str) -> str:
    """A short code for why a run stopped or waits for someone (label value)."""
    if waiting_code:
        return waiting_code
    if "attempts exhausted" in stop_reason:
        return "recovery_exhausted"
    match = _CODE.match(stop_reason)
    if match:
        return match.group(1)
    return "action_failed" if status == RunState.FAILED else "unspecified"


def retry_cause(status: str, cause: str) -> str:
    """Why an attempt is tried again: its receipt said failed, or its outcome was lost."""
    if status != ActionState.UNKNOWN:
        return "action_failed"
    return next((code for needle, code in _RETRY_CAUSES if needle in cause), "unknown_outcome")


# ---------------------------------------------------------------------- notes of a transaction


@dataclass(frozen=True)
class StateChange:
    kind: str
    old: str
    new: str
    seconds: float  # spent in `old`
    handback: str  # the reason, when `new` holds the run for someone; else ""


@dataclass(frozen=True)
class Finished:
    kind: str
    status: str
    seconds: float | None  # dispatch to durable receipt


@dataclass(frozen=True)
class Retried:
    kind: str
    cause: str


@dataclass(frozen=True)
class Recovered:
    path: str
    ok: bool


@dataclass(frozen=True)
class ReceiptSeen:
    verdict: str


@dataclass(frozen=True)
class ReportRefused:
    """A worker's receipt or start that the ledger refused. Counted in the metrics, and in the
    budget of the worker's stream (`streams/worker_bounds.ReportBudget`); the journal holds
    only the first of each (action, sender, reason)."""

    report: str  # "receipt" or "start"
    reason: str  # a code: stale_epoch, not_claimant, not_in_flight, unknown_action, bad_result
    worker_id: str
    action_id: str
    attempt_id: str
    journaled: bool


Note = StateChange | Finished | Retried | Recovered | ReceiptSeen | ReportRefused


@dataclass
class Notes:
    """What one ledger transaction did, applied to the metrics once it has committed."""

    events: list[Note] = field(default_factory=list)
    # Runs whose state this transaction changed, and when: a second change in the same
    # transaction cannot find the first in the store (it is not flushed yet).
    entered: dict[str, float] = field(default_factory=dict)

    def state_change(
        self, s: Session, run: RunRow, status: str, stop_reason: str, waiting_code: str, now: float
    ) -> None:
        since = self.entered.get(run.id) or run.state_since
        if since is None:  # a run from before the store kept it
            since = counts.state_entered_at(s, run.id) or run.created_at
        self.entered[run.id] = now
        reason = (
            handback_reason(status, stop_reason, waiting_code) if status in HAND_BACK_STATES else ""
        )
        self.events.append(StateChange(run.kind, run.status, status, max(now - since, 0.0), reason))

    def finished(self, kind: str, status: str, seconds: float | None) -> None:
        self.events.append(Finished(kind, status, seconds))

    def retried(self, kind: str, status: str, cause: str) -> None:
        self.events.append(Retried(kind, retry_cause(status, cause)))

    def recovered(self, path: str, statuses: Iterable[str]) -> None:
        """Attempts a recovery path examined; each succeeded unless left with an unknown
        outcome (the run then waits for a person)."""
        self.events.extend(Recovered(path, status != ActionState.UNKNOWN) for status in statuses)

    def receipt(self, accepted: bool, reason: str) -> None:
        verdict = ("duplicate" if reason else "accepted") if accepted else "refused"
        self.events.append(ReceiptSeen(verdict))

    def refused(
        self,
        report: str,
        reason: str,
        worker_id: str,
        action_id: str,
        attempt_id: str,
        *,
        journaled: bool = False,
    ) -> None:
        self.events.append(
            ReportRefused(report, reason, worker_id, action_id, attempt_id, journaled)
        )

    def refused_reports(self) -> list[ReportRefused]:
        return [e for e in self.events if isinstance(e, ReportRefused)]
