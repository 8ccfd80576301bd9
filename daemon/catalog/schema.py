"""The catalog's tables (SQLAlchemy 2 typed declarative). `migrations/env.py` imports only this.

Portable SQL only: the same schema runs on SQLite (default) and PostgreSQL.
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import TypeDecorator

from ..core.model import CheckpointStatus
from ..core.root_names import PathCodec

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def path_codec(dialect: Any) -> PathCodec | None:
    """The named roots of the Store that made this engine (`db.name_roots`): each engine has
    its own dialect object, so two catalogs open in one process keep their own."""
    codec = getattr(dialect, "ckpt_path_codec", None)
    return codec if codec else None


class CatalogPath(TypeDecorator[str]):
    """A path column: a local absolute path in Python, stored relative to its root's `name`
    where the root has one (`core.root_names`). Binds of comparisons with the column (`==`,
    `IN`, range bounds through `codepoint_order`) are converted too."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Any) -> str | None:
        codec = path_codec(dialect)
        return codec.stored(value) if codec is not None and value is not None else value

    def process_result_value(self, value: str | None, dialect: Any) -> str | None:
        codec = path_codec(dialect)
        return codec.local(value) if codec is not None and value is not None else value


class CatalogJSON(TypeDecorator[Any]):
    """A JSON column whose path strings (trash locations, artifact paths) are stored as the
    path columns are."""

    impl = JSON
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        codec = path_codec(dialect)
        return codec.stored_tree(value) if codec is not None and value is not None else value

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        codec = path_codec(dialect)
        return codec.local_tree(value) if codec is not None and value is not None else value


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: CatalogJSON,
        list[Any]: CatalogJSON,
    }


