"""Worker client certificates the coordinator signed: which one is each worker's newest."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_certificates"
down_revision = "0007_audit"


def upgrade() -> None:
    op.create_table(
        "worker_certificates",
        sa.Column("fingerprint", sa.String(64), primary_key=True),
        sa.Column("serial", sa.String(64), nullable=False),
        sa.Column("worker_id", sa.String(64), nullable=False, index=True),
        sa.Column("issued_at", sa.Float, nullable=False),
        sa.Column("not_after", sa.Float, nullable=False),
        sa.Column("superseded_at", sa.Float, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("worker_certificates")
