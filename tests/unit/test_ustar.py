"""The tar object a checkpoint of several files tiers as: `core.ustar` headers, the on-the-fly
`remote.sources.TarSource` and the safe `fs.fsunpack.receive_tree`. A round trip gives the same
bytes and the catalog's hash; two streams of one checkpoint are the same bytes (whatever the
part size); Python's tarfile reads what we write; hostile headers (`..`, absolute, a symlink, a
name too long, a duplicate, a device) and tampered data are refused with nothing published."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from ckpt_daemon.core import ustar
from ckpt_daemon.core.errors import BadArchive, HashMismatch, WouldReplace
from ckpt_daemon.fs.fsunpack import receive_tree
from ckpt_daemon.fs.hashing import hash_files
from ckpt_daemon.remote.sources import TarSource

MTIME = 1_700_000_000
NAMES = ["ck/b.bin", "ck/empty", "ck/sub/a.bin", "ck/.metadata"]


def folder_checkpoint(parent: Path) -> list[Path]:
    contents = [os.urandom(70_001), b"", os.urandom(512), b"meta" * 300]
    paths = [parent / n for n in NAMES]
    for path, data in zip(paths, contents, strict=True):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return paths


def stream(parent: Path, names: list[str], chunk: int) -> bytes:
    source = TarSource("ck", parent, names, parent, MTIME)
    try:
        out = bytearray()
        view = memoryview(bytearray(chunk))
        while len(out) < source.size:
            n = source.read_into(view, len(out))
            out += view[:n]
        assert source.content_hash() == hash_files([parent / n for n in names])
        assert source.size == len(out)
        return bytes(out)
    finally:
        source.close()


def test_the_stream_is_deterministic_tarfile_reads_it_and_it_carries_the_catalog_hash(
    tmp_path: Path,
) -> None:
    paths = folder_checkpoint(tmp_path)
    one = stream(tmp_path, NAMES, 5 << 10)
    assert stream(tmp_path, NAMES, 512) == one == stream(tmp_path, NAMES, 1 << 20)
    with tarfile.open(fileobj=io.BytesIO(one), mode="r:") as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == ["ck", *NAMES[:2], "ck/sub", *NAMES[2:]]
        assert all(m.mtime == MTIME and m.uid == m.gid == 0 for m in members)
        for name, path in zip(NAMES, paths, strict=True):
            extracted = tar.extractfile(name)
            assert extracted is not None and extracted.read() == path.read_bytes()


def test_a_round_trip_publishes_the_same_bytes_with_the_indexed_mtime(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    paths = folder_checkpoint(src)
    data = stream(src, NAMES, 4096)
    indexed = hash_files(paths)
    size = sum(p.stat().st_size for p in paths)
    chunks = [data[i : i + 1000] for i in range(0, len(data), 1000)]
    receive_tree(
        dst, NAMES, chunks, expected_hash=indexed, expected_bytes=size, mtime_ns=5 * 10**18
    )
    for name, path in zip(NAMES, paths, strict=True):
        assert (dst / name).read_bytes() == path.read_bytes()
        assert (dst / name).stat().st_mtime_ns == 5 * 10**18
    assert sorted(p.name for p in dst.iterdir()) == ["ck"]
    # A second fetch to the same place keeps what is there when it is the same bytes (a fetch
    # killed before its last rename) and never replaces other bytes.
    assert receive_tree(dst, NAMES, chunks, expected_hash=indexed, expected_bytes=size) == []
    changed = dst / NAMES[-1]
    changed.write_bytes(changed.read_bytes()[::-1])
    with pytest.raises(WouldReplace):
        receive_tree(dst, NAMES, chunks, expected_hash=indexed, expected_bytes=size)
    assert changed.read_bytes() == paths[-1].read_bytes()[::-1]


def test_tf_checkpoint_members_go_beside_each_other(tmp_path: Path) -> None:
    names = ["ckpt-1.index", "ckpt-1.data-00000-of-00001"]
    for n in names:
        (tmp_path / n).write_bytes(os.urandom(1000))
    data = stream(tmp_path, names, 1 << 16)
    dst = tmp_path / "dst"
    dst.mkdir()
    receive_tree(
        dst,
        names,
        [data],
        expected_hash=hash_files([tmp_path / n for n in names]),
        expected_bytes=2000,
    )
    assert sorted(p.name for p in dst.iterdir()) == sorted(names)


def entry_tar(*entries: tuple[str, bytes, bytes]) -> bytes:
    """A tar written by hand: (name, type flag, data) each, checksums right."""
    out = bytearray()
    for name, flag, data in entries:
        block = bytearray(ustar.header(ustar.Entry("x", ustar.Kind.FILE, len(data)), MTIME))
        raw = name.encode()
        block[0:100] = raw[:100].ljust(100, b"\0")
        block[345:500] = bytes(155)
        block[156:157] = flag
        block[148:156] = b" " * 8
        block[148:156] = b"%06o\0 " % sum(block)
        out += block + data + bytes(ustar.padding(len(data)))
    return bytes(out + ustar.END)


@pytest.mark.parametrize(
    ("name", "flag", "said"),
    [
        ("ck/../../etc/passwd", b"0", "`..`"),
        ("/etc/passwd", b"0", "absolute"),
        ("ck/link", b"2", "symlink"),
        ("ck/hard", b"1", "hard link"),
        ("ck/dev", b"3", "device"),
        ("ck/./a", b"0", "`..`"),
    ],
)
def test_hostile_headers_are_refused_and_nothing_is_published(
    tmp_path: Path, name: str, flag: bytes, said: str
) -> None:
    data = entry_tar((name, flag, b"x" * 10))
    with pytest.raises(BadArchive, match=said):
        receive_tree(tmp_path, ["ck/a"], [data], expected_hash="blake3:0", expected_bytes=10)
    assert list(tmp_path.iterdir()) == []  # no temp left, nothing published


def test_duplicates_unknown_names_tampered_bytes_and_trailing_data_are_refused(
    tmp_path: Path,
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    paths = folder_checkpoint(src)
    good = stream(src, NAMES, 4096)
    indexed, size = hash_files(paths), sum(p.stat().st_size for p in paths)
    dst = tmp_path / "dst"
    dst.mkdir()

    def refused(data: bytes, names: list[str], error: type[Exception], said: str) -> None:
        with pytest.raises(error, match=said):
            receive_tree(dst, names, [data], expected_hash=indexed, expected_bytes=size)
        assert list(dst.iterdir()) == []

    twice = entry_tar(("ck/a", b"0", b"1"), ("ck/a", b"0", b"1"))
    refused(twice, ["ck/a", "ck/b"], BadArchive, "twice")
    refused(good, ["ck/other", *NAMES[1:]], BadArchive, "next file")
    refused(good, NAMES[:3], BadArchive, "next file")  # one more file than the catalog's
    refused(good + b"\x01", NAMES, BadArchive, "after the archive's end")
    refused(good + bytes(20_000), NAMES, BadArchive, "after the archive's end")  # unbounded
    refused(good[: len(good) // 2], NAMES, BadArchive, "ends inside")
    flipped = bytearray(good)
    flipped[ustar.BLOCK * 2 + 10] ^= 0xFF  # a byte of the first file's data
    refused(bytes(flipped), NAMES, HashMismatch, "hash")
    with pytest.raises(BadArchive, match="more bytes"):
        receive_tree(dst, NAMES, [good], expected_hash=indexed, expected_bytes=size - 1)
    broken = bytearray(good)
    broken[0] ^= 0x01  # the first header's name: its checksum no longer matches
    refused(bytes(broken), NAMES, BadArchive, "checksum")


def test_names_too_long_for_ustar_are_refused_both_ways() -> None:
    long_name = "ck/" + "x" * 254
    with pytest.raises(BadArchive, match="longer"):
        ustar.entries([long_name], [1])
    with pytest.raises(BadArchive, match="does not fit"):
        ustar.header(ustar.Entry("a" * 101, ustar.Kind.FILE, 1), MTIME)  # no `/` to split at
    long_ok = "d" * 150 + "/" + "f" * 100
    block = ustar.header(ustar.Entry(long_ok, ustar.Kind.FILE, 3), MTIME)
    assert ustar.parse(block) == ustar.Entry(long_ok, ustar.Kind.FILE, 3)


def test_sizes_beyond_eight_gib_use_base_256_as_tarfile_reads_them() -> None:
    size = 9 << 30
    block = ustar.header(ustar.Entry("ck/big", ustar.Kind.FILE, size), MTIME)
    assert ustar.parse(block) == ustar.Entry("ck/big", ustar.Kind.FILE, size)
    assert tarfile.TarInfo.frombuf(block, "utf-8", "strict").size == size


def test_a_folder_that_exists_is_entered_and_only_missing_files_are_put_in(
    tmp_path: Path,
) -> None:
    """A Trainer output_dir moved only its recorded files to the trash: the folder is still
    there with other files in it; the fetch puts the missing files in, touches nothing else."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    paths = folder_checkpoint(src)
    data = stream(src, NAMES, 4096)
    (dst / "ck" / "sub").mkdir(parents=True)
    (dst / "ck" / "other.json").write_text("{}")
    size = sum(p.stat().st_size for p in paths)
    receive_tree(dst, NAMES, [data], expected_hash=hash_files(paths), expected_bytes=size)
    assert {p.relative_to(dst).as_posix() for p in dst.rglob("*") if p.is_file()} == {
        *NAMES,
        "ck/other.json",
    }
    assert (dst / "ck" / "other.json").read_text() == "{}"


def test_one_member_is_open_at_a_time_so_thousands_of_files_stream(tmp_path: Path) -> None:
    """A DCP folder of many ranks: 600 members stream under a limit of 64 more open files than
    the process has now (every member held open at once would hit EMFILE)."""
    import resource

    names = [f"ck/__{i}_0.distcp" for i in range(600)]
    (tmp_path / "ck").mkdir()
    for i, name in enumerate(names):
        (tmp_path / name).write_bytes(b"%d" % i * (i % 7))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 64, hard))
    try:
        data = stream(tmp_path, names, 1 << 16)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        assert [m.name for m in tar.getmembers() if m.isfile()] == names
