"""Split a checkpoint into a resume artifact (the original, never modified) and an inference
artifact: the same model without its optimizer state (about 1/3 of an Adam checkpoint).

Only h5py, zipfile and json;
TensorFlow is never imported. Kept subtrees are copied with `Group.copy` (H5Ocopy: chunks and
attributes move inside the HDF5 library, never decoded into Python). Nothing is deleted in place:
HDF5 does not give the space of a deleted group back. Before the artifact gets its name (through
`fsops.rewrite`), every kept dataset is compared with its source slab by slab, so memory stays
bounded whatever the size of the file, and the source must not have changed meanwhile.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, Any

import h5py
import numpy as np

from ..core.errors import ArtifactMismatch, CorruptCheckpoint, UsageError
from ..core.model import FileStat, Format
from ..formats import detect, hdf5, savedmodel
from ..formats.keras_v3 import CONFIG_MEMBER, WEIGHTS_MEMBER
from ..formats.window import open_member
from ..fs import fsops, hashing, temp_names
from ..fs.discovery import is_data_shard
from . import bounds, marker
from .h5_copy import SLAB_BYTES, chunk_shape, grid

_CHUNK = 1 << 20
_SUFFIXES = (".weights.h5", ".keras", ".hdf5", ".h5")  # longest first: ".weights.h5" ⊃ ".h5"
_TF_REASON = (
    "its model weights and optimizer state cannot be told apart without the object graph and "
    "TensorFlow (Keras 3 even stores trainable weights under optimizer/)"
)


@dataclass(frozen=True)
class SplitResult:
    source: Path
    path: Path  # the inference artifact written
    bytes: int
    hash: str  # fs.hashing.hash_files([path])
    source_bytes: int
    datasets: int  # datasets copied and verified


@dataclass(frozen=True)
class _Drop:
    """What the inference artifact leaves out of an HDF5 file."""

    state: str  # the optimizer-state group: without it there is nothing to split
    members: frozenset[str]  # top-level members left out (the state group among them)
    attrs: frozenset[str] = frozenset()  # root attributes left out


# Keras 3 weights store (`.weights.h5`, and `model.weights.h5` inside a `.keras`); tf-keras's
# `.keras` also keeps metric totals under /metrics, training state as well.
_STORE_DROP = _Drop("optimizer", frozenset({"optimizer", "metrics"}))


def _legacy_drop(keep_compile: bool) -> _Drop:
    # Without training_config, load_model(compile=True) just returns an uncompiled model (§2).
    attrs = frozenset() if keep_compile else frozenset({"training_config"})
    return _Drop("optimizer_weights", frozenset({"optimizer_weights"}), attrs)


def inference_path(source: Path, out_dir: Path | None = None) -> Path:
    """`e03.keras` → `e03.inference.keras`, `w.02.weights.h5` → `w.02.inference.weights.h5`:
    the suffix Keras dispatches on is kept, so the artifact loads like the original."""
    name = source.name
    suffix = next((s for s in _SUFFIXES if name.lower().endswith(s) and name != s), None)
    if suffix is None:
        stem, ext = source.stem, source.suffix
    else:
        stem, ext = name[: -len(suffix)], name[-len(suffix) :]
    return (out_dir if out_dir is not None else source.parent) / f"{stem}.inference{ext}"


def split(
    root: Path,
    source: Path,
    *,
    out: Path | None = None,
    keep_compile: bool = False,
    replacing: fsops.Identity | None = None,
    source_hash: str | None = None,
) -> SplitResult:
    """Write the inference artifact of `source` (below `root`) beside it or into `out`.

    Nothing at the artifact's name is replaced unless it is `replacing` (this checkpoint's own
    artifact, as the caller found it) still unchanged (fsops.WouldReplace, exit 2). The
    artifact carries a marker (`transforms.marker`: kind, `source`, `source_hash`) and the
    source's mode and times.

    Raises UsageError for what is not split (TF formats, files without optimizer state, files
    beyond `bounds`), fsops.Refused if `source` changed meanwhile or a path leaves `root`,
    ArtifactMismatch if the copy does not verify. In every failure the final name is left as
    it was.
    """
    _refuse_tensorflow(source)
    detect.refuse_outside_references(source)  # a rewrite would copy bytes from outside the root
    if out is not None and not out.is_dir():
        raise UsageError(f"{out} is not a folder")
    final = inference_path(source, out)
    before = fsops.current_stat(root, [source])  # also refuses a source outside `root`
    mark = marker.encode("inference", source, source_hash)
    bounds.check_file(source)  # before any reader walks a hostile file
    write = _writer(detect.read_checkpoint(source).format, source, keep_compile, mark)
    with fsops.rewrite(root, final, like=source, replacing=replacing) as temp:
        try:
            datasets = write(source, temp)
            digest, size = hashing.hash_files([temp]), temp.stat().st_size
        except Exception as exc:
            check_unchanged(root, source, before, exc)  # a rewrite under us explains the error
            raise
        check_unchanged(root, source, before)  # the last look, right before the rename
    return SplitResult(source, final, size, digest, before.size, datasets)


def _refuse_tensorflow(source: Path) -> None:
    """TF checkpoints and SavedModels are not split (`_TF_REASON`)."""
    if source.is_dir():
        if savedmodel.is_savedmodel(source):
            raise UsageError(
                f"not split: {source} is a SavedModel: its variables are a TF "
                f"checkpoint, and {_TF_REASON}"
            )
        raise UsageError(f"not split: {source} is a folder, not a checkpoint file")
    name = source.name
    prefix_only = not source.exists() and source.with_name(f"{name}.index").exists()
    if name.endswith(".index") or is_data_shard(name) or prefix_only:
        raise UsageError(f"not split: {source} is a TensorFlow checkpoint: {_TF_REASON}")


def _writer(
    fmt: Format, source: Path, keep_compile: bool, mark: str
) -> Callable[[Path, Path], int]:
    if fmt is Format.KERAS_ZIP:
        return partial(_split_archive, keep_compile=keep_compile, mark=mark)
    if fmt is Format.KERAS_WEIGHTS_H5:
        return partial(_split_h5, drop=_STORE_DROP, mark=mark)
    if fmt is Format.KERAS_LEGACY_H5:
        return partial(_split_h5, drop=_legacy_drop(keep_compile), mark=mark)
    if fmt is Format.KERAS_LEGACY_WEIGHTS_H5:
        raise _nothing_to_split(source)
    raise UsageError(f"not split: {source} is a {fmt} checkpoint: {_TF_REASON}")


def _nothing_to_split(source: Path) -> UsageError:
    return UsageError(f"nothing to split: {source} has no optimizer state")


def check_unchanged(
    root: Path, source: Path, before: FileStat, cause: BaseException | None = None
) -> None:
    try:
        now: FileStat | None = fsops.current_stat(root, [source])
    except FileNotFoundError:
        now = None
    if now != before:
        raise fsops.Refused(f"{source} changed while being split: artifact discarded") from cause


# ---- HDF5 files: legacy full models, Keras 3 weights stores ----


def _split_h5(source: Path, temp: Path, drop: _Drop, mark: str) -> int:
    with hdf5.open_h5(str(source)) as src:
        if drop.state not in src:
            raise _nothing_to_split(source)
        return copy_marked(src, temp, drop, mark)


def copy_marked(src: h5py.Group, temp: Path, drop: _Drop, mark: str) -> int:
    """`src` without `drop` as the new HDF5 file `temp`, our marker `mark` at its root; then
    read back from disk and verified (`_verify_tree`): the datasets compared."""
    with h5py.File(temp, "w-", locking=False) as dst:
        _copy_tree(src, dst, drop)
        dst.attrs[marker.ATTRIBUTE] = mark
    with h5py.File(temp, "r", locking=False) as dst:  # verify what is on disk
        _expect(dst.attrs.get(marker.ATTRIBUTE) == mark, "the artifact marker")
        return _verify_tree(src, dst, drop, added=frozenset({marker.ATTRIBUTE}))


def _copy_tree(src: h5py.Group, dst: h5py.File, drop: _Drop) -> None:
    # The root cannot be H5Ocopy'd onto another file's root: its attributes are recreated with
    # their stored HDF5 type (string encoding, shape), everything below it is copied whole.
    for name in src.attrs:
        if name not in drop.attrs:
            attr = src.attrs.get_id(name)
            dst.attrs.create(name, src.attrs[name], shape=attr.shape, dtype=attr.dtype)
    for key in src:
        if key not in drop.members:
            src.copy(src[key], dst, name=key)


def _verify_tree(
    src: h5py.Group, dst: h5py.File, drop: _Drop, added: frozenset[str] = frozenset()
) -> int:
    """Compare every kept object: kind, attributes, and each dataset's dtype, shape and data
    (`added`: root attributes only the artifact has, checked by the caller)."""
    _expect(_same_attrs(src.attrs, dst.attrs, drop.attrs, added), "root attributes")
    kept = [key for key in src if key not in drop.members]
    _expect(list(dst) == kept, f"top-level members {list(dst)} instead of {kept}")
    objects = _objects(src, drop)
    _expect(objects == _objects(dst, drop), "the objects below the top-level members")
    slabs, datasets = _SlabReader(), 0
    for path, kind, n_attrs in objects:
        if n_attrs:  # most objects have none: opening each one would double the verify time
            _expect(_same_attrs(src[path].attrs, dst[path].attrs), f"attributes of /{path}")
        if kind == h5py.h5o.TYPE_DATASET:
            _verify_dataset(path, src[path], dst[path], slabs)
            datasets += 1
    return datasets


def _objects(f: h5py.Group, drop: _Drop) -> list[tuple[str, int, int]]:
    """(path, object type, number of attributes) of every object outside the dropped members,
    from one walk in the HDF5 library (each object once, in name order)."""
    found: list[tuple[str, int, int]] = []

    def visit(name: bytes, info: Any) -> None:
        path = name.decode()
        if path.split("/", 1)[0] not in drop.members:
            found.append((path, info.type, info.num_attrs))

    h5py.h5o.visit(f.id, visit, info=True)
    return found


class _SlabReader:
    """Two slab buffers, reused for every dataset: memory stays flat whatever the file holds."""

    def __init__(self) -> None:
        # The most of one dataset held in memory at a time, per side. Bigger slabs gain nothing
        # measurable; with 4 MiB the splitter's peak RSS is the same for a 30 MB and a 300 MB model.
        self.buffers = (np.empty(SLAB_BYTES, np.uint8), np.empty(SLAB_BYTES, np.uint8))

    def same(self, s: h5py.Dataset, d: h5py.Dataset, sel: tuple[Any, ...], shape: Any) -> bool:
        n = math.prod(shape) * s.dtype.itemsize
        if n == 0:
            return True
        for dataset, buffer in zip((s, d), self.buffers, strict=True):
            out = buffer[:n].view(s.dtype).reshape(shape)
            if shape == s.shape:  # the whole dataset in one slab: skip h5py's selection layer
                dataset.id.read(h5py.h5s.ALL, h5py.h5s.ALL, out)
            else:
                dataset.read_direct(out, source_sel=sel)
        a, b = self.buffers[0][:n], self.buffers[1][:n]
        if n % 8 == 0:  # the comparison's temporary is one bool per element: make them few
            a, b = a.view(np.uint64), b.view(np.uint64)
        # Bytes, not values: a NaN weight must compare equal to itself, -0.0 must stay -0.0.
        return np.array_equal(a, b)


def _verify_dataset(path: str, s: h5py.Dataset, d: h5py.Dataset, slabs: _SlabReader) -> None:
    _expect(s.dtype == d.dtype and s.shape == d.shape, f"/{path} dtype or shape")
    decoded = s.dtype.hasobject or s.dtype.subdtype is not None  # not a flat run of bytes
    shape = s.shape or ()
    if not math.prod(shape):
        return  # no element to compare
    for _offset, sel in grid(shape, chunk_shape(shape, s.dtype.itemsize)):  # slabs in order
        sizes = tuple(part.stop - part.start for part in sel)
        same = _same(s[sel], d[sel]) if decoded else slabs.same(s, d, sel, sizes)
        _expect(same, f"/{path} data")


def _same(a: Any, b: Any) -> bool:
    """Attribute values and variable-length strings (h5py decodes them to bytes or str)."""
    x, y = np.asarray(a), np.asarray(b)
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    if x.dtype.hasobject:
        return bool(x.tolist() == y.tolist())
    return x.tobytes() == y.tobytes()  # small: attributes, not weights


def _same_attrs(
    a: Any, b: Any, dropped: frozenset[str] = frozenset(), added: frozenset[str] = frozenset()
) -> bool:
    names = sorted(name for name in a if name not in dropped)
    if sorted(name for name in b if name not in added) != names:
        return False
    return all(a.get_id(n).dtype == b.get_id(n).dtype and _same(a[n], b[n]) for n in names)


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise ArtifactMismatch(f"inference artifact differs from its source: {what}")


# ---- Keras 3 `.keras` archives ----


def _split_archive(source: Path, temp: Path, keep_compile: bool, mark: str) -> int:
    comment = marker.zip_comment(mark)
    with open(source, "rb") as raw, zipfile.ZipFile(raw) as archive:
        config = _config_bytes(archive, keep_compile)
        with open_member(archive, raw, WEIGHTS_MEMBER) as window, hdf5.open_h5(window) as src:
            if _STORE_DROP.state not in src:
                raise _nothing_to_split(source)
            # The new `model.weights.h5` beside the artifact, named like fsops temps (with our
            # pid), so `remove_stale_temps` takes it only after a crash.
            prefix, suffix = temp_names.temp_prefix(), f"-{WEIGHTS_MEMBER}"
            with tempfile.NamedTemporaryFile(
                dir=temp.parent, prefix=prefix, suffix=suffix
            ) as inner:
                with h5py.File(inner.name, "w", locking=False) as dst:
                    _copy_tree(src, dst, _STORE_DROP)
                members: dict[str, IO[bytes]] = {WEIGHTS_MEMBER: inner}
                members[CONFIG_MEMBER] = io.BytesIO(config)
                rezip(temp, archive, members, comment)
            return _verify_archive(temp, archive, config, src, comment)


def _config_bytes(archive: zipfile.ZipFile, keep_compile: bool) -> bytes:
    data = archive.read(CONFIG_MEMBER)
    if keep_compile:
        return data
    config = json.loads(data)
    if not isinstance(config, dict):
        raise CorruptCheckpoint(f"{CONFIG_MEMBER} in the archive is not a JSON object")
    # With compile_config null, load_model(compile=True) returns the model uncompiled and
    # silently (§2); a kept one would build a fresh optimizer and warn about its variables.
    config["compile_config"] = None
    return json.dumps(config).encode()  # as Keras writes it: json.dumps with the defaults


def rezip(
    temp: Path, archive: zipfile.ZipFile, members: dict[str, IO[bytes]], comment: bytes
) -> None:
    """`archive` as `temp`: every member in its order, STORED (as Keras writes them), streamed;
    those in `members` with those bytes instead of their own; `comment` the archive's."""
    with zipfile.ZipFile(temp, "x", zipfile.ZIP_STORED, allowZip64=True) as out:
        out.comment = comment
        for info in archive.infolist():
            entry = zipfile.ZipInfo(info.filename, info.date_time)
            entry.external_attr, entry.create_system = info.external_attr, info.create_system
            entry.comment = info.comment
            # zipfile writes the local header before the data: it needs the size up front to
            # choose zip64 (members over 2 GiB), and cannot switch afterwards.
            data = members.get(info.filename)
            if data is None:
                entry.file_size = info.file_size
                with archive.open(info) as r, out.open(entry, "w") as w:
                    shutil.copyfileobj(r, w, _CHUNK)
            else:
                entry.file_size = data.seek(0, os.SEEK_END)
                data.seek(0)
                with out.open(entry, "w") as w:
                    shutil.copyfileobj(data, w, _CHUNK)


def _verify_archive(
    temp: Path, archive: zipfile.ZipFile, config: bytes, src: h5py.File, comment: bytes
) -> int:
    with open(temp, "rb") as raw, zipfile.ZipFile(raw) as out:
        _expect(out.comment == comment, "the artifact marker")
        infos = out.infolist()
        _expect([i.filename for i in infos] == archive.namelist(), "archive members")
        _expect(all(i.compress_type == zipfile.ZIP_STORED for i in infos), "a member not STORED")
        for info in infos:
            with out.open(info) as got:  # read to the end: zipfile checks the CRC, as Keras does
                while got.read(_CHUNK):
                    pass
            theirs = archive.getinfo(info.filename)
            if info.filename == CONFIG_MEMBER:
                _expect(out.read(info) == config, CONFIG_MEMBER)
            elif info.filename != WEIGHTS_MEMBER:  # copied bytes: the same size and CRC
                _expect((info.file_size, info.CRC) == (theirs.file_size, theirs.CRC), info.filename)
        with open_member(out, raw, WEIGHTS_MEMBER) as window, hdf5.open_h5(window) as dst:
            return _verify_tree(src, dst, _STORE_DROP)
