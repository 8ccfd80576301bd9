"""Catalog rows → `core.model` values, shared by the two readers of the catalog: the SQLAlchemy
ones (`store_reads`) and the standard library's sqlite3 ones (`sqlite_reads`, which keep the CLI
fast). No SQLAlchemy import here: `sqlite_reads` must not pay for it."""

from __future__ import annotations

from typing import Any

from ..core.model import Checkpoint, CheckpointStatus, Format, Heartbeat

# What a listing reads, in the order `to_checkpoint` unpacks it. `details` (layers, configs) is
# only read by `show`: listings of 100k rows must stay cheap.
LISTING_COLUMNS = (
    ("checkpoints", "id"),
    ("checkpoints", "path"),
    ("runs", "name"),
    ("runs", "root"),
    ("checkpoints", "format"),
    ("checkpoints", "kind"),
    ("checkpoints", "status"),
    ("checkpoints", "reason"),
    ("checkpoints", "size_bytes"),
    ("checkpoints", "mtime_ns"),
    ("checkpoints", "inode"),
    ("checkpoints", "hash"),
    ("checkpoints", "indexed_at"),
    ("checkpoints", "epoch"),
    ("checkpoints", "step"),
    ("checkpoints", "weights_bytes"),
    ("checkpoints", "optimizer_bytes"),
    ("checkpoints", "optimizer"),
    ("checkpoints", "n_params"),
    ("checkpoints", "pinned"),
    ("checkpoints", "generation"),
    ("checkpoints", "version_of"),
)
STATUSES = {s.value: s for s in CheckpointStatus}


def to_checkpoint(row: Any, values: dict[str, float | None]) -> Checkpoint:
    """One listing row (`LISTING_COLUMNS`, in order) and its metric values → a `Checkpoint`."""
    (
        id_,
        path,
        run,
        root,
        fmt,
        kind,
        status,
        reason,
        size,
        mtime_ns,
        inode,
        digest,
        indexed_at,
        epoch,
        step,
        weights_bytes,
        optimizer_bytes,
        optimizer,
        n_params,
        pinned,
        generation,
        version_of,
    ) = row
    return Checkpoint(
        id=id_,
        path=path,
        run=run,
        root=root,
        format=Format(fmt) if fmt else None,
        kind=kind,
        status=STATUSES[status],
        reason=reason,
        size_bytes=size,
        mtime=mtime_ns / 1e9,
        inode=inode,
        hash=digest,
        indexed_at=indexed_at,
        epoch=epoch,
        step=step,
        weights_bytes=weights_bytes,
        optimizer_bytes=optimizer_bytes,
        optimizer=optimizer,
        n_params=n_params,
        pinned=bool(pinned),
        generation=generation or 1,
        version_of=version_of,
        metrics=values,
    )


# How many of the newest heartbeat rows `heartbeats()` looks at (one row per daemon start).
HEARTBEAT_ROWS = 500


def newest_per_node(beats: list[Heartbeat]) -> list[Heartbeat]:
    """The first (newest) heartbeat of each node in `beats` (newest first); a row written before
    nodes existed counts as the node of its host."""
    seen: dict[str, Heartbeat] = {}
    for beat in beats:
        seen.setdefault(beat.node or beat.host, beat)
    return list(seen.values())
