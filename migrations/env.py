"""Alembic environment: migrations run on the connection `ckpt_daemon.catalog.db` hands over.

`ckpt_daemon.catalog.db.upgrade()` opens a dedicated connection with SQLite foreign keys OFF
from the start (batch mode rebuilds tables; with foreign keys on, rebuilding a parent table
silently cascade-deletes its children) and checks `PRAGMA foreign_key_check` afterwards.
"""

from __future__ import annotations

from alembic import context

from ckpt_daemon.catalog.schema import Base

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=True,
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
