"""A save racing an in-place rewrite, at the moments a test from outside cannot aim at: a
writer whose open() resolved the name just before the exchange and writes the file swapped out
only after it was first looked at; a writer seen through another path than the root's (a
symlinked folder above it); a save landing between the catalog's checks and compress's first
look. Real files, real processes, the real fsswap/fsops/compress. Through the CLI:
tests/e2e/test_trust_rewrite_races.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest


def test_a_writer_that_opened_the_old_name_and_writes_after_the_first_look_is_swapped_back(
    tmp_path: Path,
) -> None:
    """The writer's open() returns only after the swap and the first look at the file swapped
    out (as when it is preempted inside open() on a loaded machine); it writes during the
    grace. Its pid is unseen (as on a system without /proc): the metadata tells."""
    from ckpt_daemon.fs import fsswap

    name, temp = "ckpt.h5", "temp.h5"
    (tmp_path / name).write_bytes(b"old weights")
    (tmp_path / temp).write_bytes(b"compressed old weights")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    writer: list[int] = []
    calls: list[str] = []

    def writers(checked: str) -> list[int]:
        calls.append(checked)
        if checked == temp and not writer:  # the first look after the swap: not open yet
            writer.append(os.open(checked, os.O_WRONLY, dir_fd=fd))
        elif checked == temp:  # the look after the grace: the save went into the old file
            os.pwrite(writer[0], b"NEW weights, a longer save", 0)
        return []

    try:
        expected = fsswap.identity_at(fd, name)
        assert expected is not None
        with pytest.raises(fsswap.Changed):
            fsswap.replace_if_same(fd, temp, name, expected, writers)
    finally:
        for opened in writer:
            os.close(opened)
        os.close(fd)
    assert calls == [name, temp, temp]
    assert (tmp_path / name).read_bytes() == b"NEW weights, a longer save"
    assert (tmp_path / temp).read_bytes() == b"compressed old weights"


HOLDER = """
import sys
with open(sys.argv[1], "r+b"):  # a trainer with the checkpoint open to save into it
    print("open", flush=True)
    sys.stdin.readline()
"""


def test_a_writer_is_seen_whatever_path_it_opened_the_file_by(tmp_path: Path) -> None:
    """The root is configured through a symlinked folder; the trainer opened the file by its
    real path, so /proc names it differently from the root: it is matched by its inode."""
    from ckpt_daemon.core.errors import Refused
    from ckpt_daemon.fs import fsops

    real = tmp_path / "real" / "runs"
    real.mkdir(parents=True)
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    root = tmp_path / "alias" / "runs"
    (real / "ckpt.h5").write_bytes(b"old weights")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(real / "ckpt.h5")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert holder.stdout.readline() == "open\n"
        refused = pytest.raises(Refused, match=f"open for writing by pid {holder.pid}")
        with refused, fsops.rewrite(root, root / "ckpt.h5") as temp:
            temp.write_bytes(b"compressed old weights")
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
        holder.stdout.close()
    assert (real / "ckpt.h5").read_bytes() == b"old weights"
    assert [p.name for p in real.iterdir()] == ["ckpt.h5"]


def small_h5(path: Path) -> Path:
    with h5py.File(path, "w") as f:
        f.create_dataset("model_weights/dense/kernel:0", data=np.zeros((256, 64), np.float32))
    return path


def test_compress_refuses_unread_a_file_that_is_not_the_one_the_catalog_checked(
    tmp_path: Path,
) -> None:
    """A save landing between the catalog's checks and compress's first look: refused before
    a byte is read (the old code compressed the save, decided on other bytes)."""
    from ckpt_daemon.core.errors import Refused
    from ckpt_daemon.core.model import FileStat
    from ckpt_daemon.transforms.compress import compress

    target = small_h5(tmp_path / "ckpt.h5")
    info = target.stat()
    checked = FileStat(info.st_size, info.st_mtime_ns - 10**9, info.st_ino)  # a second earlier
    before = target.read_bytes()
    with pytest.raises(Refused, match="changed since it was checked against the catalog"):
        compress(tmp_path, target, indexed=checked)
    assert target.read_bytes() == before and target.stat().st_ino == info.st_ino
    result = compress(
        tmp_path, target, indexed=FileStat(info.st_size, info.st_mtime_ns, info.st_ino)
    )
    assert result.skipped is None and result.bytes_after < result.bytes_before


def test_a_read_error_on_an_unchanged_file_is_not_called_a_change(tmp_path: Path) -> None:
    from ckpt_daemon.core.errors import Refused
    from ckpt_daemon.transforms.compress import compress

    source = small_h5(tmp_path / "whole.h5")
    target = tmp_path / "cut.h5"
    shutil.copyfile(source, target)
    with target.open("r+b") as f:  # truncated past the superblock: broken, and not changing
        f.truncate(source.stat().st_size // 2)
    data = target.read_bytes()
    with pytest.raises(Exception) as raised:
        compress(tmp_path, target)
    assert not isinstance(raised.value, Refused), raised.value
    assert target.read_bytes() == data
