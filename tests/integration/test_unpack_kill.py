"""A fetch of a multi-file checkpoint SIGKILLed between two renames of `fsunpack._publish`
(found by reading the code while writing bench/s3_crash_folders.py; that campaign's random kills
did not land in the window): when the checkpoint's folder exists at fetch time, each entry is
renamed in on its own, so the folder is left half there, and the next fetch refuses it
(WouldReplace on the member already published). A folder checkpoint tiered whole is gone at
fetch time (one rename, atomic); by reading, a TF checkpoint's members go into its run's folder,
which exists (not run here). The next fetch keeps a published member only when its bytes are
the verified member's, and refuses one with other bytes."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from ckpt_daemon.core.errors import WouldReplace
from ckpt_daemon.fs import fsops, fsunpack
from ckpt_daemon.fs.hashing import hash_files
from ckpt_daemon.remote.sources import TarSource

NAMES = ["a.bin", "b.bin", "c.bin"]


def _tar(src: Path) -> tuple[bytes, str, int]:
    for i, name in enumerate(NAMES):
        (src / name).write_bytes(os.urandom(10_000 + i))
    source = TarSource("t", src, NAMES, src.parent, 0)
    buf, got = bytearray(source.size), 0
    while got < source.size:
        got += source.read_into(memoryview(buf)[got:], got)
    source.close()
    return bytes(buf), hash_files([src / n for n in NAMES]), sum(source.sizes)


def test_fetch_killed_between_renames_is_completed_by_the_next(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "dest").mkdir()
    data, digest, size = _tar(tmp_path / "src")
    dest = tmp_path / "dest"
    pid = os.fork()
    if pid == 0:  # the fetch, SIGKILLed as it renames its second entry into place
        real, calls = fsunpack.move_new, [0]

        def dying(*args: object) -> bool:
            calls[0] += 1
            if calls[0] == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args)  # type: ignore[arg-type]

        fsunpack.move_new = dying  # type: ignore[assignment]
        fsunpack.receive_tree(dest, NAMES, [data], expected_hash=digest, expected_bytes=size)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status)
    assert sorted(p.name for p in dest.iterdir() if not p.name.startswith(".ckpt-tmp")) == [
        "a.bin"
    ]  # half there
    fsops.remove_stale_temps(dest, recursive=False)  # what the next `ckpt fetch` does first
    fsunpack.receive_tree(dest, NAMES, [data], expected_hash=digest, expected_bytes=size)
    assert sorted(p.name for p in dest.iterdir()) == NAMES


def test_a_member_there_with_other_bytes_is_never_replaced(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "dest").mkdir()
    data, digest, size = _tar(tmp_path / "src")
    dest = tmp_path / "dest"
    (dest / "a.bin").write_bytes(b"someone else's")
    with pytest.raises(WouldReplace):
        fsunpack.receive_tree(dest, NAMES, [data], expected_hash=digest, expected_bytes=size)
    assert (dest / "a.bin").read_bytes() == b"someone else's"
    assert sorted(p.name for p in dest.iterdir()) == ["a.bin"]  # nothing else published
    os.symlink(tmp_path / "src" / "b.bin", dest / "b.bin")  # a link: refused before a fetch
    with pytest.raises(WouldReplace):
        fsunpack.receive_tree(dest, NAMES, [iter(())], expected_hash=digest, expected_bytes=size)
