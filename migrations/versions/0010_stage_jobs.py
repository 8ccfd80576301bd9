"""stage jobs: the checkpoint pipeline's durable queue

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-07 01:10:00

- `stage_jobs`: one row per (checkpoint, generation, stage) of the `pipeline:` config, made once
  when the checkpoint is complete; its state (pending, running, done, failed, cancelled), the
  attempts, a retry's `not_before`, the lease of the daemon running it (holder, fencing token,
  expiry by the database's clock), the error, the tail of its output and its JSON result.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "stage_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("checkpoint_id", sa.Integer(), nullable=False),
        sa.Column("generation", sa.String(80), nullable=False),
        sa.Column("stage", sa.String(128), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("not_before", sa.String(32), nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.Column("started_at", sa.String(32), nullable=True),
        sa.Column("ended_at", sa.String(32), nullable=True),
        sa.Column("holder", sa.String(256), nullable=True),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.String(32), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("output", sa.Text(), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["checkpoint_id"],
            ["checkpoints.id"],
            name=op.f("fk_stage_jobs_checkpoint_id_checkpoints"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stage_jobs")),
        sa.UniqueConstraint(
            "checkpoint_id",
            "generation",
            "stage",
            name=op.f("uq_stage_jobs_checkpoint_id_generation_stage"),
        ),
    )
    op.create_index(
        op.f("ix_stage_jobs_state_not_before"), "stage_jobs", ["state", "not_before"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_stage_jobs_state_not_before"), table_name="stage_jobs")
    op.drop_table("stage_jobs")
