"""Issue 8, the rewrite paths, in-process: an exchange that swapped out a changed file swaps it
back (fsswap on a real filesystem), and the transforms themselves refuse a deep HDF5 chain
without a RecursionError. The same paths through the CLI: tests/e2e/test_trust_rewrites.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.hostile_files import deep_chain, keras_looking_h5


def test_an_exchange_that_swapped_out_a_changed_file_is_swapped_back(tmp_path: Path) -> None:
    """fsswap on a real filesystem: a writer holding the file open writes through its open
    descriptor right after the swap (its pid unseen, as on a system without /proc): the file
    swapped out is not the one read, so the swap is undone and the writer's bytes keep the
    name."""
    from ckpt_daemon.fs import fsswap

    name, temp = "ckpt.h5", "temp.h5"
    (tmp_path / name).write_bytes(b"old weights")
    (tmp_path / temp).write_bytes(b"compressed old weights")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    writer = os.open(tmp_path / name, os.O_WRONLY)
    calls: list[str] = []

    def writers(checked: str) -> list[int]:
        calls.append(checked)
        if checked == temp:  # after the swap: the save lands in the file swapped out
            os.pwrite(writer, b"NEW weights, a longer save", 0)
        return []

    try:
        expected = fsswap.identity_at(fd, name)
        assert expected is not None
        with pytest.raises(fsswap.Changed):
            fsswap.replace_if_same(fd, temp, name, expected, writers)
    finally:
        os.close(writer)
        os.close(fd)
    assert calls == [name, temp]
    assert (tmp_path / name).read_bytes() == b"NEW weights, a longer save"
    assert (tmp_path / temp).read_bytes() == b"compressed old weights"


def test_the_transforms_themselves_refuse_a_deep_chain_without_recursion_error(
    tmp_path: Path,
) -> None:
    from ckpt_daemon.core.errors import CorruptCheckpoint, UsageError
    from ckpt_daemon.transforms.compress import compress
    from ckpt_daemon.transforms.split import split

    target = keras_looking_h5(tmp_path / "deep.h5", deep_chain)
    for transform in (compress, split):
        # Refused by whichever bound looks first (the reader's 64 levels, the transforms' 256),
        # never a RecursionError.
        with pytest.raises((UsageError, CorruptCheckpoint), match="deeper than"):
            transform(tmp_path, target)
    assert [p.name for p in tmp_path.iterdir()] == ["deep.h5"]
