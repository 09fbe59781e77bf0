"""Desktop control: approvals, kill switches and their acknowledgements, artifacts, input
leases and secrets."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_desktop"
down_revision = "0003_stages"


def upgrade() -> None:
    op.create_table(
        "approvals",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id"), nullable=False, index=True),
        sa.Column("owner_id", sa.String(64), nullable=False, index=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("worker_id", sa.String(64), nullable=False, index=True),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("requested", sa.JSON, nullable=False),
        sa.Column("granted", sa.JSON, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("answer", sa.Text, nullable=False),
        sa.Column("answered_by", sa.String(64), nullable=False),
        sa.Column("requested_at", sa.Float, nullable=False),
        sa.Column("answered_at", sa.Float, nullable=True),
        sa.Column("expires_at", sa.Float, nullable=True),
        sa.Column("actions_used", sa.Integer, nullable=False),
        sa.Column("session_id", sa.String(64), nullable=False),
    )
    op.create_table(
        "kill_switches",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("target", sa.String(64), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("engaged_by", sa.String(64), nullable=False),
        sa.Column("engaged_from", sa.String(200), nullable=False),
        sa.Column("engaged_at", sa.Float, nullable=False),
        sa.Column("released_at", sa.Float, nullable=True, index=True),
        sa.Column("released_by", sa.String(64), nullable=False),
        sa.Column("release_reason", sa.Text, nullable=False),
    )
    op.create_table(
        "kill_acks",
        sa.Column("kill_id", sa.String(64), primary_key=True),
        sa.Column("worker_id", sa.String(64), primary_key=True),
        sa.Column("engaged", sa.Boolean, primary_key=True),
        sa.Column("acked_at", sa.Float, nullable=False),
    )
    op.create_table(
        "artifacts",
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id"), primary_key=True),
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("action_id", sa.String(64), nullable=False, index=True),
        sa.Column("role", sa.String(64), nullable=False),
        sa.Column("media_type", sa.String(64), nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("width", sa.Integer, nullable=False),
        sa.Column("height", sa.Integer, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "input_leases",
        sa.Column("worker_id", sa.String(64), primary_key=True),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("acquired_at", sa.Float, nullable=False),
    )
    op.create_table(
        "secrets",
        sa.Column("owner_id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("updated_by", sa.String(64), nullable=False),
    )
