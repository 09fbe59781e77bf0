"""The reports of workers refused once per (action, sender, reason): the journal records the
first and the metrics count the rest, so a worker repeating a refused report writes nothing
into the run (B7)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_refused_reports"
down_revision = "0017_presence_local_kill"


def upgrade() -> None:
    op.create_table(
        "refused_reports",
        sa.Column("action_id", sa.String(64), primary_key=True),
        sa.Column("worker_id", sa.String(64), primary_key=True),
        sa.Column("reason", sa.String(32), primary_key=True),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("refused_reports")
