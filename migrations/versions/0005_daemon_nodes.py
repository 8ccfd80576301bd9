"""daemons name their node

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 12:15:00

- `heartbeat.node` (text, nullable, indexed): the daemon's node identity (`service.node`,
  default its host name). Several daemons may share one catalog, one per node; a second daemon
  of a node that has a live one is refused at start. Rows written before this have none.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("heartbeat", schema=None) as batch_op:
        batch_op.add_column(sa.Column("node", sa.String(256), nullable=True))
        batch_op.create_index("ix_heartbeat_node", ["node"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("heartbeat", schema=None) as batch_op:
        batch_op.drop_index("ix_heartbeat_node")
        batch_op.drop_column("node")
