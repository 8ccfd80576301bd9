"""A TF checkpoint's or SavedModel's variables, read in-process without TensorFlow.

The result dicts are the ones the former TensorFlow child (`tf_probe`) printed, so
`tf_checkpoint.describe` turns them into a CheckpointInfo unchanged: per variable its key, full
name, role (`core.tf_roles`, from the object graph), trainable, shape, dtype named as TF names
it ("float32", "int64", "string", "resource"), itemsize (0 for strings and resources) and, for
numeric scalars, the value. Only metadata, the object graph and a few scalars are read, never
weights. tests/integration/test_tf_formats.py compares all of it with what TF itself reports.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from ..core.errors import (
    CorruptCheckpoint,
    NotARegularFile,
    NotReady,
    ReadProblem,
    UnreadableCheckpoint,
    WireError,
)
from ..core.tf_roles import classify, classify_by_name
from ..fs import beneath
from . import tensor_bundle, tf_protos

GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
MAX_SCALARS = 64  # scalars are 8 bytes each; the cap only guards against pathological files
MAX_GRAPH_PROTO_BYTES = 512 << 20  # saved_model.pb holds the whole graph (constants too)

# TF's DataType enum -> (tf.DType.name, tf.DType.size, struct format of a numeric scalar or "").
# Sizes as TF reports them: 0 for string, resource and variant (stored variable-length).
_FLOAT, _INT = "float", "int"
DTYPES: dict[int, tuple[str, int, str, str]] = {
    1: ("float32", 4, "<f", _FLOAT),
    2: ("float64", 8, "<d", _FLOAT),
    3: ("int32", 4, "<i", _INT),
    4: ("uint8", 1, "<B", _INT),
    5: ("int16", 2, "<h", _INT),
    6: ("int8", 1, "<b", _INT),
    7: ("string", 0, "", ""),
    8: ("complex64", 8, "", ""),
    9: ("int64", 8, "<q", _INT),
    10: ("bool", 1, "", ""),
    11: ("qint8", 1, "", ""),
    12: ("quint8", 1, "", ""),
    13: ("qint32", 4, "", ""),
    14: ("bfloat16", 2, "bf16", _FLOAT),
    15: ("qint16", 2, "", ""),
    16: ("quint16", 2, "", ""),
    17: ("uint16", 2, "<H", _INT),
    18: ("complex128", 16, "", ""),
    19: ("float16", 2, "<e", _FLOAT),
    20: ("resource", 0, "", ""),
    21: ("variant", 0, "", ""),
    22: ("uint32", 4, "<I", _INT),
    23: ("uint64", 8, "<Q", _INT),
    # 8-, 4- and 2-bit types: numeric for TF, but their scalars' values are not decoded here.
    24: ("float8_e5m2", 1, "", _FLOAT),
    25: ("float8_e4m3fn", 1, "", _FLOAT),
    26: ("float8_e4m3fnuz", 1, "", _FLOAT),
    27: ("float8_e4m3b11fnuz", 1, "", _FLOAT),
    28: ("float8_e5m2fnuz", 1, "", _FLOAT),
    29: ("int4", 1, "", _INT),
    30: ("uint4", 1, "", _INT),
    31: ("int2", 1, "", _INT),
    32: ("uint2", 1, "", _INT),
    33: ("float4_e2m1fn", 1, "", _FLOAT),
}


def _dtype(index: Path, key: str, number: int) -> tuple[str, int, str, str]:
    if number not in DTYPES:
        raise CorruptCheckpoint(f"{index.name}: {key} has unknown dtype {number}")
    return DTYPES[number]


def _scalar(bundle: tensor_bundle.Bundle, key: str, fmt: str) -> int | float | None:
    if not fmt:
        return None
    data = tensor_bundle.tensor_bytes(bundle, key, limit=16)
    if fmt == "bf16":  # the upper half of a float32
        return float(struct.unpack("<f", b"\0\0" + data[:2])[0])
    if len(data) != struct.calcsize(fmt):
        raise CorruptCheckpoint(f"{key}: a scalar of {len(data)} bytes")
    value: int | float = struct.unpack(fmt, data)[0]
    return value


def probe_checkpoint(prefix: Path) -> dict[str, Any]:
    """`{"variables": [...], "object_graph": bool, "graph_bytes": int}` of the checkpoint."""
    bundle = tensor_bundle.read_bundle(prefix)
    index = prefix.with_name(prefix.name + ".index")
    entries = {k: e for k, e in bundle.entries.items() if k != GRAPH_KEY}
    types = {k: _dtype(index, k, e.dtype) for k, e in entries.items()}
    scalars = [k for k in sorted(entries) if not entries[k].shape]
    int_scalars = {k for k in scalars if types[k][3] == _INT}
    graph_bytes = 0
    if GRAPH_KEY in bundle.entries:
        raw = tensor_bundle.string_scalar(bundle, GRAPH_KEY)
        graph_bytes = len(raw)
        try:
            graph = tf_protos.object_graph(raw)
        except WireError as exc:
            raise CorruptCheckpoint(f"object graph unreadable: {exc}") from None
        found = classify(graph, int_scalars)
    else:
        found = classify_by_name(sorted(entries))
    numeric = [k for k in scalars if types[k][3]]
    values = {k: _scalar(bundle, k, types[k][2]) for k in numeric[:MAX_SCALARS]}
    variables = []
    ordered = [*(k for k in found if k in entries), *(k for k in sorted(entries) if k not in found)]
    for key in ordered:
        role, name, trainable = found.get(key, ("other", "", False))
        short = key.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE")
        dtype, itemsize, _, _ = types[key]
        variables.append(
            {
                "key": short,
                "name": name or short,
                "role": role,
                "trainable": trainable,
                "shape": list(entries[key].shape),
                "dtype": dtype,
                "itemsize": itemsize,
                "value": values.get(key),
            }
        )
    return {
        "variables": variables,
        "object_graph": GRAPH_KEY in bundle.entries,
        "graph_bytes": graph_bytes,
    }


def probe_savedmodel(directory: Path) -> dict[str, Any]:
    """`{"signatures", "tensorflow_version", "checkpoint"}` of a SavedModel directory."""
    pb = directory / "saved_model.pb"
    signatures: list[str] = []
    versions: list[str] = []
    if beneath.not_regular(pb) != "missing":
        raw = tensor_bundle.read_capped(pb, MAX_GRAPH_PROTO_BYTES)
        if raw is None:
            raise UnreadableCheckpoint(f"saved_model.pb over {MAX_GRAPH_PROTO_BYTES >> 20} MiB")
        try:
            signatures, versions = tf_protos.savedmodel_facts(raw)
        except WireError as exc:
            raise CorruptCheckpoint(f"saved_model.pb is not a SavedModel: {exc}") from None
    # A saved_model.pbtxt (text format, rare) gives no signatures: its variables still count.
    prefix = directory / "variables" / "variables"
    has_index = beneath.not_regular(prefix.with_name("variables.index")) != "missing"
    return {
        "signatures": signatures,
        "tensorflow_version": versions,
        "checkpoint": probe_checkpoint(prefix) if has_index else None,
    }


def read_problem(path: Path, exc: OSError | NotARegularFile) -> ReadProblem:
    """What a failed open during a read means: vanished (max_to_keep pruning), or not allowed."""
    if isinstance(exc, FileNotFoundError):
        return NotReady(f"{Path(exc.filename or path).name} vanished during the read")
    if isinstance(exc, NotARegularFile):
        return UnreadableCheckpoint(str(exc))
    return UnreadableCheckpoint(f"{path.name}: {exc.strerror or exc}")
