"""core.wait_match.pick: of the files of the newest moment, `ckpt wait` answers the one its
trainer does not rewrite (the epoch file, not `best.pt` or `last.ckpt` written beside it), and
says which it passed over."""

from __future__ import annotations

from ckpt_daemon.core.model import Checkpoint, CheckpointStatus
from ckpt_daemon.core.wait_match import WaitFor, pick


def _row(i: int, name: str, epoch: int, mtime: float, generation: int = 1) -> Checkpoint:
    return Checkpoint(
        i, f"/r/run/{name}", "run", "/r", None, "full", CheckpointStatus.OK, None, 1, mtime,
        i, None, None, epoch=epoch, generation=generation,
    )  # fmt: skip


def test_wait_answers_the_epoch_file_over_best_pt_of_the_same_epoch() -> None:
    rows = [_row(1, "ckpt_epoch002.pt", 2, 10.0), _row(2, "best.pt", 2, 10.5)]
    found = pick(rows, WaitFor("run"))
    assert found is not None and found.path == "/r/run/ckpt_epoch002.pt", found
    said = found.details["preferred_over"]
    assert said["path"] == "/r/run/best.pt" and "epoch 2" in said["why"], said


def test_a_rewritten_file_further_along_is_still_the_answer() -> None:
    rows = [_row(1, "ckpt_epoch002.pt", 2, 10.0), _row(2, "last.ckpt", 3, 11.0)]
    found = pick(rows, WaitFor("run"))
    assert found is not None and found.path == "/r/run/last.ckpt"
    assert "preferred_over" not in found.details
    # A numbered file seen rewritten (generation 2) counts as rewritten too.
    rows = [_row(1, "e2.pt", 2, 10.0), _row(2, "e3.pt", 2, 11.0, generation=2)]
    found = pick(rows, WaitFor("run"))
    assert found is not None and found.path == "/r/run/e2.pt"
