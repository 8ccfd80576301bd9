"""File names that fit: a name is at most 255 bytes on every filesystem a root lives on (Linux
NAME_MAX: ext4, XFS, btrfs, tmpfs, NFS), counted in the bytes the OS sees, not in characters.

Our temp names (`.ckpt-tmp-<pid>h<host>-<token>-<name>`) and other names of our own beside a
file (`<name>.ckpt-kept-<pid>`) embed the file's name; for a legal name near the limit they
would not fit, and the write would fail on every attempt. `bounded` keeps such a name within
the limit: the whole name when it fits, else a hash of it and the end of it (the suffix Keras
and h5py key on stays). A name derived for the user to find (a version, an inference artifact,
its card) is never shortened: `check_fits` refuses it with the reason. No I/O (`os` only
for the bytes a name is stored as).
"""

from __future__ import annotations

import os

from ..core.errors import NameTooLong

NAME_MAX = 255  # bytes in one name (a path component)
_HASH_CHARS = 12


def byte_length(name: str) -> int:
    """The length of `name` as the filesystem stores it (UTF-8, undecodable bytes as they were)."""
    return len(os.fsencode(name))


def bounded(head: str, name: str, tail: str = "") -> str:
    """`head + name + tail` if it fits in NAME_MAX bytes; else `head + <hash of name>~<the end
    of name> + tail`, as much of the end as fits (cut on a character boundary). Distinct names
    give distinct results (the hash), and the result always fits (`head` and `tail` are ours,
    short)."""
    whole = head + name + tail
    if byte_length(whole) <= NAME_MAX:
        return whole
    raw = os.fsencode(name)
    import hashlib  # only for a name too long to keep whole: not at CLI start

    digest = hashlib.blake2s(raw, digest_size=_HASH_CHARS // 2).hexdigest()
    room = NAME_MAX - byte_length(head) - byte_length(tail) - len(digest) - 1
    end = raw[len(raw) - max(room, 0) :]
    while end and 0x80 <= end[0] < 0xC0:  # never start inside a UTF-8 character
        end = end[1:]
    return f"{head}{digest}~{os.fsdecode(end)}{tail}"


def check_fits(name: str, what: str, of: str) -> str:
    """`name` itself if it fits; else NameTooLong saying `what` (e.g. "its version") of `of`
    (the file it derives from) would be N bytes, over the limit."""
    size = byte_length(name)
    if size > NAME_MAX:
        raise NameTooLong(
            f"{of}: {what} would be named with {size} bytes, over the {NAME_MAX} a file name "
            "may have: not written (a shorter name for the file avoids it)"
        )
    return name
