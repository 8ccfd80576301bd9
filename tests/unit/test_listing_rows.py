"""`catalog.rows.to_checkpoint` sets a listing row's fields at once (the frozen dataclass's
`__init__` was a third of `ckpt list --json` over 100,000 rows): what it makes is the very
`Checkpoint` that `__init__` makes from the same facts, frozen, replaceable, for every format and
status and for the values a row may hold (NULLs, a generation of 0 from an old catalog)."""

from __future__ import annotations

import dataclasses

import pytest

from ckpt_daemon.catalog.rows import LISTING_COLUMNS, to_checkpoint
from ckpt_daemon.core.model import Checkpoint, CheckpointStatus, Format


def _row(**facts: object) -> tuple[object, ...]:
    base = {
        "id": 7,
        "path": "/data/runs/exp1/weights.01-0.52.h5",
        "name": "exp1",
        "root": "/data/runs",
        "format": "keras-legacy-h5",
        "kind": "full",
        "status": "ok",
        "reason": None,
        "size_bytes": 4096,
        "mtime_ns": 1_735_689_600_123_456_789,
        "inode": 12,
        "hash": "blake3:ab",
        "indexed_at": "2025-01-01T00:00:05.000Z",
        "epoch": 1,
        "step": None,
        "weights_bytes": 1000,
        "optimizer_bytes": 2000,
        "optimizer": "Adam",
        "n_params": 250,
        "pinned": 0,
        "generation": 1,
        "version_of": None,
    }
    base.update(facts)
    assert len(base) == len(LISTING_COLUMNS)
    return tuple(base[column] for _table, column in LISTING_COLUMNS)


def _by_init(row: tuple[object, ...], metrics: dict[str, float | None]) -> Checkpoint:
    facts = dict(zip([column for _t, column in LISTING_COLUMNS], row, strict=True))
    fmt = facts["format"]
    return Checkpoint(
        id=facts["id"],  # type: ignore[arg-type]
        path=facts["path"],  # type: ignore[arg-type]
        run=facts["name"],  # type: ignore[arg-type]
        root=facts["root"],  # type: ignore[arg-type]
        format=Format(fmt) if fmt else None,
        kind=facts["kind"],  # type: ignore[arg-type]
        status=CheckpointStatus(facts["status"]),
        reason=facts["reason"],  # type: ignore[arg-type]
        size_bytes=facts["size_bytes"],  # type: ignore[arg-type]
        mtime=facts["mtime_ns"] / 1e9,  # type: ignore[operator]
        inode=facts["inode"],  # type: ignore[arg-type]
        hash=facts["hash"],  # type: ignore[arg-type]
        indexed_at=facts["indexed_at"],  # type: ignore[arg-type]
        epoch=facts["epoch"],  # type: ignore[arg-type]
        step=facts["step"],  # type: ignore[arg-type]
        weights_bytes=facts["weights_bytes"],  # type: ignore[arg-type]
        optimizer_bytes=facts["optimizer_bytes"],  # type: ignore[arg-type]
        optimizer=facts["optimizer"],  # type: ignore[arg-type]
        n_params=facts["n_params"],  # type: ignore[arg-type]
        pinned=bool(facts["pinned"]),
        generation=facts["generation"] or 1,  # type: ignore[arg-type]
        version_of=facts["version_of"],  # type: ignore[arg-type]
        metrics=metrics,
    )


ROWS = [
    _row(),
    _row(format=None, kind=None, status="unreadable", reason="truncated", epoch=None),
    _row(status="standby", version_of="/data/runs/exp1/last.h5", generation=3, pinned=1),
    _row(generation=0, hash=None, inode=None, n_params=None, optimizer=None),
    *(_row(format=f.value) for f in Format),
    *(_row(status=s.value) for s in CheckpointStatus),
]


@pytest.mark.parametrize("row", ROWS, ids=[str(i) for i in range(len(ROWS))])
def test_a_listing_row_is_the_checkpoint_init_makes(row: tuple[object, ...]) -> None:
    metrics: dict[str, float | None] = {"loss": 0.5, "val_loss": None}
    made, expected = to_checkpoint(row, metrics), _by_init(row, metrics)
    assert made == expected
    assert repr(made) == repr(expected)
    assert dataclasses.asdict(made) == dataclasses.asdict(expected)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.path = "/elsewhere"  # type: ignore[misc]
    assert dataclasses.replace(made, versions_kept=2).versions_kept == 2
    # Fields a row does not hold are new objects per checkpoint, as default factories make them.
    other = to_checkpoint(row, {})
    assert made.details is not other.details and made.metric_sources is not other.metric_sources
