"""initial catalog

Revision ID: 0001
Revises:
Create Date: 2026-11-29 15:46:33.361969
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "heartbeat",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=256), nullable=False),
        sa.Column("started_at", sa.String(length=32), nullable=False),
        sa.Column("heartbeat_at", sa.String(length=32), nullable=False),
        sa.Column("state", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_heartbeat")),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("root", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("created_at", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.UniqueConstraint("root", "name", name=op.f("uq_runs_root_name")),
    )
    op.create_table(
        "checkpoints",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("format", sa.String(length=32), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=True),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("mtime_ns", sa.BigInteger(), nullable=False),
        sa.Column("inode", sa.BigInteger(), nullable=True),
        sa.Column("hash", sa.String(length=80), nullable=True),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=True),
        sa.Column("step", sa.BigInteger(), nullable=True),
        sa.Column("weights_bytes", sa.BigInteger(), nullable=True),
        sa.Column("optimizer_bytes", sa.BigInteger(), nullable=True),
        sa.Column("optimizer", sa.String(length=128), nullable=True),
        sa.Column("iterations", sa.BigInteger(), nullable=True),
        sa.Column("n_params", sa.BigInteger(), nullable=True),
        sa.Column("n_trainable_params", sa.BigInteger(), nullable=True),
        sa.Column("model_class", sa.String(length=128), nullable=True),
        sa.Column("model_name", sa.String(length=256), nullable=True),
        sa.Column("keras_version", sa.String(length=32), nullable=True),
        sa.Column("backend", sa.String(length=32), nullable=True),
        sa.Column("details", sa.JSON(), nullable=True),
        sa.Column("pinned", sa.Boolean(), nullable=False),
        sa.Column("first_seen_at", sa.String(length=32), nullable=False),
        sa.Column("indexed_at", sa.String(length=32), nullable=True),
        sa.Column("metrics_at", sa.String(length=32), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_checkpoints_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_checkpoints")),
        sa.UniqueConstraint("path", name=op.f("uq_checkpoints_path")),
    )
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_checkpoints_run_id_status"), ["run_id", "status"], unique=False
        )

    op.create_table(
        "leases",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("holder", sa.String(length=256), nullable=False),
        sa.Column("acquired_at", sa.String(length=32), nullable=False),
        sa.Column("expires_at", sa.String(length=32), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_leases_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_leases")),
    )
    op.create_table(
        "artifacts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("checkpoint_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("codec", sa.String(length=32), nullable=True),
        sa.Column("hash", sa.String(length=80), nullable=True),
        sa.Column("created_at", sa.String(length=32), nullable=False),
        sa.ForeignKeyConstraint(
            ["checkpoint_id"],
            ["checkpoints.id"],
            name=op.f("fk_artifacts_checkpoint_id_checkpoints"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_artifacts")),
        sa.UniqueConstraint("path", name=op.f("uq_artifacts_path")),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.String(length=32), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("checkpoint_id", sa.Integer(), nullable=True),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("bytes", sa.BigInteger(), nullable=True),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.ForeignKeyConstraint(
            ["checkpoint_id"],
            ["checkpoints.id"],
            name=op.f("fk_events_checkpoint_id_checkpoints"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
    )
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_events_at"), ["at"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_events_checkpoint_id"), ["checkpoint_id"], unique=False
        )

    op.create_table(
        "metrics",
        sa.Column("checkpoint_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("source", sa.String(length=256), nullable=False),
        sa.ForeignKeyConstraint(
            ["checkpoint_id"],
            ["checkpoints.id"],
            name=op.f("fk_metrics_checkpoint_id_checkpoints"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("checkpoint_id", "name", name=op.f("pk_metrics")),
    )
    with op.batch_alter_table("metrics", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_metrics_name_value"), ["name", "value"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("metrics", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_metrics_name_value"))

    op.drop_table("metrics")
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_events_checkpoint_id"))
        batch_op.drop_index(batch_op.f("ix_events_at"))

    op.drop_table("events")
    op.drop_table("artifacts")
    op.drop_table("leases")
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_checkpoints_run_id_status"))

    op.drop_table("checkpoints")
    op.drop_table("runs")
    op.drop_table("heartbeat")
