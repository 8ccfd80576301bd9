"""Catalog rows → `core.model` values, shared by the two readers of the catalog: the SQLAlchemy
ones (`store_reads`) and the standard library's sqlite3 ones (`sqlite_reads`, which keep the CLI
fast); and any row → the frozen record of its columns (`to_record`, the facets' results). No
SQLAlchemy import here: `sqlite_reads` must not pay for it."""

from __future__ import annotations

import dataclasses
import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from ..core.model import Checkpoint, CheckpointStatus, Format, Heartbeat

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    Record = TypeVar("Record", bound=DataclassInstance)

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
FORMATS = Format.known()  # live: a format registered later is found too
# The fields of a `Checkpoint` a listing row does not hold: their defaults (`details` and
# `metric_sources` are filled by `show`, `best` and `latest`; `versions_kept` by the listing).
_UNLISTED = ("metric_sources", "details", "versions_kept")
_new_checkpoint = object.__new__


def to_checkpoint(row: Any, values: dict[str, float | None]) -> Checkpoint:
    """One listing row (`LISTING_COLUMNS`, in order) and its metric values → a `Checkpoint`.

    A listing makes 100,000 of these: the frozen dataclass's `__init__` (one
    `object.__setattr__` per field) was a third of `ckpt list --json`, so the instance's fields
    are set at once, as `__init__` would set them (`_check_fields` keeps the two in step)."""
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
    checkpoint = _new_checkpoint(Checkpoint)
    checkpoint.__dict__.update(
        id=id_,
        path=path,
        run=run,
        root=root,
        format=FORMATS[fmt] if fmt else None,
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
        metric_sources={},
        details={},
        versions_kept=0,
    )
    return checkpoint


def to_record(cls: type[Record], row: Any, **values: Any) -> Record:
    """A frozen record of `row`: each field from the column of its name, but for `values`
    (fields the row holds under another name or in another form)."""
    columns = row._mapping
    named = {f.name for f in dataclasses.fields(cls)} - set(values)
    return cls(**{name: columns[name] for name in named if name in columns}, **values)


def _check_fields() -> None:
    """`to_checkpoint` sets every field of `Checkpoint`, and those a row does not hold to their
    defaults: a field added to the model fails here, at import, rather than going unset."""
    fields = {f.name: f for f in dataclasses.fields(Checkpoint)}
    row = (1, "/r/a", "a", "/r", None, None, "ok", None, 0, 0, *([None] * 9), 0, 1, None)
    made = to_checkpoint(row, {}).__dict__
    assert set(made) == set(fields), f"to_checkpoint sets {sorted(set(made) ^ set(fields))}"
    for name in _UNLISTED:
        field = fields[name]
        default = field.default_factory() if callable(field.default_factory) else field.default
        assert made[name] == default, f"to_checkpoint's {name} is not the field's default"


_check_fields()


_pause_lock = threading.Lock()
_pauses = [0, False]  # listings running with the cyclic collector paused; was it enabled


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """The cyclic garbage collector paused while a listing's rows are made: 100,000 rows are a
    few million new objects, and the collections their allocations trigger (each walking the
    growing heap) cost a quarter of the listing. Rows hold no reference cycles: reference
    counting frees them as before. Nested and concurrent listings (threads) share one pause;
    the collector runs again when the last ends, if it ran before the first."""
    with _pause_lock:
        if _pauses[0] == 0:
            _pauses[1] = gc.isenabled()
            gc.disable()
        _pauses[0] += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses[0] -= 1
            if _pauses[0] == 0 and _pauses[1]:
                gc.enable()


# How many of the newest heartbeat rows `heartbeats()` looks at (one row per daemon start).
HEARTBEAT_ROWS = 500


def newest_per_node(beats: list[Heartbeat]) -> list[Heartbeat]:
    """The first (newest) heartbeat of each node in `beats` (newest first); a row written before
    nodes existed counts as the node of its host."""
    seen: dict[str, Heartbeat] = {}
    for beat in beats:
        seen.setdefault(beat.node or beat.host, beat)
    return list(seen.values())
