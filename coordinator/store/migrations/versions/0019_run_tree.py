"""The run tree and the origin of an action: a run's parent and root (a goal's research,
fetch and desktop runs are its children), and the goal tool call an action was made for, so
that a goal rebuilt after a restart reads what each of its calls became from the ledger."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019_run_tree"
down_revision = "0018_refused_reports"


def upgrade() -> None:
    op.add_column("runs", sa.Column("parent_id", sa.String(64), nullable=True))
    op.add_column("runs", sa.Column("root_id", sa.String(64), nullable=True))
    op.create_index("ix_runs_parent_id", "runs", ["parent_id"])
    op.create_index("ix_runs_root_id", "runs", ["root_id"])
    op.add_column("actions", sa.Column("origin", sa.String(200), nullable=False, server_default=""))
    op.create_index("ix_actions_origin", "actions", ["origin"])


def downgrade() -> None:
    op.drop_index("ix_actions_origin", "actions")
    with op.batch_alter_table("actions") as batch:
        batch.drop_column("origin")
    op.drop_index("ix_runs_root_id", "runs")
    op.drop_index("ix_runs_parent_id", "runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("root_id")
        batch.drop_column("parent_id")
