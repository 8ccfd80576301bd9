"""checkpoints can be kept versions of a rewritten file

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 12:00:00

- `checkpoints.version_of` (text, nullable, indexed): for a copy the service kept of one
  generation of a file rewritten in place (`<root>/.ckpt-versions/...`), the path of that file;
  NULL for every checkpoint a trainer wrote. Its `generation` is the generation it keeps.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.add_column(sa.Column("version_of", sa.Text(), nullable=True))
        batch_op.create_index("ix_checkpoints_version_of", ["version_of"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.drop_index("ix_checkpoints_version_of")
        batch_op.drop_column("version_of")
