"""Workers are found by name as well as by id (every call that takes a worker takes its
unique name): an index, so that resolving a name reads no more than the workers that have it."""

from __future__ import annotations

from alembic import op

revision = "0025_worker_names"
down_revision = "0024_enrollment_token_revocation"


def upgrade() -> None:
    op.create_index("ix_workers_name", "workers", ["name"])


def downgrade() -> None:
    op.drop_index("ix_workers_name", table_name="workers")
