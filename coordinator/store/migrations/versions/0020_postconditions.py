"""An action's postcondition: the read-only check that settles its unknown outcome after a
restart (it took effect: done; it did not: it may run once), and where that check stands."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020_postconditions"
down_revision = "0019_run_tree"


def upgrade() -> None:
    op.add_column(
        "actions", sa.Column("postcondition", sa.Text(), nullable=False, server_default="")
    )
    op.add_column(
        "actions", sa.Column("check_state", sa.String(16), nullable=False, server_default="")
    )


def downgrade() -> None:
    with op.batch_alter_table("actions") as batch:
        batch.drop_column("check_state")
        batch.drop_column("postcondition")
