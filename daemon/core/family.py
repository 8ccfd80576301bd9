"""A format family: one row that says everything the rest of the code asks of a format.

A row names its format (the catalog's value), how it is found and read, when it is complete,
whether training resumes from it, how it is split (or why not) and how `verify --load` loads
it. Everything that used to branch per format asks the row (`row(format)`); a new format is
one module (its reader, its rules) and one `register(Family(...))`: `core.families` holds the
built-in rows. The parts that do I/O are named by reference, `"layer.module:attribute"`
(or given as the object itself by a format outside the package), and resolved by the layer
that runs them (`resolve`), so the table stays pure and no arrow points up.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .model import Format

# A part that does I/O: "layer.module:attribute" (resolved by the layer that runs it), or the
# object itself. Readers are `formats`' (a file's: `read(raw, head, size) -> info | None`, None
# when the bytes are not its; a folder's: `read(folder, root) -> info`); layouts `fs`'
# (`fs.folder_layouts.FolderLayout`); splitters `transforms`' (a module with `split` and
# `inference_path`); loads `usecases`' (`load(checkpoint, mode) -> (ok, detail)`).
Ref = str | object

# Completeness rules: a read problem is `incomplete` until the file has settled, `corrupt`
# after (core.completion); or, for a folder an async save fills, the save's own signs and its
# writers decide (core.save_verdict, usecases.save_checks).
SETTLE, SAVE = "settle", "save"


@dataclass(frozen=True)
class ResumeFacts:
    """What the catalog knows of a checkpoint that a resume rule may weigh."""

    format: Format
    kind: str | None
    optimizer_bytes: int | None
    keras_version: str | None
    optimizer_config_lost: bool = False


@dataclass(frozen=True)
class Resumability:
    resumable: bool
    reason: str


ResumeRule = Callable[[ResumeFacts], Resumability]


@dataclass(frozen=True)
class Family:
    """One format's row. `module`: set by a format outside the package, imported again by the
    reader child (`extra_modules`) so that the child knows the row too."""

    format: Format
    resume: ResumeRule  # pure: resumable or not, and why (core.resume)
    may_resume: bool = False  # its rule can say yes (the catalog's --resumable pre-filter)
    reader: Ref | None = None
    suffixes: tuple[str, ...] = ()  # file names discovery offers the file readers
    layout: Ref | None = None  # a folder format's layout: recognised from names alone
    folder: bool = False  # one checkpoint of a whole folder: members, moved as one unit
    completeness: str = SETTLE
    splitter: Ref | None = None  # None: transforms.split judges it (and refuses)
    split_refusal: str | None = None  # why it is never split (exit 2, before anything)
    compress_refusal: str | None = None  # why it is never compressed
    compressible: bool = False  # compressed in place by transforms.compress
    load: Ref | None = None  # None: `verify --load` says it is not checked
    module: str | None = None


_ROWS: dict[str, Family] = {}
_CACHE: dict[str, Any] = {}  # answers asked per file or per listed row, until a register


def register(family: Family) -> Family:
    """Add (or replace) the row of `family.format`; its format becomes a known `Format`."""
    fmt = Format.add(str(family.format))
    if family.format is not fmt:
        family = Family(**{**family.__dict__, "format": fmt})
    _ROWS[fmt.value] = family
    _CACHE.clear()
    return family


def unregister(fmt: str) -> None:
    """Forget a row added by `register` (a test's toy format); built-in rows stay."""
    _ROWS.pop(str(fmt), None)
    _CACHE.clear()


def row(fmt: str | None) -> Family | None:
    """The row of `fmt` (a `Format` or its stored value), None when unknown or None."""
    return _ROWS.get(str(fmt)) if fmt is not None else None


def rows() -> Iterator[Family]:
    """Every row, in registration order (readers are tried in it: the first claim wins)."""
    return iter(tuple(_ROWS.values()))


def where(test: Callable[[Family], Any]) -> frozenset[Format]:
    """The formats whose row passes `test`."""
    return frozenset(r.format for r in rows() if test(r))


def folder_formats() -> frozenset[Format]:
    """Formats whose checkpoint is a folder: one catalog entry, its files as members."""
    if "folders" not in _CACHE:
        _CACHE["folders"] = where(lambda r: r.folder)
    folders: frozenset[Format] = _CACHE["folders"]
    return folders


def suffixes() -> tuple[str, ...]:
    """The file names discovery hands to the file readers: every row's `suffixes`."""
    if "suffixes" not in _CACHE:
        _CACHE["suffixes"] = tuple(dict.fromkeys(s for r in rows() for s in r.suffixes))
    found: tuple[str, ...] = _CACHE["suffixes"]
    return found


def extra_modules() -> tuple[str, ...]:
    """Modules outside the package that registered rows (the reader child imports them)."""
    return tuple(dict.fromkeys(r.module for r in rows() if r.module))


def resolve(ref: Ref) -> Any:
    """The object a row's reference names. Called by the layer that owns the part (formats
    for readers, fs for layouts, transforms' callers for splitters, usecases for loads)."""
    if not isinstance(ref, str):
        return ref
    if ref not in _RESOLVED:
        module, _, attribute = ref.partition(":")
        loaded = importlib.import_module(f"{_PACKAGE}.{module}")
        _RESOLVED[ref] = getattr(loaded, attribute) if attribute else loaded
    return _RESOLVED[ref]


_PACKAGE = __name__.rsplit(".", 2)[0]  # ckpt_daemon
_RESOLVED: dict[str, Any] = {}
