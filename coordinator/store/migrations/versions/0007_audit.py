"""The audit log: every administrative act, with who, when and from where."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_audit"
down_revision = "0006_journal_search"


def upgrade() -> None:
    op.create_table(
        "audit",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False, index=True),
        sa.Column("actor_id", sa.String(64), nullable=False),
        sa.Column("actor_name", sa.String(200), nullable=False),
        sa.Column("actor_role", sa.String(16), nullable=False),
        sa.Column("peer", sa.String(200), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(200), nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("audit")
