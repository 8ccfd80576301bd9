"""The Python API for scripts: the same operations as the `ckpt` command, returning plain values.

from ckpt_daemon.api import open_catalog
with open_catalog() as cat:
    best = cat.best("val_loss")                      # a ckpt_daemon.core.model.Checkpoint
    resume = cat.latest("exp1", resumable=True)      # the newest checkpoint training resumes from
    recent = cat.list(run="exp1", where=["epoch >= 10"], sort="val_loss", limit=5)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..settings import config as config_module
from ..settings.config import Config
from .pipeline import CatalogPipeline

if TYPE_CHECKING:
    from ..catalog.dbapi_reads import DbapiReads

__all__ = ["Catalog", "open_catalog"]


class Catalog(CatalogPipeline):
    """The catalog for scripts: the reads (`api.reads`), the acts (`api.acts`) and the object
    storage (`api.remote`) of the `ckpt` command, returning `core.model` values. Open it with
    `open_catalog()`."""


def open_catalog(
    config_path: str | None = None, database: str | None = None, *, may_migrate: bool = False
) -> Catalog:
    """Open the catalog named by `database`, $CKPT_DB or the config (created at head if new)."""
    config = config_module.load(config_path, database_override=database)
    return catalog_of(config, may_migrate=may_migrate)


def catalog_of(config: Config, *, may_migrate: bool = False) -> Catalog:
    """The catalog of an already loaded `config` (the web view opens its own with the
    daemon's config): the hot reads without SQLAlchemy when the catalog allows."""
    reads = None if may_migrate else _fast_reads(config)
    if reads is not None:  # a catalog at head: the Store opens when first needed
        return Catalog(config, reads=reads)
    from ..catalog.store import Store

    store = Store(
        config.database,
        may_migrate=may_migrate,
        named_roots=config.named_roots(),
        node=config.node_name,
    )
    return Catalog(config, store)


def catalog_as_file(config: Config) -> Catalog | None:
    """The SQLite catalog of `config` read as a file (no lock, no write-ahead log), for `ckpt
    status` when its disk is too full to open it as usual; None if it is not one at head."""
    from ..catalog.sqlite_reads import SqliteReads
    from ..core.root_names import PathCodec

    reads = SqliteReads.open(config.database, PathCodec(config.named_roots()), as_file=True)
    return None if reads is None else Catalog(config, reads=reads)


def _fast_reads(config: Config) -> DbapiReads | None:
    """The SQLAlchemy-free reads of a local SQLite file or a plain PostgreSQL URL at the schema
    head (paths of named roots converted as the Store does), else None."""
    from ..catalog.postgres_reads import PostgresReads
    from ..catalog.sqlite_reads import SqliteReads
    from ..core.root_names import PathCodec

    codec = PathCodec(config.named_roots())
    url = config.database
    if url.startswith("sqlite"):
        return SqliteReads.open(url, codec)
    return PostgresReads.open(url, codec)
