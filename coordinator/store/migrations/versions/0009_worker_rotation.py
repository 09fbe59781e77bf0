"""Worker credential rotation: the previous credential's hash, valid until the new one is
first used (a worker that crashed before saving its new credential is not locked out), and
whether an admin asked for a rotation."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_worker_rotation"
down_revision = "0008_certificates"


def upgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.add_column(
            sa.Column("previous_secret_hash", sa.String(64), nullable=False, server_default="")
        )
        batch.add_column(
            sa.Column("rotation_requested", sa.Boolean, nullable=False, server_default=sa.false())
        )
        batch.create_index("ix_workers_previous_secret_hash", ["previous_secret_hash"])


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.drop_index("ix_workers_previous_secret_hash")
        batch.drop_column("rotation_requested")
        batch.drop_column("previous_secret_hash")
