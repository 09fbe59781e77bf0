"""Runs, the action ledger, receipts, the hash-chained journal and queued guidance."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_runs"
down_revision = "0001_foundation"


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("owner_id", sa.String(64), nullable=False, index=True),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("status", sa.String(32), nullable=False, index=True),
        sa.Column("stop_reason", sa.Text, nullable=False),
        sa.Column("waiting_code", sa.String(64), nullable=False),
        sa.Column("waiting_detail", sa.Text, nullable=False),
        sa.Column("limits", sa.JSON, nullable=False),
        sa.Column("estimate_actions", sa.Integer, nullable=False),
        sa.Column("estimate_seconds", sa.Float, nullable=False),
        sa.Column("extensions", sa.Integer, nullable=False),
        sa.Column("successes_at_extension", sa.Integer, nullable=False),
        sa.Column("actions_total", sa.Integer, nullable=False),
        sa.Column("actions_succeeded", sa.Integer, nullable=False),
        sa.Column("attempts_used", sa.Integer, nullable=False),
        sa.Column("last_seq", sa.Integer, nullable=False),
        sa.Column("last_hash", sa.String(64), nullable=False),
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "actions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id"), nullable=False, index=True),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(100), nullable=False),
        sa.Column("intent", sa.Text, nullable=False),
        sa.Column("args", sa.Text, nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("idempotent", sa.Boolean, nullable=False),
        sa.Column("route", sa.JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("worker_id", sa.String(64), nullable=False, index=True),
        sa.Column("attempt_id", sa.String(64), nullable=False),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("lease_expires_at", sa.Float, nullable=True, index=True),
        sa.Column("timeout_seconds", sa.Float, nullable=False),
        sa.Column("dispatched_at", sa.Float, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column("receipt_id", sa.String(64), nullable=False),
    )
    op.create_table(
        "receipts",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id"), nullable=False, index=True),
        sa.Column(
            "action_id", sa.String(64), sa.ForeignKey("actions.id"), nullable=False, index=True
        ),
        sa.Column("attempt_id", sa.String(64), nullable=False),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("worker_id", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "journal",
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id"), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("trace_id", sa.String(32), nullable=False),
    )
    op.create_table(
        "guidance",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id"), nullable=False, index=True),
        sa.Column("author_id", sa.String(64), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("delivered_at", sa.Float, nullable=True),
    )
