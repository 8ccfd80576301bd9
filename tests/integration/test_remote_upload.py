"""`remote.s3.S3Store` (the S3 adapter of `remote.store.ObjectStore`) and `remote.parts`
against a real S3 API server on loopback (moto's server mode): a file of several parts read
once, in order, into reused buffers and hashed as it is read; the service's composite checksum
read back equals the one we sent; a killed upload's parts kept on the next one; bytes that are
not the catalog's never completed; a copy inside the service (the remote trash's) keeps the
bytes and our metadata, in one call or in ranges. Parts here are the smallest S3 takes (5 MiB),
so a 12 MiB file makes three."""

from __future__ import annotations

import io
import os
import queue
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt_daemon.core.errors import Refused
from ckpt_daemon.fs.hashing import hash_files
from ckpt_daemon.remote.parts import (
    PART_SIZE,
    composite,
    part_digest,
    part_size_for,
    read_parts,
    threads_for,
)
from ckpt_daemon.remote.s3 import S3Store
from ckpt_daemon.remote.sources import FileSource, TarSource
from ckpt_daemon.remote.store import Uploaded
from ckpt_daemon.settings.remote import Remote
from tests.support.s3_server import CREDENTIALS, S3Server

PART = 5 << 20
SIZE = 12 << 20


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = S3Server()
    server.bucket("uploads")
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _aws_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def big(tmp_path: Path) -> Path:
    path = tmp_path / "big.safetensors"
    path.write_bytes(os.urandom(SIZE))
    return path


def store_for(s3: S3Server, threads: int = 2) -> S3Store:
    remote = Remote(bucket="uploads", prefix="t", endpoint_url=s3.url, region="us-east-1")
    return S3Store(remote, part_size=PART, threads=threads)


def put_file(objects: S3Store, key: str, path: Path, indexed: str) -> Uploaded:
    source = FileSource(path, path.parent)
    try:
        return objects.put(key, source, indexed, conditional=True)
    finally:
        source.close()


def test_parts_are_read_once_in_order_into_the_buffers_given(big: Path) -> None:
    free: queue.Queue[bytearray] = queue.Queue()
    buffers = [bytearray(PART), bytearray(PART)]
    for buffer in buffers:
        free.put(buffer)
    seen, ids = bytearray(), set()
    source = FileSource(big, big.parent)
    try:
        for part in read_parts(source, PART, free):
            seen += part
            ids.add(id(part))
            free.put(part)  # answered: its buffer serves a later part
    finally:
        source.close()
    assert bytes(seen) == big.read_bytes()
    assert source.content_hash() == hash_files([big])
    assert ids <= {id(b) for b in buffers}
    assert part_size_for(SIZE, PART_SIZE) == PART_SIZE


def test_parts_in_flight_shrink_as_parts_grow_so_memory_stays_bounded() -> None:
    assert part_size_for(43 << 30, PART_SIZE) == PART_SIZE  # under 9,000 parts of 5 MiB
    assert part_size_for(44 << 30, PART_SIZE) == 6 << 20
    big = part_size_for(1 << 40, PART_SIZE)  # a TiB: 117 MiB parts
    assert big == 117 << 20 and threads_for(big, 8, PART_SIZE) == 2
    assert threads_for(PART_SIZE, 8, PART_SIZE) == 8 and threads_for(big, 1, PART_SIZE) == 1
    assert threads_for(10 << 20, 8, PART_SIZE) == 4  # 40 MiB in flight either way


def test_a_multipart_upload_verifies_by_the_service_checksum(s3: S3Server, big: Path) -> None:
    objects = store_for(s3)
    indexed = hash_files([big])
    sent = put_file(objects, "t/a/big.safetensors", big, indexed)
    assert (sent.parts, sent.size, sent.resumed_parts, sent.existing) == (3, SIZE, 0, False)
    found = objects.head(sent.key)
    assert found is not None and found.checksum == sent.checksum
    assert sent.checksum.startswith("sha256:") and found.content_hash == hash_files([big])
    assert b"".join(objects.get(sent.key)) == big.read_bytes()
    assert objects.counters.uploaded_bytes == SIZE


def test_a_killed_uploads_parts_are_kept_on_the_next_upload(s3: S3Server, big: Path) -> None:
    objects, key = store_for(s3), "t/b/big.safetensors"
    data = big.read_bytes()
    upload_id = objects.client.create_multipart_upload(
        Bucket="uploads", Key=key, ChecksumAlgorithm="SHA256"
    )["UploadId"]
    objects.client.upload_part(  # what a killed `ckpt tier` left: its first part
        Bucket="uploads", Key=key, UploadId=upload_id, PartNumber=1, Body=data[:PART]
    )
    sent = put_file(objects, key, big, hash_files([big]))
    assert (sent.parts, sent.resumed_parts) == (3, 1)
    assert objects.counters.uploaded_bytes == SIZE - PART
    found = objects.head(key)
    assert found is not None and found.checksum == sent.checksum
    assert objects.client.get_object(Bucket="uploads", Key=key)["Body"].read() == data
    assert composite([part_digest(data[i : i + PART]) for i in range(0, SIZE, PART)]) == (
        sent.checksum
    )


