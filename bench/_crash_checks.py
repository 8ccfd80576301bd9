"""What the crash campaign checks on disk and in the catalog, apart from how it kills.

Content equality is about what a checkpoint *holds*, not its bytes: a compressed file has other
bytes and the same datasets. So a file that is not byte-identical to its pristine copy is decoded
with h5py (inside a `.keras` zip: every member, the `.h5` ones decoded) and every group, dataset
(dtype, shape, values) and attribute is compared with the original's. Reading every value also
proves the file decodes fully. The catalog is read with the sqlite3 module directly (tables of
daemon/catalog/schema.py), read-only, never through the code under test.
"""

from __future__ import annotations

import io
import json
import os
import re
import sqlite3
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

TEMP_PREFIX = ".ckpt-tmp-"  # fs.temp_names.TEMP_PREFIX
TRASH_DIR = ".ckpt-trash"  # fs.fsops.TRASH_DIR
ARTIFACT_MARK = ".inference."  # transforms.split.inference_path
ZIP_MAGIC = b"PK\x03\x04"


# ---- content: decoded equality of HDF5 files and .keras archives ----


def content_problem(path: Path, truth: Path) -> str | None:
    """None if `path` holds what `truth` holds (same bytes, or the same decoded content)."""
    try:
        got = path.read_bytes()
    except OSError as exc:
        return f"unreadable: {exc}"
    want = truth.read_bytes()
    if got == want:
        return None
    try:
        if want.startswith(ZIP_MAGIC):
            return _zip_diff(got, want, artifact=False)
        with _h5(got) as a, _h5(want) as b:
            return _tree_diff(a, b, subset=False)
    except Exception as exc:  # any failure to decode is the finding
        return f"does not decode: {type(exc).__name__}: {_first_line(exc)}"


def artifact_problem(path: Path, source_truth: Path) -> str | None:
    """None if the inference artifact decodes fully and every dataset it holds equals the
    source checkpoint's dataset at the same place (it leaves the optimizer state out)."""
    try:
        got = path.read_bytes()
        want = source_truth.read_bytes()
        if want.startswith(ZIP_MAGIC):
            return _zip_diff(got, want, artifact=True)
        with _h5(got) as a, _h5(want) as b:
            return _tree_diff(a, b, subset=True)
    except Exception as exc:
        return f"does not decode: {type(exc).__name__}: {_first_line(exc)}"


def _h5(data: bytes) -> h5py.File:
    return h5py.File(io.BytesIO(data), "r")


def _zip_diff(got: bytes, want: bytes, *, artifact: bool) -> str | None:
    with zipfile.ZipFile(io.BytesIO(got)) as a, zipfile.ZipFile(io.BytesIO(want)) as b:
        if (bad := a.testzip()) is not None:
            return f"zip member {bad} fails its CRC"
        if artifact and (gone := sorted(set(b.namelist()) - set(a.namelist()))):
            return f"zip members missing: {gone}"  # (a marker member of ours may be added)
        if not artifact and a.namelist() != b.namelist():
            return f"zip members {a.namelist()} != {b.namelist()}"
        for name in b.namelist():
            mine, theirs = a.read(name), b.read(name)
            if name.endswith(".h5"):
                with _h5(mine) as x, _h5(theirs) as y:
                    if problem := _tree_diff(x, y, subset=artifact):
                        return f"{name}: {problem}"
            elif artifact and name == "config.json":
                json.loads(mine)  # the artifact drops compile_config: it must still parse
            elif mine != theirs:
                return f"zip member {name} differs"
    return None


def _tree_diff(a: h5py.File, b: h5py.File, *, subset: bool) -> str | None:
    ours, theirs = _objects(a), _objects(b)
    if subset:  # the datasets it shares with the source are the source's (a marker may be new)
        ours = {name: obj for name, obj in ours.items() if name in theirs}
        if not any(isinstance(obj, h5py.Dataset) for obj in ours.values()):
            return "no dataset of the source in it"
    elif ours.keys() != theirs.keys():
        gone, new = sorted(set(theirs) - set(ours)), sorted(set(ours) - set(theirs))
        return f"objects differ: missing {gone[:3]}, extra {new[:3]}"
    for name, obj in ours.items():
        other = theirs[name]
        if isinstance(obj, h5py.Dataset) != isinstance(other, h5py.Dataset):
            return f"{name}: group vs dataset"
        if isinstance(obj, h5py.Dataset):
            if (obj.dtype, obj.shape) != (other.dtype, other.shape):
                return f"{name}: {obj.dtype}{obj.shape} != {other.dtype}{other.shape}"
            if not _same(obj[()], other[()]):
                return f"{name}: values differ"
        if subset and isinstance(obj, h5py.Group):
            continue  # an artifact may drop group attributes (training_config)
        if problem := _attrs_diff(obj, other):
            return f"{name}: {problem}"
    return None


