"""Work units: actions in one stage run in parallel; runs carry a kind and a spec."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_stages"
down_revision = "0002_runs"


def upgrade() -> None:
    with op.batch_alter_table("actions") as batch:
        batch.add_column(sa.Column("stage", sa.Integer, nullable=False, server_default="0"))
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("kind", sa.String(32), nullable=False, server_default="plan"))
        batch.add_column(sa.Column("spec", sa.JSON, nullable=False, server_default="{}"))
    # Plans written before stages existed ran one action at a time: keep that order.
    op.execute("UPDATE actions SET stage = idx")
