"""Per-owner limits: what each owner's runs store (and an admin's overrides of the limits), and
an (owner, status) index on runs through which an owner's runs in flight are counted.

The stored bytes start at what the store already holds for each owner."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_owner_quotas"
down_revision = "0012_one_current_certificate"

BACKFILL = """
INSERT INTO owner_quotas (owner_id, stored_bytes)
SELECT runs.owner_id, SUM(stored.n)
FROM (
    SELECT run_id, LENGTH(data) AS n FROM journal
    UNION ALL SELECT run_id, LENGTH(body) FROM receipts
    UNION ALL SELECT run_id, LENGTH(args) FROM actions
    UNION ALL SELECT run_id, size FROM artifacts
) AS stored
JOIN runs ON runs.id = stored.run_id
GROUP BY runs.owner_id
"""


def upgrade() -> None:
    op.create_table(
        "owner_quotas",
        sa.Column("owner_id", sa.String(64), primary_key=True),
        sa.Column("stored_bytes", sa.BigInteger, nullable=False),
        sa.Column("max_active_runs", sa.Integer, nullable=True),
        sa.Column("max_stored_bytes", sa.BigInteger, nullable=True),
    )
    op.create_index("ix_runs_owner_status", "runs", ["owner_id", "status"])
    op.execute(BACKFILL)


def downgrade() -> None:
    op.drop_index("ix_runs_owner_status", table_name="runs")
    op.drop_table("owner_quotas")
