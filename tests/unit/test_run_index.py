"""formats.run_index and the naming rule of logs in shared folders (formats.log_discovery),
on paths alone: the lookups that keep log discovery flat in the number of runs."""

from __future__ import annotations

from pathlib import Path

from ckpt_daemon.formats.log_discovery import names_folder
from ckpt_daemon.formats.run_index import RunIndex, as_index


def test_the_index_knows_runs_and_the_folders_above_them() -> None:
    index = RunIndex([Path("/r/exps/a/checkpoints"), "/r/exps/b", Path("/r/exps/a/checkpoints")])
    assert len(index) == 2
    assert index.branches(Path("/r/exps")) == {"a", "b"}
    assert index.branches(Path("/r/exps/a")) == {"checkpoints"}
    assert index.branches(Path("/r/exps/b")) == frozenset()  # a run with nothing below
    assert index.is_run_or_above_one(Path("/r/exps/a"))
    assert index.is_run_or_above_one(Path("/r/exps/b"))
    assert not index.is_run_or_above_one(Path("/r/exps/a/checkpoints/logs"))
    assert index.shared_off(Path("/r/exps"), "a") and index.shared_off(Path("/r/exps/a"), "c")
    assert not index.shared_off(Path("/r/exps/a"), "checkpoints")
    assert not index.shared_off(Path("/r/exps/b"), "anything")
    index.add(Path("/r/exps/a/checkpoints/../other"))  # made absolute and normal
    assert index.branches(Path("/r/exps/a")) == {"checkpoints", "other"}
    assert as_index(index) is index and len(as_index([Path("/x")])) == 1


def test_a_log_names_a_folder_between_separators() -> None:
    assert names_folder("lr_b", "lr_b") and names_folder("lr_b_history", "lr_b")
    assert names_folder("history-lr_b", "lr_b") and names_folder("x.lr_b.y", "lr_b")
    assert not names_folder("lr_b2", "lr_b") and not names_folder("xlr_b", "lr_b")
    assert names_folder("lr_b2_lr_b", "lr_b")  # the second occurrence counts
    assert not names_folder("anything", "")
