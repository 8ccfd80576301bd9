"""a revision per run, bumped by the database on every change to its checkpoints or metrics

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 16:00:00

- `runs.revision` (integer, 0): moved by triggers, in the writing transaction, whenever a
  checkpoint of the run is inserted, updated or deleted, or a metric of one of its checkpoints
  is. A reader that kept a run's summary (`Catalog.runs()`: counts, bytes, bests, flags) at a
  revision reads it again only for the runs whose revision moved (`catalog.run_summaries`): the
  web view's overview after one checkpoint was indexed costs that run's aggregates, not the
  whole catalog's. Triggers, not the Store's writes, so that no write path can forget it.
- SQLite: six triggers. PostgreSQL: one function and two row triggers calling it.

A later migration that rebuilds `checkpoints` or `metrics` on SQLite (Alembic's batch mode
copies the table) drops their triggers: it must create them again (`create_triggers`).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

BUMP = "UPDATE runs SET revision = revision + 1 WHERE id"
OF_CHECKPOINT = "(SELECT run_id FROM checkpoints WHERE id = {}.checkpoint_id)"
SQLITE_TRIGGERS = {
    "ckpt_run_revision_checkpoint_insert": ("INSERT ON checkpoints", f"{BUMP} = NEW.run_id"),
    "ckpt_run_revision_checkpoint_update": (
        "UPDATE ON checkpoints",
        f"{BUMP} IN (OLD.run_id, NEW.run_id)",
    ),
    "ckpt_run_revision_checkpoint_delete": ("DELETE ON checkpoints", f"{BUMP} = OLD.run_id"),
    "ckpt_run_revision_metric_insert": (
        "INSERT ON metrics",
        f"{BUMP} = {OF_CHECKPOINT.format('NEW')}",
    ),
    "ckpt_run_revision_metric_update": (
        "UPDATE ON metrics",
        f"{BUMP} IN ({OF_CHECKPOINT.format('OLD')}, {OF_CHECKPOINT.format('NEW')})",
    ),
    "ckpt_run_revision_metric_delete": (
        "DELETE ON metrics",
        f"{BUMP} = {OF_CHECKPOINT.format('OLD')}",
    ),
}
POSTGRES_FUNCTION = f"""
CREATE OR REPLACE FUNCTION ckpt_bump_run_revision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_TABLE_NAME = 'checkpoints' THEN
    IF TG_OP <> 'INSERT' THEN {BUMP} = OLD.run_id; END IF;
    IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND NEW.run_id IS DISTINCT FROM OLD.run_id) THEN
      {BUMP} = NEW.run_id;
    END IF;
  ELSE
    IF TG_OP <> 'INSERT' THEN {BUMP} = {OF_CHECKPOINT.format("OLD")}; END IF;
    IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE'
        AND NEW.checkpoint_id IS DISTINCT FROM OLD.checkpoint_id) THEN
      {BUMP} = {OF_CHECKPOINT.format("NEW")};
    END IF;
  END IF;
  RETURN NULL;
END $$
"""
POSTGRES_TRIGGERS = ("checkpoints", "metrics")


def create_triggers() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(POSTGRES_FUNCTION)
        for table in POSTGRES_TRIGGERS:
            op.execute(
                f"CREATE TRIGGER ckpt_run_revision_{table} AFTER INSERT OR UPDATE OR DELETE"
                f" ON {table} FOR EACH ROW EXECUTE FUNCTION ckpt_bump_run_revision()"
            )
        return
    for name, (event, action) in SQLITE_TRIGGERS.items():
        op.execute(f"CREATE TRIGGER {name} AFTER {event} FOR EACH ROW BEGIN {action}; END")


def drop_triggers() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in POSTGRES_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS ckpt_run_revision_{table} ON {table}")
        op.execute("DROP FUNCTION IF EXISTS ckpt_bump_run_revision()")
        return
    for name in SQLITE_TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name}")


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("revision", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )
    create_triggers()


def downgrade() -> None:
    drop_triggers()
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("revision")
