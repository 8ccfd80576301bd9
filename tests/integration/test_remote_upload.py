"""`remote.s3.ObjectStore.upload` and `remote.parts` against a real S3 API server on loopback
(moto's server mode): a file of several parts read once, in order, into reused buffers and
hashed as it is read; the service's composite checksum read back equals the one we sent; a
killed upload's parts kept on the next one; bytes that are not the catalog's never completed.
Parts here are the smallest S3 takes (5 MiB), so a 12 MiB file makes three."""

from __future__ import annotations

import os
import queue
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt_daemon.core.errors import Refused
from ckpt_daemon.fs.hashing import StreamHash, hash_files
from ckpt_daemon.remote.parts import (
    PART_SIZE,
    composite,
    part_digest,
    part_size_for,
    read_parts,
    threads_for,
)
from ckpt_daemon.remote.s3 import ObjectStore
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


def store_for(s3: S3Server, threads: int = 2) -> ObjectStore:
    remote = Remote(bucket="uploads", prefix="t", endpoint_url=s3.url, region="us-east-1")
    return ObjectStore(remote, part_size=PART, threads=threads)


def test_parts_are_read_once_in_order_into_the_buffers_given(big: Path) -> None:
    free: queue.Queue[bytearray] = queue.Queue()
    buffers = [bytearray(PART), bytearray(PART)]
    for buffer in buffers:
        free.put(buffer)
    sent, seen, ids = StreamHash(), bytearray(), set()
    fd = os.open(big, os.O_RDONLY)
    try:
        for part in read_parts(fd, SIZE, PART, sent, free):
            seen += part
            ids.add(id(part))
            free.put(part)  # answered: its buffer serves a later part
    finally:
        os.close(fd)
    assert bytes(seen) == big.read_bytes()
    assert sent.value() == hash_files([big])
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
    sent = objects.upload("t/a/big.safetensors", big, big.parent, indexed, conditional=True)
    assert (sent.parts, sent.size, sent.resumed_parts, sent.existing) == (3, SIZE, 0, False)
    found = objects.head(sent.key)
    assert found is not None and found.checksum == sent.checksum
    assert sent.checksum.startswith("sha256:") and found.content_hash == hash_files([big])
    body = objects.client.get_object(Bucket="uploads", Key=sent.key)["Body"].read()
    assert body == big.read_bytes()
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
    sent = objects.upload(key, big, big.parent, hash_files([big]), conditional=True)
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
        objects.upload(key, big, big.parent, indexed, conditional=True)
    assert objects.head(key) is None
    assert not objects.uploads(key)  # aborted, not left to resume
