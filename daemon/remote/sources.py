"""What an upload reads, at an offset, once and in order: one regular file, or the tar of a
checkpoint's several files generated on the fly (`core.ustar`: never written to disk nor held
in memory; only headers, each 512 bytes, are built, and the members' bytes are read from the
files as the parts ask for them).

Each source hashes what it hands out in that same pass: a file its bytes, a tar its members'
bytes as `fs.hashing.hash_files` hashes several files (name, length, bytes, in the catalog's
order), so the upload compares the catalog's own hash with what went into the parts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from ..core import ustar
from ..fs import beneath
from ..fs.hashing import StreamHash, member_prefix


class Source(Protocol):
    label: str  # what the errors name
    size: int  # the bytes the object will have

    def read_into(self, view: memoryview, offset: int) -> int:
        """Fill `view` from `offset`; fewer bytes only at the end (or if the source shrank)."""
        ...

    def content_hash(self) -> str:
        """The catalog's hash of what was read so far (all of it once the upload is done)."""
        ...

    def changed(self) -> bool:
        """Whether a file read has another size than when the source was opened."""
        ...

    def close(self) -> None: ...


class FileSource:
    def __init__(self, path: Path, root: Path) -> None:
        self.label = str(path)
        self.fd = beneath.open_regular(path, root)
        self.size = os.fstat(self.fd).st_size
        self._hash = StreamHash()

    def read_into(self, view: memoryview, offset: int) -> int:
        got = _pread(self.fd, view, offset)
        self._hash.update(view[:got])
        return got

    def content_hash(self) -> str:
        return self._hash.value()

    def changed(self) -> bool:
        return os.fstat(self.fd).st_size != self.size

    def close(self) -> None:
        os.close(self.fd)


class TarSource:
    """The tar of `names` (relative to `folder`, in this order; opened beneath `root`, no
    symlink followed, regular files only) with every header's mtime `mtime` (seconds).

    One member is open at a time (a folder of thousands of files stays far below any limit on
    open files): each is opened for its size when the source is made, then again when the
    parts reach its bytes, its size checked against the first (`changed`). A header is built
    when the parts reach it, so memory does not grow with the members' count beyond their
    names and sizes."""

    def __init__(
        self, label: str, folder: Path, names: Sequence[str], root: Path, mtime: int
    ) -> None:
        self.label, self.names, self.mtime = label, list(names), mtime
        self._folder, self._root = folder, root
        self.sizes = [self._size_of(name) for name in self.names]
        self.entries = ustar.entries(self.names, self.sizes)
        self.data_bytes = sum(self.sizes)
        self._hash = StreamHash()
        self._several = len(names) > 1
        # The segments, back to back: (start, -1 - entry index: its header | file index, length).
        self.segments: list[tuple[int, int, int]] = []
        at, index = 0, 0
        for number, entry in enumerate(self.entries):
            self.segments.append((at, -1 - number, ustar.BLOCK))
            at += ustar.BLOCK
            if entry.kind is ustar.Kind.FILE:
                self.segments.append((at, index, entry.size))
                at += entry.size + ustar.padding(entry.size)  # padding: zeros, read as a gap
                index += 1
        self.size = at + len(ustar.END)
        self._at = 0  # the segment the next read starts in
        self._next = 0  # one pass, in order: what the hash has seen
        self._open: tuple[int, int] | None = None  # (file index, fd)
        self._changed = False

    def _size_of(self, name: str) -> int:
        fd = beneath.open_regular(self._folder / name, self._root)
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def _fd(self, index: int) -> int:
        if self._open is not None and self._open[0] == index:
            return self._open[1]
        self.close()
        fd = beneath.open_regular(self._folder / self.names[index], self._root)
        self._open = (index, fd)
        if os.fstat(fd).st_size != self.sizes[index]:
            self._changed = True
        return fd

    def read_into(self, view: memoryview, offset: int) -> int:
        if offset != self._next:
            raise ValueError(f"{self.label}: read at {offset}, expected {self._next} (one pass)")
        end = offset + min(len(view), self.size - offset)
        pos = offset
        while self._at < len(self.segments) and self.segments[self._at][0] < end:
            start, what, length = self.segments[self._at]
            if start > pos:  # a member's padding: zeros
                view[pos - offset : start - offset] = bytes(start - pos)
                pos = start
            hi = min(start + length, end)
            if what < 0:
                header = ustar.header(self.entries[-1 - what], self.mtime)
                view[pos - offset : hi - offset] = header[pos - start : hi - start]
            else:
                if pos == start and self._several:  # the member's first byte: its name first
                    self._hash.update(member_prefix(self.names[what].rsplit("/", 1)[-1], length))
                got = _pread(self._fd(what), view[pos - offset : hi - offset], pos - start)
                self._hash.update(view[pos - offset : pos - offset + got])
                if got < hi - pos:  # the file shrank while it was sent: the hash says so
                    self._changed = True
                    self._next = pos + got
                    return pos + got - offset
            pos = hi
            if hi < start + length:
                break
            self._at += 1
        view[pos - offset : end - offset] = bytes(end - pos)  # padding, the archive's end
        self._next = end
        return end - offset

    def content_hash(self) -> str:
        return self._hash.value()

    def changed(self) -> bool:
        """A member whose size differed when its bytes were read, or that is shorter now."""
        if self._open is not None and os.fstat(self._open[1]).st_size != self.sizes[self._open[0]]:
            return True
        return self._changed

    def close(self) -> None:
        if self._open is not None:
            os.close(self._open[1])
            self._open = None


def _pread(fd: int, view: memoryview, offset: int) -> int:
    """Fill `view` from `offset` of `fd`: fewer bytes only at the file's end."""
    got = 0
    while got < len(view) and (n := os.preadv(fd, [view[got:]], offset + got)):
        got += n
    return got
