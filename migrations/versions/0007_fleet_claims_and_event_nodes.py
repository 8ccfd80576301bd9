"""read claims for daemons sharing a root, and the node of every audit event

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 15:00:00

- `claims` (path text primary key, node text, expires_at text): a daemon about to read a new
  file claims it first (stored path, so hosts that mount the share elsewhere claim one key);
  another daemon that sees the file while the claim is unexpired leaves it to the claimant.
  Deleted when the file's row is recorded; an expired claim (its daemon died) is taken over.
- `events.node` (text, nullable): the node identity (`service.node`) of the process that acted.
- `ix_runs_name_codepoint`: runs by name in code point order (`COLLATE "C"` on PostgreSQL,
  SQLite's default order already is), which `--run R` compares by (`store_reads.in_run`): on
  a catalog of 20,000 runs the run filter read the whole table (12 ms per query) without it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "claims",
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("node", sa.String(256), nullable=False),
        sa.Column("expires_at", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("path", name=op.f("pk_claims")),
    )
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("node", sa.String(256), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        op.execute('CREATE INDEX ix_runs_name_codepoint ON runs (name COLLATE "C")')
    else:
        op.create_index("ix_runs_name_codepoint", "runs", ["name"])


def downgrade() -> None:
    op.drop_index("ix_runs_name_codepoint", table_name="runs")
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.drop_column("node")
    op.drop_table("claims")
