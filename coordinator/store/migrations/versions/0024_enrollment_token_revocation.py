"""An enrollment token can be revoked: one that may have leaked enrolls no worker from then on,
whatever uses and time it had left."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024_enrollment_token_revocation"
down_revision = "0023_approval_notes"


def upgrade() -> None:
    with op.batch_alter_table("enrollment_tokens") as batch:
        batch.add_column(sa.Column("revoked_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("enrollment_tokens") as batch:
        batch.drop_column("revoked_at")
