"""leases carry a fencing token and their holder's node

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 13:00:00

- `leases.token` (bigint, not null, default 0): grows by one at every take of the run's lease and
  never goes down (a released lease keeps its row, expired): an act confirms its token in the
  transaction of its first write, so a holder that stalled past its expiry while another took
  the run cannot act any more.
- `leases.node` (text, nullable): the holder's node identity (`service.node`).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("token", sa.BigInteger(), nullable=False, server_default=sa.text("0"))
        )
        batch_op.add_column(sa.Column("node", sa.String(256), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.drop_column("node")
        batch_op.drop_column("token")
