"""Content hashes: BLAKE3, streamed in fixed-size chunks (bounded memory, all cores)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import blake3

ALGORITHM = "blake3"
CHUNK = 8 << 20  # large enough for BLAKE3 to spread one chunk over several threads


def hash_files(paths: Sequence[Path]) -> str:
    """`blake3:<hex>` of one file's bytes; for several files, of each name, length and bytes."""
    hasher = blake3.blake3(max_threads=blake3.blake3.AUTO)
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            if len(paths) > 1:
                size = f.seek(0, 2)
                f.seek(0)
                hasher.update(f"{path.name}\0{size}\0".encode())
            while n := f.readinto(view):
                hasher.update(view[:n])
    return f"{ALGORITHM}:{hasher.hexdigest()}"
