"""What the ledger decides and what workers report: plain values that every part of the
coordinator's heart passes around (a leaf module: it imports nothing of the coordinator)."""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.desktop_scope import Grant


@dataclass(frozen=True)
class DispatchOrder:
    worker_id: str
    action_id: str
    run_id: str
    attempt_id: str
    epoch: int
    attempt: int
    kind: str
    args_json: str
    idempotent: bool
    timeout_seconds: float
    ready_at: float = 0.0  # when the action could first run: for the dispatch latency metric
    # Values of {{secret:NAME}} references, for the worker only: never journaled or stored.
    secrets: dict[str, str] = field(default_factory=dict, repr=False)
    trace_id: str = ""  # the run's
    # The attempt's span, set by the replica that sends the order down the worker's stream.
    traceparent: str = ""
    scope: Grant | None = None  # a desktop action's approved scope, as the worker is sent it
    # When the claim was made (the action row's `dispatched_at`). A stream that opened later
    # is not sent the order: the reconcile of that connect re-sends the attempt instead
    # (`presence.Presence.send`, `outcomes.reconcile_workers`), so it runs once, not twice.
    dispatched_at: float = 0.0


@dataclass(frozen=True)
class CancelOrder:
    worker_id: str
    action_id: str
    attempt_id: str
    reason: str


@dataclass(frozen=True)
class ReceiptVerdict:
    worker_id: str
    action_id: str
    attempt_id: str
    accepted: bool
    reason: str = ""


@dataclass(frozen=True)
class KillPush:
    """A kill switch change for one worker's stream."""

    worker_id: str
    kill_id: str
    engaged: bool
    scope: str
    target: str
    reason: str


@dataclass(frozen=True)
class RotateOrder:
    """Ask a worker's stream to replace its credential (an admin's request)."""

    worker_id: str


Order = DispatchOrder | CancelOrder | ReceiptVerdict | KillPush | RotateOrder


@dataclass(frozen=True)
class IncomingArtifact:
    sha256: str
    media_type: str
    data: bytes = field(repr=False)
    width: int
    height: int


@dataclass(frozen=True)
class IncomingReceipt:
    worker_id: str
    action_id: str
    run_id: str
    attempt_id: str
    epoch: int
    status: str
    result_json: str
    error: str
    started_at: float
    finished_at: float
    artifacts: tuple[IncomingArtifact, ...] = ()
    traceparent: str = ""  # the worker's span of the attempt


@dataclass(frozen=True)
class Held:
    """An attempt the worker reported on connect: running, finished (in its outbox), interrupted."""

    action_id: str
    attempt_id: str
    epoch: int
    state: str
