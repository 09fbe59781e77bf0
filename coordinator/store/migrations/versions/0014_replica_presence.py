"""Presence that does not grow with the fleet: each replica holds one lease (`replicas.
lease_expires_at`) for all the streams it holds, and a presence row says at connect what the
worker offers, so fleet counts are one aggregate query."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_replica_presence"
down_revision = "0013_owner_quotas"


def upgrade() -> None:
    op.add_column(
        "replicas",
        sa.Column("lease_expires_at", sa.Float, nullable=False, server_default="0"),
    )
    op.add_column(
        "presence",
        sa.Column("headless", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    op.add_column(
        "presence",
        sa.Column("computer_use", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    op.create_index("ix_presence_replica", "presence", ["replica"])


def downgrade() -> None:
    op.drop_index("ix_presence_replica", "presence")
    with op.batch_alter_table("presence") as batch:
        batch.drop_column("computer_use")
        batch.drop_column("headless")
    with op.batch_alter_table("replicas") as batch:
        batch.drop_column("lease_expires_at")
