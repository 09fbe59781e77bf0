"""One current certificate per worker: concurrent renewals had left several accepted. Rows a
race left current are settled first (the newest stays current), then a partial unique index
keeps it so."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_one_current_certificate"
down_revision = "0011_run_queue"

CURRENT = sa.text("superseded_at IS NULL")


def upgrade() -> None:
    op.execute(
        """
        UPDATE worker_certificates SET superseded_at = issued_at
        WHERE superseded_at IS NULL AND EXISTS (
            SELECT 1 FROM worker_certificates AS newer
            WHERE newer.worker_id = worker_certificates.worker_id
              AND newer.superseded_at IS NULL
              AND (newer.issued_at > worker_certificates.issued_at
                   OR (newer.issued_at = worker_certificates.issued_at
                       AND newer.fingerprint > worker_certificates.fingerprint))
        )
        """
    )
    op.create_index(
        "worker_certificates_one_current",
        "worker_certificates",
        ["worker_id"],
        unique=True,
        sqlite_where=CURRENT,
        postgresql_where=CURRENT,
    )


def downgrade() -> None:
    op.drop_index("worker_certificates_one_current", "worker_certificates")
