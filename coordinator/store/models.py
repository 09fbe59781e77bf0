"""The coordinator's tables (SQLAlchemy 2 declarative). Times are epoch seconds (float, UTC)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class PrincipalRow(Base):
    """A person or program holding an admin or owner token."""

    __tablename__ = "principals"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class EnrollmentTokenRow(Base):
    __tablename__ = "enrollment_tokens"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    capabilities: Mapped[list[str]] = mapped_column(JSON)
    uses_total: Mapped[int] = mapped_column(Integer)
    uses_left: Mapped[int] = mapped_column(Integer)
    expires_at: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    created_by: Mapped[str] = mapped_column(String(64))
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class WorkerRow(Base):
    """An enrolled machine. `advertisement` is the last capability report it made on connect."""

    __tablename__ = "workers"
    # Pages of workers are read in enrollment order (keyset on both): see store.workers.
    __table_args__ = (Index("ix_workers_enrolled_at_id", "enrolled_at", "id"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    # Indexed: a worker is taken by its unique name wherever its id is (store.workers.resolve).
    name: Mapped[str] = mapped_column(String(200), index=True)
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    labels: Mapped[dict[str, str]] = mapped_column(JSON)
    allowed_capabilities: Mapped[list[str]] = mapped_column(JSON)
    advertisement: Mapped[dict[str, Any]] = mapped_column(JSON)
    enrolled_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    enrollment_token_id: Mapped[str] = mapped_column(String(64))
    # Rotation: the old credential works until the new one is first used (see principals).
    previous_secret_hash: Mapped[str] = mapped_column(
        String(64), index=True, default="", server_default=""
    )
    rotation_requested: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class PresenceRow(Base):
    """The stream a worker holds, written when it connects and removed when it ends. The
    worker is online while the named replica's lease (`replicas.lease_expires_at`) runs; the
    row's own `lease_expires_at` is the lease as of the connect, replaced by the replica's
    lease when read through `store.workers`. `headless` and `computer_use` say what the
    worker offered at connect (measured and granted), so fleet counts need no JSON."""

    __tablename__ = "presence"

    worker_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("workers.id", ondelete="CASCADE"), primary_key=True
    )
    replica: Mapped[str] = mapped_column(String(200), index=True)
    session_id: Mapped[str] = mapped_column(String(64))
    connected_at: Mapped[float] = mapped_column(Float)
    last_heartbeat_at: Mapped[float] = mapped_column(Float)
    lease_expires_at: Mapped[float] = mapped_column(Float, index=True)
    headless: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    computer_use: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # The worker's own kill switch as it reports it (shared/local_kill.py): since when (None:
    # not engaged), by which means, why.
    local_kill_since: Mapped[float | None] = mapped_column(Float, nullable=True, index=True)
    local_kill_means: Mapped[str] = mapped_column(String(16), default="", server_default="")
    local_kill_reason: Mapped[str] = mapped_column(String(200), default="", server_default="")


class RunRow(Base):
    """A durable unit of work: its contract, state, budget and the head of its journal."""

    __tablename__ = "runs"
    # An owner's runs in flight are counted through this index (`store/quotas.py`).
    __table_args__ = (Index("ix_runs_owner_status", "owner_id", "status"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner_id: Mapped[str] = mapped_column(String(64), index=True)
    title: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(32), index=True)
    stop_reason: Mapped[str] = mapped_column(Text, default="")
    waiting_code: Mapped[str] = mapped_column(String(64), default="")
    waiting_detail: Mapped[str] = mapped_column(Text, default="")
    limits: Mapped[dict[str, Any]] = mapped_column(JSON)
    estimate_actions: Mapped[int] = mapped_column(Integer)
    estimate_seconds: Mapped[float] = mapped_column(Float)
    extensions: Mapped[int] = mapped_column(Integer, default=0)
    successes_at_extension: Mapped[int] = mapped_column(Integer, default=0)
    actions_total: Mapped[int] = mapped_column(Integer)
    actions_succeeded: Mapped[int] = mapped_column(Integer, default=0)
    attempts_used: Mapped[int] = mapped_column(Integer, default=0)
    last_seq: Mapped[int] = mapped_column(Integer, default=0)
    last_hash: Mapped[str] = mapped_column(String(64), default="")
    trace_id: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(32), server_default="plan", default="plan")
    spec: Mapped[dict[str, Any]] = mapped_column(JSON, server_default="{}", default=dict)
    # The run's place in line for a worker slot while it has units no worker has taken yet
    # (oldest first); NULL when it waits for nothing of the kind.
    queued_at: Mapped[float | None] = mapped_column(Float, nullable=True, index=True, default=None)
    # When the run entered its current state (its newest `run.state` event), for the metrics.
    state_since: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    # The run tree: the run that started this one (a goal's research, fetch and desktop runs),
    # and the tree's root (a run with no parent is its own root). NULL in rows from before.
    parent_id: Mapped[str | None] = mapped_column(
        String(64), nullable=True, index=True, default=None
    )
    root_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True, default=None)
    # Moves at every retry, adoption and restart: a person's message can name the execution
    # it was written for, and is refused if the run has moved on.
    execution: Mapped[int] = mapped_column(Integer, server_default="1", default=1)


class ActionRow(Base):
    """One step of a run in the action ledger, with its current claim (attempt, epoch, lease)."""

    __tablename__ = "actions"
    # A run's current stage is read through this index, not by loading every action of the run.
    __table_args__ = (Index("ix_actions_run_stage", "run_id", "stage"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64), ForeignKey("runs.id"), index=True)
    idx: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(100))
    intent: Mapped[str] = mapped_column(Text)
    args: Mapped[str] = mapped_column(Text)
    fingerprint: Mapped[str] = mapped_column(String(64))
    idempotent: Mapped[bool] = mapped_column(Boolean)
    route: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), index=True)
    worker_id: Mapped[str] = mapped_column(String(64), default="", index=True)
    attempt_id: Mapped[str] = mapped_column(String(64), default="")
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_expires_at: Mapped[float | None] = mapped_column(Float, nullable=True, index=True)
    timeout_seconds: Mapped[float] = mapped_column(Float)
    dispatched_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str] = mapped_column(Text, default="")
    receipt_id: Mapped[str] = mapped_column(String(64), default="")
    # Actions of one stage are work units that run in parallel; stages run in order.
    stage: Mapped[int] = mapped_column(Integer, server_default="0", default=0)
    # What asked for the action beyond its run: a goal's tool call (`GOAL_RUN/CALL_ID`), written
    # with the action itself, so that a goal rebuilt after a restart finds what its call became.
    origin: Mapped[str] = mapped_column(String(200), server_default="", default="", index=True)
    # Its postcondition as submitted (canonical JSON {"kind", "args", "expect"}; "" for none),
    # and where its check stands: "" (not run), "checking" (the check's attempt is the current
    # claim), "observed" (the check found the effect: it counts as done, never run again) or
    # "absent" (the check found no effect: the action may run once more).
    postcondition: Mapped[str] = mapped_column(Text, server_default="", default="")
    check_state: Mapped[str] = mapped_column(String(16), server_default="", default="")


class ReceiptRow(Base):
    """A worker's result of one attempt: canonical ASCII JSON and its content hash."""

    __tablename__ = "receipts"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64), ForeignKey("runs.id"), index=True)
    action_id: Mapped[str] = mapped_column(String(64), ForeignKey("actions.id"), index=True)
    attempt_id: Mapped[str] = mapped_column(String(64))
    epoch: Mapped[int] = mapped_column(Integer)
    worker_id: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    body: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)
    # The worker's span of the attempt (W3C traceparent); empty from workers that sent none.
    traceparent: Mapped[str] = mapped_column(String(64), server_default="", default="")


