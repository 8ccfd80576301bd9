"""Paths as the catalog stores them: below a named root, relative to the root's `name`.

A folder shared by several hosts is mounted at a different path on each (`/mnt/a/exp` here,
`/shared/exp` there). A root with a `name` is stored as `@<name>` and its files as
`@<name>/<path inside the root>`, so every host finds the same rows for the same files and
computes the same locks and run keys. A root without a name keeps its absolute path (one host).

The mapping is a prefix swap, so it keeps the order of everything below one root: the range
queries on a folder (`p >= "<dir>/" AND p < "<dir>0"`, "0" being the character after "/") work
on the stored form as on the local one. A stored path of a named root this host does not mount
reads back as it is stored (`@other/run/x.keras`): it is shown, never opened.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
PREFIX = "@"  # never the start of an absolute path: stored forms and local paths cannot mix
# What may follow a root's local path in a value that is below it or bounds a range of it.
_BELOW = ("/", "0")


class PathCodec:
    """Local absolute paths <-> stored paths, for the roots that have a name."""

    def __init__(self, named_roots: Mapping[str, str]) -> None:
        # Longest local path first: a root nested in another's folder name (`/d/a` and `/d/ab`)
        # is matched by its own path, never by a shorter one's prefix.
        self._local = sorted(
            ((path.rstrip("/") or "/", name) for name, path in named_roots.items()),
            key=lambda item: -len(item[0]),
        )
        self._by_name = {name: path.rstrip("/") for name, path in named_roots.items()}

    def __bool__(self) -> bool:
        return bool(self._local)

    def stored(self, local: str) -> str:
        """How `local` (an absolute path, or a range bound built from one) is stored."""
        for path, name in self._local:
            if local.startswith(path):
                rest = local[len(path) :]
                if not rest or rest[0] == "/" or rest in _BELOW:
                    return f"{PREFIX}{name}{rest}"
        return local

    def local(self, stored: str) -> str:
        """The path on this host of a stored path (as stored if its root is not mounted here)."""
        if not stored.startswith(PREFIX):
            return stored
        name, slash, rest = stored[1:].partition("/")
        path = self._by_name.get(name)
        if path is None:
            return stored
        return f"{path}{slash}{rest}"

    def stored_tree(self, value: Any) -> Any:
        """`value` (JSON: a checkpoint's `details`) with every path string in it stored."""
        return _walk(value, self.stored)

    def local_tree(self, value: Any) -> Any:
        return _walk(value, self.local)


def _walk(value: Any, convert: Any) -> Any:
    if isinstance(value, str):
        return convert(value) if value[:1] in ("/", PREFIX) else value
    if isinstance(value, dict):
        return {k: _walk(v, convert) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, convert) for v in value]
    return value


def check_name(name: str) -> str | None:
    """Why `name` cannot name a root (None: it can)."""
    if not NAME.fullmatch(name):
        return "must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
    return None
