"""`ckpt split --layout json+h5`: the export Keras's original design describes (an architecture
as JSON, weights in HDF5, rebuilt with `model_from_json` + `load_weights`): `<stem>.json` (the
model config, byte for byte as the file stores it) and a weights file without optimizer state
or metric totals, in a layout `load_weights` reads, copied with H5Ocopy and verified dataset by
dataset as `transforms.split` does:
- of a Keras archive (`.keras`, Keras 3 or tf-keras): `<stem>.weights.h5`, the archive's own
  weights store;
- of a legacy full-model `.h5` written by tf-keras: `<stem>.legacy-weights.h5`, the layout
  `save_weights("x.h5")` writes (`layer_names`, `backend`, `keras_version` at the root, one
  group per layer with `weight_names`): its `model_weights` group made the root. `load_weights`
  of tf-keras and of Keras 3 read it (by that layout: a name ending `.weights.h5` would send
  them to the Keras 3 store reader instead).

Anything else is refused with the reason (`refusal`). Both files are written as temps, verified,
then given their names (weights first, config last); the caller's `check` (the load-and-predict
probe) sees the two temps before either is renamed.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import h5py

from ..core.card import WEIGHTS_KIND, export_weights_suffix
from ..core.errors import UsageError
from ..core.model import Format
from ..formats import detect, hdf5
from ..formats.keras_v3 import CONFIG_MEMBER, MAX_JSON_BYTES, WEIGHTS_MEMBER
from ..formats.window import open_member, read_member
from ..fs import fsops, hashing
from . import bounds, marker
from .split import (
    _STORE_DROP,
    _Drop,
    _expect,
    _refuse_tensorflow,
    check_unchanged,
    copy_marked,
    inference_path,
)

LAYOUT = "json+h5"
_KEEP_ALL = _Drop("", frozenset())  # a legacy file's model_weights: every layer group kept
_WEIGHTS_ONLY = "weights only: it stores no architecture to export as JSON"
_KERAS3_LEGACY = (
    "a legacy .h5 written by Keras 3: its model_config is in the legacy layout (no modules), "
    "which Keras 3's model_from_json cannot read: use `ckpt split` (a slim .h5 that load_model "
    "reads)"
)


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


def export_paths(
    source: Path, out: Path | None = None, fmt: Format | None = Format.KERAS_ZIP
) -> tuple[Path, Path]:
    """`e03.keras` → (`e03.json`, `e03.weights.h5`), `w.01.hdf5` (a legacy `.h5`) →
    (`w.01.json`, `w.01.legacy-weights.h5`), beside it or in `out`."""
    stem = inference_path(source, out).name.rsplit(".inference", 1)[0]
    folder = out if out is not None else source.parent
    return folder / f"{stem}.json", folder / f"{stem}{export_weights_suffix(fmt)}"


def refusal(fmt: Format | None, keras_version: str | None = None) -> str | None:
    """Why a checkpoint of `fmt` cannot be exported as json+h5 (None: it can)."""
    if fmt is Format.KERAS_LEGACY_H5 and not (keras_version or "").startswith(("1.", "2.")):
        return _KERAS3_LEGACY
    if fmt in (Format.KERAS_ZIP, Format.KERAS_LEGACY_H5):
        return None
    if fmt in (Format.KERAS_WEIGHTS_H5, Format.KERAS_LEGACY_WEIGHTS_H5):
        return _WEIGHTS_ONLY
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
    before = fsops.current_stat(root, [source])
    bounds.check_file(source)
    info = detect.read_checkpoint(source)
    fmt = info.format
    why = refusal(fmt, info.keras_version)
    if why is not None:
        raise UsageError(f"not exported as {LAYOUT}: {source} is {why}")
    config_path, weights_path = export_paths(source, out, fmt)
    write = _write_legacy if fmt is Format.KERAS_LEGACY_H5 else _write
    mark = marker.encode(WEIGHTS_KIND, source, source_hash)  # adopt() re-registers it so
    with (
        fsops.rewrite(root, config_path, like=source) as config_temp,
        fsops.rewrite(root, weights_path, like=source) as weights_temp,
    ):
        try:
            datasets = write(source, config_temp, weights_temp, mark)
            if check is not None:
                check(config_temp, weights_temp)
            hashes = hashing.hash_files([config_temp]), hashing.hash_files([weights_temp])
            sizes = config_temp.stat().st_size, weights_temp.stat().st_size
        except Exception as exc:
            check_unchanged(root, source, before, exc)
            raise
        check_unchanged(root, source, before)
    return ExportResult(source, config_path, weights_path, *sizes, *hashes, before.size, datasets)


def _write(source: Path, config_temp: Path, weights_temp: Path, mark: str) -> int:
    with open(source, "rb") as raw, zipfile.ZipFile(raw) as archive:
        config = read_member(archive, CONFIG_MEMBER, MAX_JSON_BYTES)
        _write_config(config_temp, config, CONFIG_MEMBER)
        with open_member(archive, raw, WEIGHTS_MEMBER) as window, hdf5.open_h5(window) as src:
            return copy_marked(src, weights_temp, _STORE_DROP, mark)


def _write_legacy(source: Path, config_temp: Path, weights_temp: Path, mark: str) -> int:
    with hdf5.open_h5(str(source)) as src:
        text = hdf5.attr_text(src, "model_config")
        weights = hdf5.member(src, "model_weights")
        if text is None or not isinstance(weights, h5py.Group):
            raise UsageError(f"not exported as {LAYOUT}: {source} is {_WEIGHTS_ONLY}")
        _write_config(config_temp, text.encode(), "model_config")
        return copy_marked(weights, weights_temp, _KEEP_ALL, mark)


def _write_config(temp: Path, config: bytes, what: str) -> None:
    with open(temp, "wb") as out:  # our own temp, named by fsops.rewrite
        out.write(config)
    _expect(temp.read_bytes() == config, what)