class JournalRow(Base):
    """One append-only, hash-chained event of a run's journal."""

    __tablename__ = "journal"

    run_id: Mapped[str] = mapped_column(String(64), ForeignKey("runs.id"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(64))
    at: Mapped[float] = mapped_column(Float)
    data: Mapped[str] = mapped_column(Text)
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))
    trace_id: Mapped[str] = mapped_column(String(32))


class GuidanceRow(Base):
    """A person's message to a run, queued until the run's next safe boundary."""

    __tablename__ = "guidance"
    # A send retried with the same message id is the same message (`runs/guidance.py`).
    __table_args__ = (Index("ux_guidance_message", "run_id", "message_id", unique=True),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64), ForeignKey("runs.id"), index=True)
    author_id: Mapped[str] = mapped_column(String(64))
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    delivered_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    message_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    # queued | delivered | not_received (shared/states.py GuidanceState)
    status: Mapped[str] = mapped_column(String(16), server_default="queued", default="queued")
    # What took it: a model call or an action boundary, with its journal event.
    delivered_to: Mapped[str] = mapped_column(Text, server_default="", default="")
    seq: Mapped[int] = mapped_column(Integer, server_default="0", default=0)  # guidance.queued
    execution: Mapped[int] = mapped_column(Integer, server_default="1", default=1)


