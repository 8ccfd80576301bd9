"""The only real unpickler of a user's pickle, for the load children: allow-listed globals only.

A load child (`children.folder_load_probe`) must hand a library (DCP) the object a file pickles,
built with the library's real classes. That object is built here and nowhere else, in two
gates: first the opcodes (`pickle_ops.scan`, `pickle_ops.refusals`): every global the stream
names must be on the allow-list, every call must be of a named global, `getattr` only of an
allowed enum and a member name, before anything is built; then the unpickler itself, whose
`find_class` imports nothing but an allowed name and whose `getattr` is a lookup of an enum
member. The daemon never calls this: the modules it imports are the child's (torch).
"""

from __future__ import annotations

import _compat_pickle
import enum
import importlib
import io
import pickle
import zipfile
from typing import Any

from ..core.errors import CorruptCheckpoint, PickleRefused
from ..fs import beneath
from . import pickle_ops

_LEGACY_MAGIC = bytes.fromhex("80028a0a6cfc9c46f9206aa85019")  # as formats.torch_zip


def refusals(data: bytes, allowed: frozenset[str], enums: frozenset[str]) -> list[str]:
    """Why `data` may not be unpickled with `allowed` globals ([] when it may); a pickle that
    cannot be judged exactly is refused with the reason."""
    try:
        ops = pickle_ops.scan(data)
    except CorruptCheckpoint as exc:
        return [f"not a readable pickle ({exc})"]
    return pickle_ops.refusals(ops, allowed, enums)


def load(data: bytes, allowed: frozenset[str], enums: frozenset[str]) -> Any:
    """The object `data` pickles, built from the real `allowed` globals (see the module doc);
    Refused when the opcodes name or call anything else."""
    refused = refusals(data, allowed, enums)
    if refused:
        raise PickleRefused(f"names {', '.join(refused[:5])}: refused, nothing of it run")
    return _Unpickler(io.BytesIO(data), allowed, enums).load()


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: Any, allowed: frozenset[str], enums: frozenset[str]) -> None:
        super().__init__(file)
        self._allowed, self._enums = allowed, enums

    def find_class(self, module: str, name: str) -> Any:
        full = f"{module}.{name}"
        if full == pickle_ops.GETATTR and full in self._allowed:
            return self._enum_member
        if full not in self._allowed or "." in name:
            raise PickleRefused(f"names {full}: refused, nothing of it run")
        return getattr(importlib.import_module(module), name)

    def _enum_member(self, cls: Any, name: Any) -> Any:
        """`getattr(EnumClass, 'NAME')` as Python 3.11.0-3.11.3 pickles an enum member."""
        qualified = f"{getattr(cls, '__module__', '')}.{getattr(cls, '__qualname__', '')}"
        if (
            isinstance(cls, enum.EnumMeta)
            and qualified in self._enums
            and isinstance(name, str)
            and name in cls.__members__
        ):
            return cls[name]
        raise PickleRefused(f"getattr({qualified}, {name!r}): refused, nothing of it run")


def torch_file_refusals(path: str, allowed: set[str]) -> list[str]:
    """Why a torch file (a zip's `data.pkl`, a legacy file's pickles) may not go to
    `torch.load(weights_only=True)`, judged from its opcodes against torch's own allow-list
    (`allowed`, read from the torch of the child): the same rule as every pickle path, before
    torch's unpickler sees a byte. [] for a file that is neither (torch says what it is)."""
    names = set(allowed)
    for (old_module, old_name), (module, name) in _compat_pickle.NAME_MAPPING.items():
        if f"{module}.{name}" in allowed:  # protocol 2 writes `__builtin__.set`
            names.add(f"{old_module}.{old_name}")
    for old_module, module in _compat_pickle.IMPORT_MAPPING.items():
        names |= {old_module + n[len(module) :] for n in allowed if n.startswith(module + ".")}
    refused: list[str] = []
    for data in _pickles(path):
        refused += refusals(data, frozenset(names), frozenset())
    return refused


def _pickles(path: str) -> list[bytes]:
    with open(path, "rb") as fh:
        head = fh.read(len(_LEGACY_MAGIC))
        if head.startswith(b"PK"):
            with zipfile.ZipFile(fh) as archive:
                found = [n for n in archive.namelist() if n.endswith("/data.pkl")]
                return [archive.read(n) for n in found[:1]]
        if head == _LEGACY_MAGIC:
            fh.seek(0)
            return pickle_ops.split_stream(beneath.read_at_most(fh, pickle_ops.MAX_PICKLE_BYTES), 5)
    return []
