"""A folder checkpoint's stat (`fsops.current_stat`): its size and newest mtime, read beneath
its root. Real folders and files."""

from __future__ import annotations

import os
from pathlib import Path

from ckpt_daemon.fs import fsops


def test_a_folder_with_no_file_yet_is_as_new_as_its_creation(tmp_path: Path) -> None:
    # An async save killed as it began leaves an empty step folder: its mtime must still
    # say when it was made, or the run's view ranks it older than every complete save.
    older = tmp_path / "1"
    older.mkdir()
    (older / "w.bin").write_bytes(b"x" * 10)
    os.utime(older / "w.bin", ns=(1_000_000_000, 1_000_000_000))
    empty = tmp_path / "2.orbax-checkpoint-tmp"
    (empty / "params").mkdir(parents=True)
    os.utime(empty, ns=(5_000_000_000, 5_000_000_000))
    stat = fsops.current_stat(tmp_path, [empty])
    assert (stat.size, stat.mtime_ns) == (0, 5_000_000_000)
    assert fsops.current_stat(tmp_path, [older]).mtime_ns == 1_000_000_000


def test_a_folder_with_files_is_as_new_as_its_newest_file_not_its_entries(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "step-3"
    folder.mkdir()
    for name, ns in (("a.bin", 2_000_000_000), ("b.bin", 3_000_000_000)):
        (folder / name).write_bytes(b"y" * 4)
        os.utime(folder / name, ns=(ns, ns))
    os.utime(folder, ns=(9_000_000_000, 9_000_000_000))  # a rename in it, say: not a write
    stat = fsops.current_stat(tmp_path, [folder])
    assert (stat.size, stat.mtime_ns) == (8, 3_000_000_000)
