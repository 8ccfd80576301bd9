"""TensorBoard event files (`events.out.tfevents.*`), read without TensorFlow or tensorboard.

An event file is TFRecord-framed `Event` protobufs (`core.protowire`). We decode only what
scalar metrics need (field numbers from tensorflow/core/util/event.proto, framework/summary.proto
and framework/tensor.proto):

    Event        {double wall_time = 1; int64 step = 2; Summary summary = 5}
    Summary      {repeated Value value = 1}
    Value        {string tag = 1; float simple_value = 2; TensorProto tensor = 8;
                  SummaryMetadata metadata = 9}
    SummaryMetadata {PluginData plugin_data = 1}   PluginData {string plugin_name = 1}
    TensorProto  {DataType dtype = 1; TensorShapeProto tensor_shape = 2; bytes tensor_content = 4;
                  float_val = 5; double_val = 6; int_val = 7; int64_val = 10; half_val = 13}

Keras 3's and tf-keras's `TensorBoard` callback write `tf.summary.scalar`: a float32 scalar
tensor in `tensor_content`, plugin "scalars"; older writers use `simple_value`. Measured on real
runs: `<log_dir>/train/` holds `epoch_loss`, `epoch_accuracy`, `epoch_learning_rate` (Keras 3)
with the 0-based epoch as the event's step; `<log_dir>/validation/` holds `epoch_loss`, ... and
`evaluation_loss_vs_iterations` keyed by the training step; `update_freq='batch'` or N adds
`batch_loss`, ... keyed by step.

Data CRCs are checked for the records whose values we use (a pure-Python CRC costs ~0.16 s per
MiB; a graph or histogram record we skip is never checked). A bad CRC or an incomplete last
record (a live writer) ends the file: what came before is kept, with a note.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..core.log_sniff import NOT_LOGS
from ..core.protowire import (
    FIXED32,
    FIXED64,
    LENGTH,
    VARINT,
    WireError,
    as_int32,
    as_int64,
    fields,
    repeated,
    split_tfrecords,
)
from ..core.tb_scalars import Scalar
from ..core.training_metrics import MAX_READ_BYTES
from .run_index import RunIndex, as_index

EVENT_FILE_PREFIX = "events.out.tfevents."
MAX_RECORDS = 200_000  # per file; a batch-level log of 200k steps is still read in ~1 s
MAX_RECORD_BYTES = MAX_READ_BYTES
MAX_NOTES_PER_FILE = 5
MAX_TAG_CHARS = 256
SCALARS_PLUGIN = "scalars"

# DataType enum values (tensorflow/core/framework/types.proto) -> struct format of one element.
_ELEMENT = {1: "<f", 2: "<d", 3: "<i", 9: "<q", 19: "<e"}
_BFLOAT16 = 14
# What tf.summary.scalar writes: dtype DT_FLOAT, an empty shape, 4 bytes of tensor_content.
_F32_SCALAR = bytes([1 << 3, 1, 2 << 3 | 2, 0, 4 << 3 | 2, 4])
_SINGLE_WIRE = {0: VARINT, 4: FIXED32, 8: FIXED64}  # an unpacked element's wire type, by width
_VALUE_FIELDS = {5: (1, 4), 6: (2, 8), 7: (3, 0), 10: (9, 0), 13: (19, 0)}  # field: dtype, width


@dataclass(frozen=True)
class EventScalars:
    scalars: tuple[Scalar, ...]
    notes: tuple[str, ...]


@dataclass
class _Decoder:
    """The state of one file's decoding: which plugin each tag belongs to (TensorFlow writes
    a tag's metadata with its first value only), and the notes so far."""

    label: str
    plugins: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    dropped_notes: int = 0

    def note(self, text: str) -> None:
        if len(self.notes) < MAX_NOTES_PER_FILE:
            self.notes.append(f"{self.label}: {text}")
        else:
            self.dropped_notes += 1

    def finished_notes(self) -> tuple[str, ...]:
        more = [f"{self.label}: {self.dropped_notes} more problems"] if self.dropped_notes else []
        return (*self.notes, *more)


def decode_events(data: bytes, label: str, max_records: int = MAX_RECORDS) -> EventScalars:
    """The scalar values in an event file's bytes, in file order. Never raises on bad bytes."""
    decoder = _Decoder(label)
    framing = split_tfrecords(data, max_records, MAX_RECORD_BYTES)
    out: list[Scalar] = []
    for index, record in enumerate(framing.records):
        try:
            found = _event_scalars(record.data, decoder)
        except (WireError, struct.error, UnicodeDecodeError) as exc:
            if not record.intact:
                decoder.note(f"bad CRC in record {index} (byte {record.offset}); rest ignored")
                return EventScalars(tuple(out), decoder.finished_notes())
            decoder.note(f"record {index} is not an Event ({exc}), skipped")
            continue
        if found and not record.intact:
            decoder.note(f"bad CRC in record {index} (byte {record.offset}); rest ignored")
            return EventScalars(tuple(out), decoder.finished_notes())
        out += found
    if framing.problem is not None:
        tail = "kept what came before (a writer may be mid-record)" if framing.truncated else ""
        decoder.note(f"{framing.problem}; {tail or 'rest ignored'}")
    return EventScalars(tuple(out), decoder.finished_notes())


