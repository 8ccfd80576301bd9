"""runs remember what was learned about them

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 09:00:00

- `runs.details` (JSON, nullable): what the indexer derived for the run as a whole: its
  file-naming schemes with their evidence (`ckpt runs --json` shows them as `naming`), the
  steps per epoch learned from optimizer iterations, and the stat signature of the metrics logs
  it read (a change re-derives the run's epochs and metrics without re-reading any checkpoint).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("details", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("details")
