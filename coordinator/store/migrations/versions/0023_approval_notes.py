"""An approval's discussion: people's messages and a model's advice, kept across reconnections
and replicas. Nothing in it answers the approval."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023_approval_notes"
down_revision = "0022_questions"


def upgrade() -> None:
    op.create_table(
        "approval_notes",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("approval_id", sa.String(64), sa.ForeignKey("approvals.id"), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("author", sa.String(300), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
    )
    op.create_index("ix_approval_notes_approval_id", "approval_notes", ["approval_id"])


def downgrade() -> None:
    op.drop_table("approval_notes")
