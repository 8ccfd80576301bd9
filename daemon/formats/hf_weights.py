"""The weights of a Hugging Face folder: one `model.safetensors` / `pytorch_model.bin`, or shards
named by a `*.index.json` (`weight_map`: tensor -> shard file, `metadata.total_size`).

Each weights file is read by its own format's reader (`formats.file_detect`: a safetensors header
consistent with the file's size, a torch zip with its central directory and storages), headers
and pickled structure only. A sharded model is complete when every shard its index names is
there, is itself complete, and holds every tensor the index puts in it; what is missing is named
(the indexer says `incomplete` while the folder is young, `corrupt` once it has settled).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import CorruptCheckpoint, NotACheckpoint
from ..core.model import CheckpointInfo, Layer
from ..fs import beneath
from . import file_detect
from .torch_state import MAX_LAYERS

MAX_INDEX_BYTES = 64 << 20  # a 400B-parameter model's index is ~2 MB
# What HF writes, preferred first: safetensors since transformers 4.35, `.bin` before.
SINGLE_FILES: tuple[str, ...] = ("model.safetensors", "pytorch_model.bin")
SINGLE_FILES += ("adapter_model.safetensors", "adapter_model.bin")
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


@dataclass
class Weights:
    """The model's tensors, gathered from every weights file."""

    files: list[str] = field(default_factory=list)  # the weights files read, in order
    layers: list[Layer] = field(default_factory=list)
    n_params: int = 0
    nbytes: int = 0
    backend: str | None = None
    notes: list[str] = field(default_factory=list)
    index: str | None = None  # the index file of a sharded model


def read_file(path: Path, root: Path | None) -> CheckpointInfo:
    """One file of the folder, read by its format's reader; every problem names the file."""
    try:
        return file_detect.read_file(path, root)
    except FileNotFoundError:
        raise CorruptCheckpoint(f"{path.name} is missing (it vanished during the read)") from None
    except (CorruptCheckpoint, NotACheckpoint) as exc:
        raise CorruptCheckpoint(f"{path.name}: {exc}") from None


def read_json(path: Path, root: Path | None, limit: int = MAX_INDEX_BYTES) -> dict[str, Any]:
    """A JSON object file of the folder (an index, config.json, trainer_state.json), bounded."""
    try:
        data = beneath.read_bounded(path, limit, root)
    except beneath.NotARegularFile as exc:
        raise CorruptCheckpoint(str(exc)) from None
    if data is None:
        raise CorruptCheckpoint(f"{path.name} is larger than {limit} bytes: refused unread")
    try:
        value = json.loads(data)
    except RecursionError:  # the JSON decoder recurses once a level: ~1,000 at most
        raise CorruptCheckpoint(f"{path.name} is JSON nested too deep to read: refused") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptCheckpoint(f"{path.name} is not JSON (truncated?): {exc}") from None
    if not isinstance(value, dict):
        raise CorruptCheckpoint(f"{path.name} is not a JSON object")
    return value


def read_weights(folder: Path, names: frozenset[str], root: Path | None) -> Weights:
    """The weights of `folder` (whose file names are `names`); CorruptCheckpoint if none."""
    index = next((n for n in INDEX_FILES if n in names), None)
    if index is not None:
        return _sharded(folder, index, names, root)
    single = next((n for n in SINGLE_FILES if n in names), None)
    if single is None:
        for name in (*INDEX_FILES, *SINGLE_FILES):
            _refuse_link(folder, name)
        raise CorruptCheckpoint(
            "no weights file (model.safetensors, pytorch_model.bin or a sharded index): "
            "not written yet, or removed"
        )
    weights = Weights()
    _add(weights, single, read_file(folder / single, root))
    others = [n for n in SINGLE_FILES if n in names and n != single]
    if others:
        weights.notes.append(f"{single} read; {', '.join(others)} also present")
    return weights


def _sharded(folder: Path, index: str, names: frozenset[str], root: Path | None) -> Weights:
    doc = read_json(folder / index, root)
    weight_map = doc.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CorruptCheckpoint(f"{index} has no weight_map")
    by_shard: dict[str, set[str]] = {}
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or "/" in shard or shard in ("", ".", ".."):
            raise CorruptCheckpoint(f"{index}: tensor {tensor} names shard {shard!r}: refused")
        by_shard.setdefault(shard, set()).add(str(tensor))
    missing = sorted(s for s in by_shard if s not in names)
    for shard in missing:
        _refuse_link(folder, shard)
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CorruptCheckpoint(
            f"shard {missing[0]}{more} named by {index} is missing "
            f"({len(by_shard) - len(missing)} of {len(by_shard)} shards present)"
        )
    weights = Weights(index=index)
    for shard in sorted(by_shard):
        info = read_file(folder / shard, root)
        present = {w.name for layer in info.layers for w in layer.weights}
        absent = sorted(by_shard[shard] - present)
        if absent and len(present) < MAX_LAYERS:
            raise CorruptCheckpoint(
                f"shard {shard} lacks {len(absent)} tensor(s) {index} puts in it "
                f"(first: {absent[0]})"
            )
        _add(weights, shard, info)
    total = (doc.get("metadata") or {}).get("total_size") if isinstance(doc, dict) else None
    if isinstance(total, int) and total != weights.nbytes:
        weights.notes.append(
            f"{index} says total_size {total:,} B, the shards' tensors hold {weights.nbytes:,} B"
        )
    return weights


def _refuse_link(folder: Path, name: str) -> None:
    """A weights file the folder's listing left out because it is a symlink (or a FIFO...):
    say so, rather than "missing"."""
    what = beneath.not_regular(folder / name)
    if what not in (None, "missing"):
        raise CorruptCheckpoint(f"{name} is {what}: refused, never followed or read")


def _add(weights: Weights, name: str, info: CheckpointInfo) -> None:
    weights.files.append(name)
    weights.n_params += info.n_params or 0
    weights.nbytes += info.weights_bytes or 0
    weights.backend = weights.backend or info.backend
    weights.layers.extend(info.layers)
    weights.notes.extend(f"{name}: {note}" for note in info.notes)
