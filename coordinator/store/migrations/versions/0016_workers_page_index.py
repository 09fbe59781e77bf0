"""Worker pages in enrollment order through an index on (enrolled_at, id): a page read walks
its own rows instead of sorting the whole fleet (a status at 10,000 workers sorted all of them
for its first 100)."""

from __future__ import annotations

from alembic import op

revision = "0016_workers_page_index"
down_revision = "0015_search_indexer"


def upgrade() -> None:
    op.create_index("ix_workers_enrolled_at_id", "workers", ["enrolled_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_workers_enrolled_at_id", table_name="workers")
