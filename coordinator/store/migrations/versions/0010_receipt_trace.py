"""The trace context of each receipt: the worker's span of the attempt (W3C traceparent), so
that a run's actions can be found in a tracing backend from `runs show`."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_receipt_trace"
down_revision = "0009_worker_rotation"


def upgrade() -> None:
    with op.batch_alter_table("receipts") as batch:
        batch.add_column(sa.Column("traceparent", sa.String(64), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("receipts") as batch:
        batch.drop_column("traceparent")
