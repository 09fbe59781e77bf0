"""A person can take a desktop over from its agent, and a desktop run keeps what its screen
showed: one row per takeover (who, which run paused, from, until, what they sent), and the
recorded frames of a run, kept apart from its artifacts so retention can drop them by age."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026_takeovers_and_recordings"
down_revision = "0025_worker_names"


def upgrade() -> None:
    op.create_table(
        "takeovers",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("worker_id", sa.String(64), nullable=False, index=True),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("display", sa.Integer(), nullable=False),
        sa.Column("by_id", sa.String(64), nullable=False),
        sa.Column("by_name", sa.String(200), nullable=False),
        sa.Column("by_admin", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("events", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
    )
    op.create_table(
        "recording_frames",
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id"), primary_key=True),
        sa.Column("seq", sa.Integer(), primary_key=True),
        sa.Column("owner_id", sa.String(64), nullable=False),
        sa.Column("worker_id", sa.String(64), nullable=False),
        sa.Column("display", sa.Integer(), nullable=False),
        sa.Column("held_by", sa.String(16), nullable=False),
        sa.Column("captured_at", sa.Float(), nullable=False),
        sa.Column("media_type", sa.String(64), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("height", sa.Integer(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False, index=True),
    )


def downgrade() -> None:
    op.drop_table("recording_frames")
    op.drop_table("takeovers")
