"""A goal's questions as rows: open, answered or expired, kept across restarts and replicas,
so that a required question holds its goal until a person answers and an answer is never lost
with the process that waited for it."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022_questions"
down_revision = "0021_guidance_identity"


def upgrade() -> None:
    op.create_table(
        "questions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("owner_id", sa.String(64), nullable=False),
        sa.Column("call_id", sa.String(128), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("required", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("asked_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=True),
        sa.Column("answer", sa.Text(), nullable=False),
        sa.Column("answered_by", sa.String(64), nullable=False),
        sa.Column("answered_at", sa.Float(), nullable=True),
        sa.Column("guidance_id", sa.String(64), nullable=False),
    )
    op.create_index("ix_questions_run_id", "questions", ["run_id"])
    op.create_index("ix_questions_owner_id", "questions", ["owner_id"])
    op.create_index("ix_questions_status", "questions", ["status"])
    op.create_index("ux_questions_call", "questions", ["run_id", "call_id"], unique=True)


def downgrade() -> None:
    op.drop_table("questions")
