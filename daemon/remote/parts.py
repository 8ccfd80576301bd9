"""How an upload is cut and checked: the part size of a file and how many parts are in flight,
the per-part SHA-256 the service verifies each part against on arrival (and reports back, as a
composite, for the verification), and the one in-order pass that reads the parts into reused
buffers, hashing them with our BLAKE3 as they go. No boto3, no service."""

from __future__ import annotations

import base64
import hashlib
import queue
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .sources import Source

PART_SIZE = 5 << 20  # S3's smallest part; a file over MAX_PARTS of them gets larger ones
THREADS = 8  # parts in flight at PART_SIZE: 40 MiB of buffers
MAX_PARTS = 9000  # S3 allows 10,000 parts per upload


def part_size_for(size: int, smallest: int) -> int:
    """The part size of a file of `size` bytes: `smallest`, or larger whole MiBs so that the
    upload stays under MAX_PARTS parts. The same file always gets the same parts (resumable)."""
    needed = -(-size // MAX_PARTS)
    return max(smallest, -(-needed // (1 << 20)) << 20)


def threads_for(part_size: int, threads: int, smallest: int) -> int:
    """Parts in flight for parts of `part_size`: `threads` at the smallest size, fewer (two at
    least) as parts grow, so the buffers stay within `threads` x `smallest` where they can."""
    return max(min(2, threads), min(threads, threads * smallest // part_size))


def part_digest(data: bytes | bytearray) -> bytes:
    """The part's SHA-256: sent with it (the service checks the part against it on arrival)."""
    return hashlib.sha256(data).digest()


def encoded(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


def composite(digests: list[bytes]) -> str:
    """`sha256:<base64>`, the catalog's form of the checksum the service reports of a multipart
    object: the SHA-256 of the parts' SHA-256s, concatenated."""
    return f"sha256:{encoded(hashlib.sha256(b''.join(digests)).digest())}"


def reported_checksum(found: dict[str, Any]) -> str | None:
    """`sha256:<base64>` of the checksum a HEAD (with ChecksumMode) reports, without the
    composite's `-<parts>` tail; None when the service reports none."""
    value = found.get("ChecksumSHA256")
    return f"sha256:{str(value).split('-', 1)[0]}" if value else None


def read_parts(source: Source, part_size: int, free: queue.Queue[bytearray]) -> Iterator[bytearray]:
    """Part 1, 2, ... of `source` (`remote.sources`: a file, or a tar generated from a
    checkpoint's files), read in order once, each into a buffer taken from `free` (waiting for
    one: its sender puts it back once the part is answered, so memory stays at the buffers
    given, allocated once); the source hashes what it hands out as it goes, so its hash ends as
    that of exactly the bytes the parts carry. A short read (a file cut while it is sent) ends
    the parts early: their hash cannot match."""
    size = source.size
    for offset in range(0, max(size, 1), part_size):
        wanted = min(part_size, size - offset)
        buffer = free.get()
        with memoryview(buffer) as view:
            got = source.read_into(view[:wanted], offset)
        if got < len(buffer):
            del buffer[got:]  # the last part's: never given to a full part again
        yield buffer
        if got < wanted:
            return
