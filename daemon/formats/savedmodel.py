"""SavedModel directories (`saved_model.pb` + `variables/`): metadata only, TF never imported here.

Written by `model.export()` / `tf.saved_model.save()` (Keras 3) and tf-keras `model.save(dir)`.
TF writes `variables/` first, then `saved_model.pb`, then `fingerprint.pb` last (each renamed
into place), so a present `saved_model.pb` without its variables index means "still writing".
Signatures and variables come from `formats.tf_variables`, which only parses the protos and the
variables index in-process (no TensorFlow): `tf.saved_model.load` would rebuild the whole graph
for nothing.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..core.errors import CorruptCheckpoint, NotACheckpoint, NotReady, UnreadableCheckpoint
from ..core.model import CheckpointInfo, Format, Kind
from ..fs import beneath
from . import tf_checkpoint, tf_variables

_GRAPH_FILES = ("saved_model.pb", "saved_model.pbtxt")


def is_savedmodel(path: Path) -> bool:
    return path.is_dir() and any((path / name).is_file() for name in _GRAPH_FILES)


def _graph_file(path: Path) -> Path:
    for name in _GRAPH_FILES:
        if (path / name).is_file():
            return path / name
    if (path / "variables").is_dir():
        raise NotReady("saved_model.pb not written yet")
    raise NotACheckpoint(f"{path.name}: no saved_model.pb")


def _file_notes(path: Path, graph: Path, data_bytes: int, n_shards: int) -> list[str]:
    total = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    notes = [
        f"{graph.name} {graph.stat().st_size:,} B; variables {data_bytes:,} B in "
        f"{n_shards} shard(s); {total:,} B in all"
    ]
    if not (path / "fingerprint.pb").is_file():
        notes.append(
            "no fingerprint.pb (TF writes it last): still being written, or saved by "
            "a TensorFlow older than 2.12"
        )
    if (path / "keras_metadata.pb").is_file():
        notes.append(
            "keras_metadata.pb present: a tf-keras model.save(); reload it with "
            "tf_keras.models.load_model"
        )
    return notes


def read(path: Path, *, timeout: float = 120.0) -> CheckpointInfo:
    """Metadata of the SavedModel directory `path` (`timeout` kept for callers: the read is
    in-process and bounded by its size caps)."""
    del timeout
    graph = _graph_file(path)
    problem = beneath.tree_problem(path)  # a link inside is refused, whatever it points at
    if problem:
        raise UnreadableCheckpoint(f"{problem}: not followed, the SavedModel is not read")
    try:
        if graph.stat().st_size == 0:
            raise CorruptCheckpoint(f"{graph.name} is empty")
        shards = tf_checkpoint.check_files(path / "variables" / "variables")
        data_bytes = sum(p.stat().st_size for p in shards)
        notes = _file_notes(path, graph, data_bytes, len(shards))
    except FileNotFoundError as exc:  # a rewrite or a deletion under our feet
        raise NotReady(f"{Path(exc.filename or path).name} vanished during the read") from None
    try:
        result = tf_variables.probe_savedmodel(path)
    except (OSError, beneath.NotARegularFile) as exc:
        raise tf_variables.read_problem(path, exc) from None
    if result["checkpoint"] is None:
        raise CorruptCheckpoint("variables/variables.index missing")
    info = tf_checkpoint.describe(
        result["checkpoint"],
        fmt=Format.SAVED_MODEL,
        kind=Kind.FULL,
        data_bytes=data_bytes,
        dedupe=True,
    )
    if graph.name == "saved_model.pbtxt":  # the text format: not parsed here
        notes.append("saved_model.pbtxt (text format): signatures not read")
    if result["tensorflow_version"]:
        notes.append("written by TensorFlow " + ", ".join(result["tensorflow_version"]))
    # `__saved_model_init_op` is TF's own initializer entry, not something a user can call.
    signatures = tuple(s for s in result["signatures"] if not s.startswith("__"))
    return dataclasses.replace(
        info, signatures=signatures, backend="tensorflow", notes=(*notes, *info.notes)
    )
