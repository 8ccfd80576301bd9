"""remote copies: where each checkpoint's bytes live in an object store

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 23:50:00

- `remote_copies`: one row per verified copy of a checkpoint in an object store (`ckpt tier`):
  its `s3://` URL (unique), the service's endpoint, size, the service's checksum, the catalog's
  content hash, a state (verified, trashed, purged, missing, changed) with its reason, when it
  was uploaded and verified, and where it waits under the store's trash prefix.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "remote_copies",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("checkpoint_id", sa.Integer(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("endpoint", sa.Text(), nullable=True),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("checksum", sa.String(96), nullable=True),
        sa.Column("content_hash", sa.String(80), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("uploaded_at", sa.String(32), nullable=False),
        sa.Column("verified_at", sa.String(32), nullable=False),
        sa.Column("trash_key", sa.Text(), nullable=True),
        sa.Column("trashed_at", sa.String(32), nullable=True),
        sa.ForeignKeyConstraint(
            ["checkpoint_id"],
            ["checkpoints.id"],
            name=op.f("fk_remote_copies_checkpoint_id_checkpoints"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_remote_copies")),
        sa.UniqueConstraint("url", name=op.f("uq_remote_copies_url")),
    )
    op.create_index(
        op.f("ix_remote_copies_checkpoint_id"), "remote_copies", ["checkpoint_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_remote_copies_checkpoint_id"), table_name="remote_copies")
    op.drop_table("remote_copies")
