"""Each run's place in line for a worker slot: waiting runs are served oldest first, and the
line is read through an index instead of scanning every waiting run; a run's current stage is
read through an index on (run, stage) instead of loading all of its actions; and when a run
entered its state, kept on the run instead of searched for in its journal at every change."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_run_queue"
down_revision = "0010_receipt_trace"


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("queued_at", sa.Float(), nullable=True))
        batch.add_column(sa.Column("state_since", sa.Float(), nullable=True))
        batch.create_index("ix_runs_queued_at", ["queued_at"])
    with op.batch_alter_table("actions") as batch:
        batch.create_index("ix_actions_run_stage", ["run_id", "stage"])


def downgrade() -> None:
    with op.batch_alter_table("actions") as batch:
        batch.drop_index("ix_actions_run_stage")
    with op.batch_alter_table("runs") as batch:
        batch.drop_index("ix_runs_queued_at")
        batch.drop_column("state_since")
        batch.drop_column("queued_at")