def test_bytes_that_are_not_the_catalogs_are_never_completed(s3: S3Server, big: Path) -> None:
    objects, key = store_for(s3, threads=3), "t/c/big.safetensors"
    indexed = hash_files([big])
    with open(big, "r+b") as f:  # the last part changed after it was indexed
        f.seek(SIZE - 1)
        f.write(b"\0" if big.read_bytes()[-1:] != b"\0" else b"\1")
    with pytest.raises(Refused, match="not the ones indexed"):
        put_file(objects, key, big, indexed)
    assert objects.head(key) is None
    assert not objects.pending_uploads(key)  # aborted, not left to resume


def tar_of(folder: Path) -> tuple[TarSource, list[str]]:
    names = ["ck/a.bin", "ck/sub/b.bin", "ck/c.bin"]
    for name, size in zip(names, (7 << 20, 3 << 20, 2 << 20 | 77), strict=True):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(os.urandom(size))
    return TarSource("ck", folder, names, folder, 1_700_000_000), names


def test_a_tar_of_several_files_is_streamed_resumed_and_read_back_whole(
    s3: S3Server, tmp_path: Path
) -> None:
    """The tar is generated as the parts are read (never on disk): a killed upload's first part
    (the same bytes: the stream is deterministic) is kept, the object is the tar tarfile reads,
    and its parts carried the catalog's hash of the members."""
    objects, key = store_for(s3), "t/d/ck.tar"
    source, names = tar_of(tmp_path)
    indexed = hash_files([tmp_path / n for n in names])
    first = bytearray(PART)
    probe = TarSource("ck", tmp_path, names, tmp_path, 1_700_000_000)
    try:
        assert probe.read_into(memoryview(first), 0) == PART
    finally:
        probe.close()
    upload_id = objects.client.create_multipart_upload(  # as a killed `ckpt tier` began it
        Bucket="uploads", Key=key, ChecksumAlgorithm="SHA256", Metadata={"ckpt-hash": indexed}
    )["UploadId"]
    objects.client.upload_part(
        Bucket="uploads", Key=key, UploadId=upload_id, PartNumber=1, Body=bytes(first)
    )
    try:
        sent = objects.put(key, source, indexed, conditional=True)
    finally:
        source.close()
    assert (sent.parts, sent.resumed_parts, sent.size) == (3, 1, source.size)
    body = objects.client.get_object(Bucket="uploads", Key=key)["Body"].read()
    assert len(body) == source.size and body[:PART] == bytes(first)
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as tar:
        for name in names:
            member = tar.extractfile(name)
            assert member is not None and member.read() == (tmp_path / name).read_bytes()
    found = objects.head(key)
    assert found is not None and found.checksum == sent.checksum
    assert found.content_hash == indexed


def test_a_tar_whose_member_changed_is_never_completed(s3: S3Server, tmp_path: Path) -> None:
    objects, key = store_for(s3), "t/e/ck.tar"
    source, names = tar_of(tmp_path)
    indexed = hash_files([tmp_path / n for n in names])
    with open(tmp_path / names[1], "r+b") as f:  # same size, one byte other than indexed
        f.write(b"\0" if (tmp_path / names[1]).read_bytes()[:1] != b"\0" else b"\1")
    try:
        with pytest.raises(Refused, match="not the ones indexed"):
            objects.put(key, source, indexed, conditional=True)
    finally:
        source.close()
    assert objects.head(key) is None and not objects.pending_uploads(key)


@pytest.mark.parametrize("limit", [5 << 30, 1], ids=["one-call", "in-ranges"])
def test_a_copy_inside_the_service_keeps_the_bytes_and_our_hash(
    s3: S3Server, tmp_path: Path, limit: int
) -> None:
    """The remote trash's move: `CopyObject` up to 5 GiB, a multipart copy of ranges above it
    (`limit`: 1 byte forces the ranges), our BLAKE3 kept in the metadata either way."""
    objects, key = store_for(s3), f"t/f{limit}/small.safetensors"
    path = tmp_path / "small.safetensors"
    path.write_bytes(os.urandom(3 << 20))
    indexed = hash_files([path])
    sent = put_file(objects, key, path, indexed)
    objects.multipart.copy(key, key + ".copy", sent.size, limit=limit)
    found = objects.head(key + ".copy")
    assert found is not None and (found.size, found.content_hash) == (sent.size, indexed)
    assert b"".join(objects.get(key + ".copy")) == path.read_bytes()
    objects.delete(key + ".copy")
    assert objects.head(key + ".copy") is None
