"""Foundation: principals, enrollment tokens, workers and presence leases."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_foundation"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "principals",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("revoked_at", sa.Float, nullable=True),
    )
    op.create_table(
        "enrollment_tokens",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("secret_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("capabilities", sa.JSON, nullable=False),
        sa.Column("uses_total", sa.Integer, nullable=False),
        sa.Column("uses_left", sa.Integer, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("created_by", sa.String(64), nullable=False),
    )
    op.create_table(
        "workers",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("state", sa.String(16), nullable=False, index=True),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("allowed_capabilities", sa.JSON, nullable=False),
        sa.Column("advertisement", sa.JSON, nullable=False),
        sa.Column("enrolled_at", sa.Float, nullable=False),
        sa.Column("revoked_at", sa.Float, nullable=True),
        sa.Column("enrollment_token_id", sa.String(64), nullable=False),
    )
    op.create_table(
        "presence",
        sa.Column(
            "worker_id",
            sa.String(64),
            sa.ForeignKey("workers.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("replica", sa.String(200), nullable=False),
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("connected_at", sa.Float, nullable=False),
        sa.Column("last_heartbeat_at", sa.Float, nullable=False),
        sa.Column("lease_expires_at", sa.Float, nullable=False, index=True),
    )
