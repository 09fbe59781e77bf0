"""Several replicas on one store: who is alive, and orders waiting for another replica."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_replicas"
down_revision = "0004_desktop"


def upgrade() -> None:
    op.create_table(
        "replicas",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("address", sa.String(200), nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("seen_at", sa.Float, nullable=False),
    )
    op.create_table(
        "deliveries",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("replica", sa.String(200), nullable=False, index=True),
        sa.Column("worker_id", sa.String(64), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("deliveries")
    op.drop_table("replicas")