def _event_scalars(buf: bytes, decoder: _Decoder) -> list[Scalar]:
    wall_time, step = 0.0, 0
    summaries: list[bytes] = []
    for number, wire, value in fields(buf):
        if number == 1 and wire == FIXED64:
            assert isinstance(value, bytes)
            (wall_time,) = struct.unpack("<d", value)
        elif number == 2 and wire == VARINT:
            assert isinstance(value, int)
            step = as_int64(value)
        elif number == 5 and wire == LENGTH:
            assert isinstance(value, bytes)
            summaries.append(value)
    out: list[Scalar] = []
    for summary in summaries:
        for number, wire, value in fields(summary):
            if number == 1 and wire == LENGTH:
                assert isinstance(value, bytes)
                scalar = _value(value, decoder)
                if scalar is not None:
                    out.append(Scalar(scalar[0], step, wall_time, scalar[1]))
    return out


def _value(buf: bytes, decoder: _Decoder) -> tuple[str, float] | None:
    """(tag, value) of one Summary.Value when it is a scalar metric, else None."""
    tag: str | None = None
    simple: float | None = None
    tensor: bytes | None = None
    metadata: bytes | None = None
    for number, wire, value in fields(buf):
        if number == 1 and wire == LENGTH:
            assert isinstance(value, bytes)
            tag = value.decode("utf-8")
        elif number == 2 and wire == FIXED32:
            assert isinstance(value, bytes)
            (simple,) = struct.unpack("<f", value)
        elif number == 8 and wire == LENGTH:
            assert isinstance(value, bytes)
            tensor = value
        elif number == 9 and wire == LENGTH:
            assert isinstance(value, bytes)
            metadata = value
    if tag is None or not tag or len(tag) > MAX_TAG_CHARS or not tag.isprintable():
        return None
    if metadata is not None and tag not in decoder.plugins:  # Keras repeats it every time
        plugin = _plugin_name(metadata)
        if plugin is not None:
            decoder.plugins[tag] = plugin
    known = decoder.plugins.get(tag)
    if known is not None and known != SCALARS_PLUGIN:
        return None  # histograms, images, text, the model graph: not metrics
    if simple is not None:
        return tag, simple
    found = _tensor_scalar(tensor) if tensor is not None else None
    return None if found is None else (tag, found)


def _plugin_name(buf: bytes) -> str | None:
    for number, wire, value in fields(buf):
        if number == 1 and wire == LENGTH:
            assert isinstance(value, bytes)
            for inner, inner_wire, name in fields(value):
                if inner == 1 and inner_wire == LENGTH:
                    assert isinstance(name, bytes)
                    return name.decode("utf-8", "replace")
    return None


def _tensor_scalar(buf: bytes) -> float | None:
    """The one number of a scalar (or one-element) numeric TensorProto, else None."""
    if len(buf) == len(_F32_SCALAR) + 4 and buf.startswith(_F32_SCALAR):  # tf.summary.scalar's
        return float(struct.unpack_from("<f", buf, len(_F32_SCALAR))[0])
    dtype, content = 0, None
    elements: int | None = 1
    listed: list[tuple[int, int | bytes]] = []  # (dtype the field implies, element)
    for number, wire, value in fields(buf):
        if number == 1 and wire == VARINT:
            assert isinstance(value, int)
            dtype = value
        elif number == 2 and wire == LENGTH:
            assert isinstance(value, bytes)
            elements = _element_count(value)
        elif number == 4 and wire == LENGTH:
            assert isinstance(value, bytes)
            content = value
        elif number in _VALUE_FIELDS:
            implied, width = _VALUE_FIELDS[number]
            if wire in (_SINGLE_WIRE[width], LENGTH):
                listed += [(implied, v) for v in repeated(wire, value, width)]
    if elements != 1:
        return None
    if content is not None:
        return _from_content(dtype, content)
    if len(listed) != 1:
        return None
    implied, value = listed[0]
    if implied != dtype and not (dtype == _BFLOAT16 and implied == 19):  # bfloat16 in half_val
        return None
    return _from_listed(dtype, value)


def _element_count(shape: bytes) -> int | None:
    """Elements of a TensorShapeProto (dim = 2, Dim.size = 1); None for an unknown rank or size."""
    count = 1
    for number, wire, value in fields(shape):
        if number == 3 and wire == VARINT and value:
            return None  # unknown_rank
        if number == 2 and wire == LENGTH:
            assert isinstance(value, bytes)
            size = 0
            for inner, inner_wire, dim in fields(value):
                if inner == 1 and inner_wire == VARINT:
                    assert isinstance(dim, int)
                    size = as_int64(dim)
            if size < 0:
                return None
            count *= size
            if count > 1:
                return count
    return count