class QuestionRow(Base):
    """A question a goal asked a person (its `ask_human` call), and its answer. A required one
    holds the goal until it is answered, across restarts and replicas; silence never answers."""

    __tablename__ = "questions"
    __table_args__ = (Index("ux_questions_call", "run_id", "call_id", unique=True),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64), ForeignKey("runs.id"), index=True)
    owner_id: Mapped[str] = mapped_column(String(64), index=True)
    call_id: Mapped[str] = mapped_column(String(128))
    text: Mapped[str] = mapped_column(Text)
    required: Mapped[bool] = mapped_column(Boolean)
    status: Mapped[str] = mapped_column(String(16), index=True)  # open | answered | expired
    asked_at: Mapped[float] = mapped_column(Float)
    # An optional question's end of waiting; the work goes on after it (NULL: required).
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    answer: Mapped[str] = mapped_column(Text, default="")
    answered_by: Mapped[str] = mapped_column(String(64), default="")
    answered_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # How the answer reached the goal: "" (as the call's result), or the guidance message a
    # late answer became (it joins the next model call).
    guidance_id: Mapped[str] = mapped_column(String(64), default="")


class ApprovalRow(Base):
    """A typed permission request and its answer. Silence never becomes approval."""

    __tablename__ = "approvals"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64), ForeignKey("runs.id"), index=True)
    owner_id: Mapped[str] = mapped_column(String(64), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    worker_id: Mapped[str] = mapped_column(String(64), index=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    requested: Mapped[dict[str, Any]] = mapped_column(JSON)
    granted: Mapped[dict[str, Any]] = mapped_column(JSON)
    reason: Mapped[str] = mapped_column(Text)
    answer: Mapped[str] = mapped_column(Text)
    answered_by: Mapped[str] = mapped_column(String(64))
    requested_at: Mapped[float] = mapped_column(Float)
    answered_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    actions_used: Mapped[int] = mapped_column(Integer)
    # The worker's stream session the approval was first used under: a new session (the
    # worker lost its coordinator) needs a new approval.
    session_id: Mapped[str] = mapped_column(String(64))


class ApprovalNoteRow(Base):
    """One entry of an approval's discussion: a person's message or a model's advice. It
    changes nothing: the approval is answered only by approve, deny or guide."""

    __tablename__ = "approval_notes"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    approval_id: Mapped[str] = mapped_column(String(64), ForeignKey("approvals.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # message | advice
    author: Mapped[str] = mapped_column(String(300))  # a principal id, or the advising model
    text: Mapped[str] = mapped_column(Text)
    at: Mapped[float] = mapped_column(Float)


class KillSwitchRow(Base):
    """A kill switch for the fleet, one worker or one run; engaged until released."""

    __tablename__ = "kill_switches"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    scope: Mapped[str] = mapped_column(String(16))
    target: Mapped[str] = mapped_column(String(64))
    reason: Mapped[str] = mapped_column(Text)
    engaged_by: Mapped[str] = mapped_column(String(64))
    engaged_from: Mapped[str] = mapped_column(String(200))
    engaged_at: Mapped[float] = mapped_column(Float)
    released_at: Mapped[float | None] = mapped_column(Float, nullable=True, index=True)
    released_by: Mapped[str] = mapped_column(String(64))
    release_reason: Mapped[str] = mapped_column(Text)


class KillAckRow(Base):
    """A worker confirmed it applied a kill switch change (engaged or released)."""

    __tablename__ = "kill_acks"

    kill_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    worker_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    engaged: Mapped[bool] = mapped_column(Boolean, primary_key=True)
    acked_at: Mapped[float] = mapped_column(Float)


class ArtifactRow(Base):
    """Bytes a receipt refers to (screenshots), by sha256, reachable through their run only."""

    __tablename__ = "artifacts"

    run_id: Mapped[str] = mapped_column(String(64), ForeignKey("runs.id"), primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    action_id: Mapped[str] = mapped_column(String(64), index=True)  # the first that made it
    role: Mapped[str] = mapped_column(String(64))
    media_type: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(Integer)
    width: Mapped[int] = mapped_column(Integer)
    height: Mapped[int] = mapped_column(Integer)
    # Loaded only when asked for: listing a run's artifacts must not read their bytes.
    data: Mapped[bytes] = mapped_column(LargeBinary, deferred=True)
    created_at: Mapped[float] = mapped_column(Float)


class InputLeaseRow(Base):
    """Which run holds a desktop's input: one controller at a time."""

    __tablename__ = "input_leases"

    worker_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64))
    acquired_at: Mapped[float] = mapped_column(Float)


class TakeoverRow(Base):
    """A person holding a desktop's input in place of its agent (coordinator/runs/desktop/
    takeovers.py); the run it paused waits as human_active until the person hands back."""

    __tablename__ = "takeovers"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    worker_id: Mapped[str] = mapped_column(String(64), index=True)
    run_id: Mapped[str] = mapped_column(String(64))  # "" when no run held the desktop
    display: Mapped[int] = mapped_column(Integer)
    by_id: Mapped[str] = mapped_column(String(64))
    by_name: Mapped[str] = mapped_column(String(200))
    by_admin: Mapped[bool] = mapped_column(Boolean)
    reason: Mapped[str] = mapped_column(Text)
    note: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))  # active | handed_back | ended
    events: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class RecordingFrameRow(Base):
    """One frame of what a desktop run's display showed while the run held it (agent or
    person at the controls); dropped by age (`serve --recording-retention`) and counted in
    the owner's stored bytes."""

    __tablename__ = "recording_frames"

    run_id: Mapped[str] = mapped_column(String(64), ForeignKey("runs.id"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner_id: Mapped[str] = mapped_column(String(64))
    worker_id: Mapped[str] = mapped_column(String(64))
    display: Mapped[int] = mapped_column(Integer)
    held_by: Mapped[str] = mapped_column(String(16))  # agent | person
    captured_at: Mapped[float] = mapped_column(Float)
    media_type: Mapped[str] = mapped_column(String(64))
    width: Mapped[int] = mapped_column(Integer)
    height: Mapped[int] = mapped_column(Integer)
    size: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64))
    data: Mapped[bytes] = mapped_column(LargeBinary, deferred=True)
    created_at: Mapped[float] = mapped_column(Float, index=True)


class SecretRow(Base):
    """A value `type` may reference as {{secret:NAME}}; sent to a worker only to type it."""

    __tablename__ = "secrets"

    owner_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[float] = mapped_column(Float)
    updated_by: Mapped[str] = mapped_column(String(64))


class AuditRow(Base):
    """One administrative act (see coordinator/security/audit.py); append-only."""

    __tablename__ = "audit"

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float, index=True)
    actor_id: Mapped[str] = mapped_column(String(64))
    actor_name: Mapped[str] = mapped_column(String(200))
    actor_role: Mapped[str] = mapped_column(String(16))
    peer: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(200))
    detail: Mapped[str] = mapped_column(Text)


