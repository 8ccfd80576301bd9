"""`ckpt split --layout json+h5`: the export Keras's original design describes, for use
outside a Keras 3 archive: `<stem>.json` (the model config, byte for byte as the file stores
it: what `model_from_json` reads) and `<stem>.weights.h5` (the weights without optimizer state
or metric totals, in the layout `load_weights` of the same Keras reads: the archive's own
weights store, copied with H5Ocopy and verified dataset by dataset as `transforms.split` does).

Only Keras archives (`.keras`, written by Keras 3 or tf-keras) are exported this way; anything
else is refused with the reason (`refusal`). Both files are written as temps, verified, then
given their names (weights first, config last); the caller's `check` (the load-and-predict
probe) sees the two temps before either is renamed.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import h5py

from ..core.card import WEIGHTS_KIND
from ..core.errors import UsageError
from ..core.model import Format
from ..formats import detect, hdf5
from ..formats.keras_v3 import CONFIG_MEMBER, MAX_JSON_BYTES, WEIGHTS_MEMBER
from ..formats.window import open_member, read_member
from ..fs import fsops, hashing
from . import bounds, marker
from .split import (
    _STORE_DROP,
    _check_unchanged,
    _copy_tree,
    _expect,
    _refuse_tensorflow,
    _verify_tree,
    inference_path,
)

LAYOUT = "json+h5"
_LEGACY = (
    "a legacy .h5: its weights are stored by layer name (model_weights/<layer>/...), and "
    "load_weights of a .weights.h5 reads Keras's own variable paths (layers/<class>_N/vars) "
    "that only Keras assigns: use `ckpt split` (a slim .h5 that load_model reads)"
)
_WEIGHTS_ONLY = "weights only: it stores no architecture to export as JSON"


@dataclass(frozen=True)
class ExportResult:
    source: Path
    config_path: Path  # <stem>.json
    weights_path: Path  # <stem>.weights.h5
    config_bytes: int
    weights_bytes: int
    config_hash: str
    weights_hash: str
    source_bytes: int
    datasets: int


def export_paths(source: Path, out: Path | None = None) -> tuple[Path, Path]:
    """`e03.keras` → (`e03.json`, `e03.weights.h5`), beside it or in `out`."""
    stem = inference_path(source, out).name.rsplit(".inference", 1)[0]
    folder = out if out is not None else source.parent
    return folder / f"{stem}.json", folder / f"{stem}.weights.h5"


def refusal(fmt: Format | None, keras_version: str | None = None) -> str | None:
    """Why a checkpoint of `fmt` cannot be exported as json+h5 (None: it can)."""
    if fmt is Format.KERAS_ZIP:
        return None
    if fmt in (Format.KERAS_WEIGHTS_H5, Format.KERAS_LEGACY_WEIGHTS_H5):
        return _WEIGHTS_ONLY
    if fmt is Format.KERAS_LEGACY_H5:
        return _LEGACY
    return f"a {fmt} checkpoint is not a Keras file: its weights live in a TF object graph"


def export(
    root: Path,
    source: Path,
    *,
    out: Path | None = None,
    source_hash: str | None = None,
    check: Callable[[Path, Path], None] | None = None,
) -> ExportResult:
    """Write `<stem>.json` and `<stem>.weights.h5` of `source` (below `root`) beside it or
    into `out`; `check(json_temp, weights_temp)` runs before they get their names (it raises to
    refuse them). Nothing at either name is ever replaced (fsops.WouldReplace). UsageError for
    what is not exported (`refusal`), fsops.Refused if `source` changed meanwhile,
    ArtifactMismatch if a copy does not verify."""
    _refuse_tensorflow(source)
    detect.refuse_outside_references(source)
    if out is not None and not out.is_dir():
        raise UsageError(f"{out} is not a folder")
    config_path, weights_path = export_paths(source, out)
    before = fsops.current_stat(root, [source])
    bounds.check_file(source)
    why = refusal(detect.read_checkpoint(source).format)
    if why is not None:
        raise UsageError(f"not exported as {LAYOUT}: {source} is {why}")
    mark = marker.encode(WEIGHTS_KIND, source, source_hash)  # adopt() re-registers it so
    with (
        fsops.rewrite(root, config_path, like=source) as config_temp,
        fsops.rewrite(root, weights_path, like=source) as weights_temp,
    ):
        try:
            datasets = _write(source, config_temp, weights_temp, mark)
            if check is not None:
                check(config_temp, weights_temp)
            hashes = hashing.hash_files([config_temp]), hashing.hash_files([weights_temp])
            sizes = config_temp.stat().st_size, weights_temp.stat().st_size
        except Exception as exc:
            _check_unchanged(root, source, before, exc)
            raise
        _check_unchanged(root, source, before)
    return ExportResult(source, config_path, weights_path, *sizes, *hashes, before.size, datasets)


def _write(source: Path, config_temp: Path, weights_temp: Path, mark: str) -> int:
    with open(source, "rb") as raw, zipfile.ZipFile(raw) as archive:
        config = read_member(archive, CONFIG_MEMBER, MAX_JSON_BYTES)
        with open(config_temp, "wb") as out:  # our own temp, named by fsops.rewrite
            out.write(config)
        _expect(config_temp.read_bytes() == config, CONFIG_MEMBER)
        with open_member(archive, raw, WEIGHTS_MEMBER) as window, hdf5.open_h5(window) as src:
            with h5py.File(weights_temp, "w", locking=False) as dst:
                _copy_tree(src, dst, _STORE_DROP)
                dst.attrs[marker.ATTRIBUTE] = mark
            with h5py.File(weights_temp, "r", locking=False) as dst:
                _expect(dst.attrs.get(marker.ATTRIBUTE) == mark, "the artifact marker")
                return _verify_tree(src, dst, _STORE_DROP, added=frozenset({marker.ATTRIBUTE}))