def _objects(f: h5py.File) -> dict[str, Any]:
    found: dict[str, Any] = {"/": f}

    def add(name: str, obj: Any) -> None:
        found[name] = obj

    f.visititems(add)
    return found


def _attrs_diff(a: Any, b: Any) -> str | None:
    if set(a.attrs) != set(b.attrs):
        return f"attributes {sorted(a.attrs)} != {sorted(b.attrs)}"
    for key in a.attrs:
        if not _same(a.attrs[key], b.attrs[key]):
            return f"attribute {key} differs"
    return None


def _same(x: Any, y: Any) -> bool:
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    if x.dtype.kind in "fc":
        return bool(np.array_equal(x, y, equal_nan=True))
    if x.dtype.kind == "O":
        return bool(x.tolist() == y.tolist())
    return x.tobytes() == y.tobytes()


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


# ---- the catalog, read directly ----


@dataclass
class Row:
    id: int
    path: str
    run_id: int
    status: str
    pinned: bool
    trash_paths: list[str]


@dataclass
class Catalog:
    rows: dict[str, Row]  # by path
    leases: list[tuple[int, str, str]]  # (run_id, holder, expires_at)
    planned: list[tuple[int, str, str]]  # (event id, action, path) still `planned`
    events: list[tuple[int, str, str, int | None]] = field(default_factory=list)
    last_event: int = 0  # the highest event id

    def event_ids(self, action: str, checkpoint_id: int, state: str | None = None) -> list[int]:
        return [
            key
            for key, act, st, cid in self.events
            if act == action and cid == checkpoint_id and (state is None or st == state)
        ]


def read_catalog(db: Path) -> Catalog:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as conn:
        rows = {}
        for key, path, run_id, status, pinned, details in conn.execute(
            "SELECT id, path, run_id, status, pinned, details FROM checkpoints"
        ):
            trash = (json.loads(details) if details else {}).get("trash") or {}
            rows[path] = Row(key, path, run_id, status, bool(pinned), list(trash.get("paths", [])))
        leases = list(  # held ones: a released lease keeps its row (and token), expired
            conn.execute(
                "SELECT run_id, holder, expires_at FROM leases"
                " WHERE expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
            )
        )
        planned = list(
            conn.execute("SELECT id, action, path FROM events WHERE state = 'planned' ORDER BY id")
        )
        events = list(
            conn.execute(
                "SELECT id, action, state, checkpoint_id FROM events "
                "WHERE action IN ('pin', 'trash', 'purge') ORDER BY id"
            )
        )
        (last_event,) = conn.execute("SELECT coalesce(max(id), 0) FROM events").fetchone()
    conn.close()
    return Catalog(rows, leases, planned, events, last_event)


def lease_pid(holder: str) -> int | None:
    """Our holders read `<actor> pid <N>` (usecases.pruner, usecases.artifacts)."""
    match = re.search(r"\bpid (\d+)", holder)
    return int(match.group(1)) if match else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---- the files ----


def walk_files(root: Path) -> Iterator[Path]:
    """Every non-directory entry below `root` (symlinks not followed)."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            yield Path(dirpath) / name


def temps(root: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        found += [Path(dirpath) / n for n in filenames + dirnames if n.startswith(TEMP_PREFIX)]
    return found


def trash_files(root: Path) -> list[Path]:
    trash = root / TRASH_DIR
    return [p for p in walk_files(trash)] if trash.is_dir() else []


def original_of_trashed(root: Path, trashed: Path) -> Path:
    """`<root>/.ckpt-trash/<batch>/<relative path>` was `<root>/<relative path>`."""
    parts = trashed.relative_to(root / TRASH_DIR).parts
    return root.joinpath(*parts[1:])
