"""trash records outlive their path; leases and planned events name their process

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 00:05:00

- `checkpoints.path` is unique only among rows that are not trashed or purged (a partial unique
  index), so a new file at a trashed checkpoint's path gets its own row and the trash record
  stays restorable and purgeable.
- `leases` and `events` record the host and pid of the process that took the lease or planned
  the act: a lease of a dead local process is free, its planned events are settled.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

LIVE_PATH = "status NOT IN ('trashed', 'purged')"


def upgrade() -> None:
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.drop_constraint("uq_checkpoints_path", type_="unique")
        batch_op.create_index("ix_checkpoints_path", ["path"], unique=False)
    op.create_index(
        "uq_checkpoints_live_path",
        "checkpoints",
        ["path"],
        unique=True,
        sqlite_where=sa.text(LIVE_PATH),
        postgresql_where=sa.text(LIVE_PATH),
    )
    for table in ("leases", "events"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("host", sa.String(length=256), nullable=True))
            batch_op.add_column(sa.Column("pid", sa.Integer(), nullable=True))


def downgrade() -> None:
    # Fails (and changes nothing: the migration is one transaction) while a trashed row shares
    # its path with another row: purge or restore it first.
    for table in ("events", "leases"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("pid")
            batch_op.drop_column("host")
    op.drop_index("uq_checkpoints_live_path", table_name="checkpoints")
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.drop_index("ix_checkpoints_path")
        batch_op.create_unique_constraint("uq_checkpoints_path", ["path"])
