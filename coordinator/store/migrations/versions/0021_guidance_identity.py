"""Guidance with an identity: the sender's message id (a retried send is the same message),
where each message stands (queued, delivered and to what, or not received), and the run's
execution counter, which moves at every retry and adoption so that a message can name the
execution it was written for."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021_guidance_identity"
down_revision = "0020_postconditions"


def upgrade() -> None:
    op.add_column("runs", sa.Column("execution", sa.Integer(), nullable=False, server_default="1"))
    op.add_column("guidance", sa.Column("message_id", sa.String(128), nullable=True))
    op.add_column(
        "guidance", sa.Column("status", sa.String(16), nullable=False, server_default="queued")
    )
    op.add_column(
        "guidance", sa.Column("delivered_to", sa.Text(), nullable=False, server_default="")
    )
    op.add_column("guidance", sa.Column("seq", sa.Integer(), nullable=False, server_default="0"))
    op.add_column(
        "guidance", sa.Column("execution", sa.Integer(), nullable=False, server_default="1")
    )
    # Rows from before: their id is their message id, and a delivery time means delivered.
    op.execute("UPDATE guidance SET message_id = id")
    op.execute("UPDATE guidance SET status = 'delivered' WHERE delivered_at IS NOT NULL")
    op.create_index("ux_guidance_message", "guidance", ["run_id", "message_id"], unique=True)


def downgrade() -> None:
    op.drop_index("ux_guidance_message", "guidance")
    with op.batch_alter_table("guidance") as batch:
        for column in ("execution", "seq", "delivered_to", "status", "message_id"):
            batch.drop_column(column)
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("execution")
