"""A worker's own kill switch on its presence row, as the worker reports it (its hello, then
each change): since when (null: not engaged), by which means and why, so that every replica's
views and `kill status` show it (30.19)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_presence_local_kill"
down_revision = "0016_workers_page_index"


def upgrade() -> None:
    op.add_column("presence", sa.Column("local_kill_since", sa.Float, nullable=True))
    op.add_column(
        "presence",
        sa.Column("local_kill_means", sa.String(16), nullable=False, server_default=""),
    )
    op.add_column(
        "presence",
        sa.Column("local_kill_reason", sa.String(200), nullable=False, server_default=""),
    )
    op.create_index("ix_presence_local_kill_since", "presence", ["local_kill_since"])


def downgrade() -> None:
    op.drop_index("ix_presence_local_kill_since", "presence")
    with op.batch_alter_table("presence") as batch:
        batch.drop_column("local_kill_reason")
        batch.drop_column("local_kill_means")
        batch.drop_column("local_kill_since")