class ReplicaRow(Base):
    """A coordinator replica on this store; alive while `seen_at` is recent. Its lease
    (`lease_expires_at`, moved at every beat) is the presence lease of every worker whose
    stream it holds."""

    __tablename__ = "replicas"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    address: Mapped[str] = mapped_column(String(200))
    started_at: Mapped[float] = mapped_column(Float)
    seen_at: Mapped[float] = mapped_column(Float)
    lease_expires_at: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")


class DeliveryRow(Base):
    """An order for a worker whose stream another replica holds, until that replica sends it."""

    __tablename__ = "deliveries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    replica: Mapped[str] = mapped_column(String(200), index=True)
    worker_id: Mapped[str] = mapped_column(String(64))
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)


class WorkerCertificateRow(Base):
    """A client certificate the coordinator signed for a worker. Only the newest one of a
    worker (`superseded_at` empty) opens a stream: an older copy is refused after renewal."""

    __tablename__ = "worker_certificates"
    # At most one current certificate per worker, whatever races past the row lock.
    __table_args__ = (
        Index(
            "worker_certificates_one_current",
            "worker_id",
            unique=True,
            sqlite_where=text("superseded_at IS NULL"),
            postgresql_where=text("superseded_at IS NULL"),
        ),
    )

    fingerprint: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 of the DER
    serial: Mapped[str] = mapped_column(String(64))
    worker_id: Mapped[str] = mapped_column(String(64), index=True)
    issued_at: Mapped[float] = mapped_column(Float)
    not_after: Mapped[float] = mapped_column(Float)
    superseded_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class OwnerQuotaRow(Base):
    """What an owner's runs have stored, and the limits an admin set for that owner (None:
    the coordinator's default). Changed only at the end of a transaction (`store/quotas.py`)."""

    __tablename__ = "owner_quotas"

    owner_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    stored_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    max_active_runs: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_stored_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class RefusedReportRow(Base):
    """That a worker's report (receipt, start) on an action was refused for a reason once: the
    journal records only the first of each (action, sender, reason) (`store/refusals.py`)."""

    __tablename__ = "refused_reports"

    action_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    worker_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    reason: Mapped[str] = mapped_column(String(32), primary_key=True)  # e.g. receipt.stale_epoch
    run_id: Mapped[str] = mapped_column(String(64))
    at: Mapped[float] = mapped_column(Float)