class RunRow(Base):
    __tablename__ = "runs"
    __table_args__ = (
        UniqueConstraint("root", "name"),
        # `--run R` compares names in code point order (store_reads.in_run): migration 0007.
        Index("ix_runs_name_codepoint", text('name COLLATE "C"')).ddl_if(dialect="postgresql"),
        Index("ix_runs_name_codepoint", "name").ddl_if(dialect="sqlite"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    root: Mapped[str] = mapped_column(CatalogPath)
    name: Mapped[str] = mapped_column(Text)  # the folder relative to its root; "." for the root
    created_at: Mapped[str] = mapped_column(String(32))
    # What was derived for the run as a whole (usecases.derivation): naming schemes and their
    # evidence, steps per epoch, the signature of the metrics logs read.
    details: Mapped[dict[str, Any] | None] = mapped_column(CatalogJSON)
    # Moved by the database's triggers on every change to the run's checkpoints or metrics
    # (migration 0009): a reader keeping a run's summary reads it again once this moves.
    revision: Mapped[int] = mapped_column(Integer, server_default=text("0"))


# A trash record lives until restore or purge, whatever appears at its old path meanwhile: only
# rows of files that are (or may again be) at their path are unique by path.
LIVE_PATH = "status NOT IN ('trashed', 'purged')"
# The statuses of those records: many rows may share a path (`status.not_in(RECORDS)`: live).
RECORDS = (CheckpointStatus.TRASHED.value, CheckpointStatus.PURGED.value)


class CheckpointRow(Base):
    __tablename__ = "checkpoints"
    __table_args__ = (
        Index(None, "run_id", "status"),
        Index(None, "path"),
        Index(None, "version_of"),
        Index(
            "uq_checkpoints_live_path",
            "path",
            unique=True,
            sqlite_where=text(LIVE_PATH),
            postgresql_where=text(LIVE_PATH),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    path: Mapped[str] = mapped_column(CatalogPath)
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)
    format: Mapped[str | None] = mapped_column(String(32))
    kind: Mapped[str | None] = mapped_column(String(16))
    # What identifies the bytes we read: unchanged (size, mtime_ns, inode) means no re-read.
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    mtime_ns: Mapped[int] = mapped_column(BigInteger)
    inode: Mapped[int | None] = mapped_column(BigInteger)
    hash: Mapped[str | None] = mapped_column(String(80))
    generation: Mapped[int] = mapped_column(Integer, default=1)  # bumped when rewritten in place
    # A copy the service kept of one generation (`generation`) of the file at this path, which
    # its trainer rewrites in place (`usecases.versions`); NULL for files a trainer wrote.
    version_of: Mapped[str | None] = mapped_column(CatalogPath)
    epoch: Mapped[int | None] = mapped_column(Integer)
    step: Mapped[int | None] = mapped_column(BigInteger)
    weights_bytes: Mapped[int | None] = mapped_column(BigInteger)
    optimizer_bytes: Mapped[int | None] = mapped_column(BigInteger)
    optimizer: Mapped[str | None] = mapped_column(String(128))
    iterations: Mapped[int | None] = mapped_column(BigInteger)
    n_params: Mapped[int | None] = mapped_column(BigInteger)
    n_trainable_params: Mapped[int | None] = mapped_column(BigInteger)
    model_class: Mapped[str | None] = mapped_column(String(128))
    model_name: Mapped[str | None] = mapped_column(String(256))
    keras_version: Mapped[str | None] = mapped_column(String(32))
    backend: Mapped[str | None] = mapped_column(String(32))
    details: Mapped[dict[str, Any] | None] = mapped_column(CatalogJSON)  # layers, configs, notes
    pinned: Mapped[bool] = mapped_column(Boolean, default=False)
    first_seen_at: Mapped[str] = mapped_column(String(32))
    indexed_at: Mapped[str | None] = mapped_column(String(32))  # when its bytes were last read
    metrics_at: Mapped[str | None] = mapped_column(String(32))  # when its metrics were last read


class MetricRow(Base):
    __tablename__ = "metrics"
    __table_args__ = (Index(None, "name", "value"),)

    checkpoint_id: Mapped[int] = mapped_column(
        ForeignKey("checkpoints.id", ondelete="CASCADE"), primary_key=True
    )
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    value: Mapped[float | None] = mapped_column(Float)  # NULL: the run logged NaN
    source: Mapped[str] = mapped_column(String(256))


class ArtifactRow(Base):
    __tablename__ = "artifacts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    checkpoint_id: Mapped[int] = mapped_column(ForeignKey("checkpoints.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(32))
    path: Mapped[str] = mapped_column(CatalogPath, unique=True)
    bytes: Mapped[int] = mapped_column(BigInteger)
    codec: Mapped[str | None] = mapped_column(String(32))
    hash: Mapped[str | None] = mapped_column(String(80))
    created_at: Mapped[str] = mapped_column(String(32))


class EventRow(Base):
    __tablename__ = "events"
    __table_args__ = (Index(None, "checkpoint_id"), Index(None, "at"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[str] = mapped_column(String(32))
    action: Mapped[str] = mapped_column(String(32))  # indexed, missing, corrupt, trash, ...
    state: Mapped[str] = mapped_column(String(16))  # planned | done | failed
    checkpoint_id: Mapped[int | None] = mapped_column(
        ForeignKey("checkpoints.id", ondelete="SET NULL")
    )
    path: Mapped[str] = mapped_column(CatalogPath)
    reason: Mapped[str | None] = mapped_column(Text)
    bytes: Mapped[int | None] = mapped_column(BigInteger)
    actor: Mapped[str] = mapped_column(String(128))
    # The process that planned the act: a `planned` event of a dead local process is settled.
    host: Mapped[str | None] = mapped_column(String(256))
    pid: Mapped[int | None] = mapped_column(Integer)
    node: Mapped[str | None] = mapped_column(String(256))  # `service.node` of who acted


class ClaimRow(Base):
    """A new file one daemon is reading: others that share its root leave it to that one."""

    __tablename__ = "claims"

    path: Mapped[str] = mapped_column(CatalogPath, primary_key=True)
    node: Mapped[str] = mapped_column(String(256))
    expires_at: Mapped[str] = mapped_column(String(32))  # by the database's clock


class RemoteCopyRow(Base):
    """A copy of a checkpoint's bytes in an object store (`usecases.tiering`): recorded only once
    verified (size, the service's checksum, our hash read back). `state`: verified, trashed
    (under the store's trash prefix, `trash_key`), purged, or missing/changed (`ckpt verify
    --remote` found it gone or other bytes: never trusted again)."""

    __tablename__ = "remote_copies"
    __table_args__ = (Index(None, "checkpoint_id"), UniqueConstraint("url"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    checkpoint_id: Mapped[int] = mapped_column(ForeignKey("checkpoints.id", ondelete="CASCADE"))
    url: Mapped[str] = mapped_column(Text)  # s3://bucket/key (never a credential)
    endpoint: Mapped[str | None] = mapped_column(Text)  # the service (None: AWS)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    checksum: Mapped[str | None] = mapped_column(String(96))  # the service's, `sha256:<b64>`
    content_hash: Mapped[str] = mapped_column(String(80))  # the catalog's hash of the bytes
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)
    uploaded_at: Mapped[str] = mapped_column(String(32))
    verified_at: Mapped[str] = mapped_column(String(32))
    trash_key: Mapped[str | None] = mapped_column(Text)
    trashed_at: Mapped[str | None] = mapped_column(String(32))


class LeaseRow(Base):
    __tablename__ = "leases"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    holder: Mapped[str] = mapped_column(String(256))
    acquired_at: Mapped[str] = mapped_column(String(32))
    expires_at: Mapped[str] = mapped_column(String(32))
    # Who holds it: a lease of a dead process on this host is free at once.
    host: Mapped[str | None] = mapped_column(String(256))
    pid: Mapped[int | None] = mapped_column(Integer)
    # The fencing token: one more at every take, never less (a released lease keeps its row).
    token: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    node: Mapped[str | None] = mapped_column(String(256))  # the holder's `service.node`


class HeartbeatRow(Base):
    __tablename__ = "heartbeat"
    __table_args__ = (Index(None, "node"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # The daemon's node identity (`service.node`): one live daemon per node on a catalog.
    node: Mapped[str | None] = mapped_column(String(256))
    pid: Mapped[int] = mapped_column(Integer)
    host: Mapped[str] = mapped_column(String(256))
    started_at: Mapped[str] = mapped_column(String(32))
    heartbeat_at: Mapped[str] = mapped_column(String(32))
    state: Mapped[dict[str, Any] | None] = mapped_column(CatalogJSON)


class StageJobRow(Base):
    """A pipeline stage's job for one generation of a checkpoint (`usecases.pipeline`): made
    once when the checkpoint is complete (unique by checkpoint, hash and stage), claimed under a
    lease with a fencing token (`token`, one more at every claim), its child's result kept here
    (`result`: the stage's JSON line; `output`: the tail of what it printed)."""

    __tablename__ = "stage_jobs"
    __table_args__ = (
        UniqueConstraint("checkpoint_id", "generation", "stage"),
        Index(None, "state", "not_before"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    checkpoint_id: Mapped[int] = mapped_column(ForeignKey("checkpoints.id", ondelete="CASCADE"))
    generation: Mapped[str] = mapped_column(String(80))  # the checkpoint's hash when made
    stage: Mapped[str] = mapped_column(String(128))
    state: Mapped[str] = mapped_column(String(16))  # pending running done failed cancelled
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    not_before: Mapped[str] = mapped_column(String(32))  # a retry's backoff (database clock)
    created_at: Mapped[str] = mapped_column(String(32))
    started_at: Mapped[str | None] = mapped_column(String(32))
    ended_at: Mapped[str | None] = mapped_column(String(32))
    holder: Mapped[str | None] = mapped_column(String(256))  # node/host:pid running it
    token: Mapped[int] = mapped_column(BigInteger, default=0)
    expires_at: Mapped[str | None] = mapped_column(String(32))  # the lease, by the database clock
    error: Mapped[str | None] = mapped_column(Text)
    output: Mapped[str | None] = mapped_column(Text)
    result: Mapped[dict[str, Any] | None] = mapped_column(CatalogJSON)


class codepoint_order(FunctionElement[str]):
    """A text column compared in code point order, as the range queries below a path or run
    need (`p >= "a/" AND p < "a0"`): SQLite's default (BINARY) already is; a PostgreSQL database
    created with a linguistic collation (en_US.UTF-8) orders "/" and "0" otherwise, so there the
    comparison gets `COLLATE "C"`."""

    type = Text()
    inherit_cache = True
    name = "codepoint_order"

    def __init__(self, column: Any) -> None:
        super().__init__(column)
        self.type = column.type  # a path column's binds stay converted (CatalogPath)


@compiles(codepoint_order)
def _codepoint_order(element: Any, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.clauses, **kw))


@compiles(codepoint_order, "postgresql")
def _codepoint_order_pg(element: Any, compiler: Any, **kw: Any) -> str:
    return f'({compiler.process(element.clauses, **kw)}) COLLATE "C"'


def at_or_below(column: Any, path: str) -> Any:
    """SQL: `column` is `path` or a path below it, as a range on its index (from `path/` to
    `path0`: "0" is the character after "/"), without LIKE and its wildcards."""
    ordered = codepoint_order(column)
    return (column == path) | ((ordered >= path + "/") & (ordered < path + "0"))


# The tables as Core objects, for the store's SQL (typed: `__table__` is only a FromClause).
RUNS = cast(Table, RunRow.__table__)
CHECKPOINTS = cast(Table, CheckpointRow.__table__)
METRICS = cast(Table, MetricRow.__table__)
ARTIFACTS = cast(Table, ArtifactRow.__table__)
EVENTS = cast(Table, EventRow.__table__)
LEASES = cast(Table, LeaseRow.__table__)
HEARTBEAT = cast(Table, HeartbeatRow.__table__)
CLAIMS = cast(Table, ClaimRow.__table__)
REMOTE_COPIES = cast(Table, RemoteCopyRow.__table__)
STAGE_JOBS = cast(Table, StageJobRow.__table__)