def _from_content(dtype: int, content: bytes) -> float | None:
    if dtype == _BFLOAT16 and len(content) == 2:
        (value,) = struct.unpack("<f", b"\x00\x00" + content)
        return float(value)
    element = _ELEMENT.get(dtype)
    if element is None or len(content) != struct.calcsize(element):
        return None
    return float(struct.unpack(element, content)[0])


def _from_listed(dtype: int, value: int | bytes) -> float:
    if isinstance(value, bytes):  # a float_val / double_val element
        return float(struct.unpack("<f" if len(value) == 4 else "<d", value)[0])
    if dtype == 19:  # half_val: the 16 bits in an int32
        return float(struct.unpack("<e", struct.pack("<H", value & 0xFFFF))[0])
    if dtype == _BFLOAT16:
        return float(struct.unpack("<f", struct.pack("<I", (value & 0xFFFF) << 16))[0])
    return float(as_int32(value) if dtype == 3 else as_int64(value))


def is_event_file(name: str) -> bool:
    return name.startswith(EVENT_FILE_PREFIX)


Listing = Mapping[str, "os.stat_result | None"]  # name -> lstat of a regular file, None: a folder


@dataclass(frozen=True)
class EventSearch:
    files: list[tuple[Path, os.stat_result]]
    problem: str | None  # why the search stopped early, if it did
    shared: bool  # above the run folder: another run shares the folder (found or known)


def search_event_files(
    folder: Path,
    entries: Listing,
    list_folder: Callable[[Path], tuple[Listing, bool]],
    run: Path,
    others: Collection[Path] | RunIndex,
    limits: tuple[int, int, int],
) -> EventSearch:
    """The event files of `run` in `folder` (the run folder or one above it, listed as
    `entries`) and its subfolders, never inside another run (`others`: the other run folders,
    or a `RunIndex` of the root's runs, which may hold `run` and the folders above it). Above
    the run folder, the subfolders' files count only while no subfolder off the run's own branch
    holds another run (a known one, or checkpoint files other than BackupAndRestore's): a folder
    shared by several runs (a root of experiments) gives its subfolders' logs to none.
    `list_folder` gives a folder's listing and whether checkpoint files are in it; `limits`:
    (depth, folders listed, files). Paths are absolute. Every check is a lookup in the index:
    the cost does not grow with the number of runs."""
    index = as_index(others)
    above = folder != run
    branch = run.relative_to(folder).parts[0] if above else None
    shared = above and branch is not None and index.shared_off(folder, branch)
    if shared:  # only the files directly in it count: no subfolder is worth listing
        direct = {n: i for n, i in entries.items() if i is not None}
        found, problem = _walk(folder, direct, lambda _: None, limits)
        return EventSearch(found, problem, True)

    def lister(path: Path) -> Listing | None:
        nonlocal shared
        if shared or (above and path.parent == folder and path.name == branch):
            return None  # (above the run folder) the run's own branch
        if index.is_run_or_above_one(path):
            return None  # another run, or a folder above one
        listing, checkpoints = list_folder(path)
        if above and checkpoints and not _backup(path, listing):
            shared = True
            return None
        return listing

    found, problem = _walk(folder, entries, lister, limits)
    files = [(p, i) for p, i in found if not shared or p.parent == folder]
    return EventSearch(files, problem, shared)


def _backup(path: Path, listing: Listing) -> bool:
    """A BackupAndRestore folder: Keras 3's (`training_metadata.json` beside the weights) or
    tf-keras's (`<backup_dir>/chief/`). Housekeeping of a run, not another run."""
    return path.name == "chief" or not NOT_LOGS.isdisjoint(listing)


def _walk(
    folder: Path,
    entries: Listing,
    list_folder: Callable[[Path], Listing | None],
    limits: tuple[int, int, int],
) -> tuple[list[tuple[Path, os.stat_result]], str | None]:
    """Event files in `folder` and its subfolders, breadth first; `list_folder` returns None
    for a folder not to enter."""
    max_depth, max_folders, max_files = limits
    out: list[tuple[Path, os.stat_result]] = []
    queue: list[tuple[Path, int, Listing]] = [(folder, 0, entries)]
    listed = 0
    while queue:
        current, depth, names = queue.pop(0)
        for name in sorted(names):
            info = names[name]
            if info is not None and is_event_file(name):
                if len(out) >= max_files:
                    return out, f"over {max_files} event files"
                out.append((current / name, info))
            elif info is None and depth < max_depth:
                if listed >= max_folders:
                    return out, f"over {max_folders} log folders"
                listed += 1
                below = list_folder(current / name)
                if below is not None:
                    queue.append((current / name, depth + 1, below))
    return out, None
