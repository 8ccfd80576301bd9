"""Which remote copies are never given up (`core.remote_keep`): pinned, newest, best, last
resumable, judged over the checkpoints whose bytes still exist somewhere."""

from __future__ import annotations

from typing import Any

from ckpt_daemon.core.model import Checkpoint, CheckpointStatus, Format
from ckpt_daemon.core.remote_keep import why_kept


def row(ident: int, epoch: int, val_loss: float, **fields: Any) -> Checkpoint:
    values: dict[str, Any] = {
        "id": ident,
        "path": f"/r/run/e{epoch}.keras",
        "run": "run",
        "root": "/r",
        "format": Format.KERAS_ZIP,
        "kind": "full",
        "status": CheckpointStatus.PURGED,
        "reason": None,
        "size_bytes": 10,
        "mtime": float(epoch),
        "inode": None,
        "hash": "blake3:00",
        "indexed_at": None,
        "epoch": epoch,
        "metrics": {"val_loss": val_loss},
        "optimizer_bytes": 0,
    }
    return Checkpoint(**(values | fields))


def test_pinned_newest_best_and_last_resumable_copies_stay_the_rest_may_go() -> None:
    resumable = {"optimizer_bytes": 5}
    run = [row(1, 1, 0.9), row(2, 2, 0.2), row(3, 3, 0.7, **resumable), row(4, 4, 0.8)]
    everywhere = {1, 2, 3, 4}
    reasons = {c.id: why_kept(c, run, everywhere) for c in run}
    assert reasons[1] is None
    assert "best by val_loss" in (reasons[2] or "")
    assert "last resumable" in (reasons[3] or "")
    assert "newest" in (reasons[4] or "")
    pinned = row(1, 1, 0.9, pinned=True)
    assert why_kept(pinned, [pinned, *run[1:]], everywhere) == "it is pinned"
    # Once the newest has no bytes anywhere, the one before it is its run's newest.
    assert "newest" in (why_kept(run[2], run, {1, 2, 3}) or "")


def test_of_tied_best_the_copy_of_the_file_no_trainer_rewrites_stays() -> None:
    """`best.pt` and the `ckpt_epoch2.pt` saved with it hold the same val_loss: the tiered epoch
    file's remote copy is the best retention keeps (a resumed trainer rewrites `best.pt`), so it
    stays even though `best.pt` is newer."""
    epoch_file = row(2, 2, 0.2, path="/r/run/ckpt_epoch2.pt")
    best_pt = row(5, 2, 0.2, path="/r/run/best.pt", mtime=2.5)
    run = [row(1, 1, 0.9), epoch_file, best_pt, row(3, 3, 0.7), row(4, 4, 0.8)]
    assert "best by val_loss" in (why_kept(epoch_file, run, {1, 2, 3, 4, 5}) or "")
    assert why_kept(best_pt, run, {1, 2, 3, 4, 5}) is None
