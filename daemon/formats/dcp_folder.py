"""torch.distributed.checkpoint (DCP) folders: `.metadata` + `__<rank>_<n>.distcp` data files.

`.metadata` is a pickle (protocol 4) that DCP's own reader loads with plain `pickle.load`: a
crafted one runs code in `dcp.load`. Here it goes through `pickle_safe` only, where every global
is an inert record: the Metadata record, its `state_dict_metadata` (flattened keys: shapes,
dtypes, chunks) and `storage_data` (which data file holds which byte range of each key). The
load child never lets DCP unpickle it: it builds the Metadata itself (`pickle_allowed`, the
globals of `ALLOWED` only, judged from the opcodes first: `foreign_globals`) and hands it over.

The coordinator writes `.metadata` last (`.metadata.tmp` renamed), so a folder without it is a
save in flight or a dead one. A present `.metadata` is not enough: a re-save into the same
folder rewrites the data files under the old, valid-looking `.metadata`. So the folder is
complete only when every data file it names is there with at least the bytes its ranges need,
and none of them is newer than `.metadata` (`DcpFolder.problems` says what is not so).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import CorruptCheckpoint
from ..core.model import CheckpointInfo, Format, Kind, Layer, OptimizerInfo, WeightInfo
from ..fs import beneath
from . import pickle_allowed, pickle_ops, pickle_safe

METADATA = ".metadata"
DATA_FILE = re.compile(r"^__\d+_\d+\.distcp$")
_DATA_RANK = re.compile(r"^__(\d+)_\d+\.distcp$")
_METADATA_CLASS = "torch.distributed.checkpoint.metadata.Metadata"
_TENSOR_CLASS = "torch.distributed.checkpoint.metadata.TensorStorageMetadata"
_OPTIMIZER_PREFIXES = ("optim.", "optimizer.", "optim_state.", "optimizer_state.")


@dataclass(frozen=True)
class DcpTensor:
    key: str  # the flattened state-dict key: `model.0.weight`, `optim.state.0.exp_avg`
    shape: tuple[int, ...]
    dtype: str
    chunks: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]  # (offsets, sizes) per chunk

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * pickle_safe.ITEM_SIZES.get(self.dtype, 1)


@dataclass(frozen=True)
class DcpFolder:
    tensors: tuple[DcpTensor, ...]
    values: tuple[str, ...]  # keys of non-tensor items (`step`, `optim.param_groups.0.lr`)
    needed: dict[str, int]  # data file -> the bytes its ranges need (max offset + length)
    metadata_mtime_ns: int
    version: str | None
    problems: tuple[str, ...] = field(default=())  # why the folder is not a complete save
    foreign: tuple[str, ...] = field(default=())  # what `verify --load` refuses to unpickle
    # `.metadata`'s `storage_data` as read: MetadataIndex -> _StorageInfo records (inert)
    storage: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)


def is_dcp_folder(folder: Path) -> bool:
    """A folder holding `.metadata` or a `__R_N.distcp` data file (a save in flight has no
    `.metadata` yet)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    return METADATA in names or any(DATA_FILE.match(n) for n in names)


def read_folder(folder: Path, root: Path | None = None) -> DcpFolder:
    """What `.metadata` says, checked against the data files. CorruptCheckpoint when
    `.metadata` is absent, not a pickle, or not a DCP Metadata record (a hostile one is
    reported with the globals it names, never run)."""
    path = folder / METADATA
    try:
        fd = beneath.open_regular(path, root)
    except FileNotFoundError:
        raise CorruptCheckpoint("no .metadata yet: the coordinator writes it last") from None
    with os.fdopen(fd, "rb") as fh:
        mtime_ns = os.fstat(fh.fileno()).st_mtime_ns
        data = beneath.read_at_most(fh, pickle_safe.MAX_PICKLE_BYTES + 1)
    record, ops = pickle_safe.read(data)
    if not isinstance(record, pickle_safe.Opaque) or record.global_name != _METADATA_CLASS:
        raise CorruptCheckpoint(f".metadata is not a DCP Metadata record ({_describe(ops)})")
    state = record.state if isinstance(record.state, dict) else {}
    tensors, values = _entries(state.get("state_dict_metadata"))
    needed = _needed(state.get("storage_data"))
    problems = _problems(folder, needed, mtime_ns)
    version = state.get("version")
    return DcpFolder(
        tuple(tensors),
        tuple(values),
        needed,
        mtime_ns,
        version if isinstance(version, str) else None,
        tuple(problems),
        tuple(pickle_ops.refusals(ops, ALLOWED, ENUMS)),
        state["storage_data"],  # a dict: `_needed` refused anything else
    )


# The globals a `.metadata` written by `dcp.save` names: its dataclasses, an enum, a path, and
# torch's dtypes, `Size` and layout lookup. Anything else (`posix.system`) means the real
# unpickler would call something we never meant it to: the load child refuses the folder.
DCP_GLOBALS = frozenset(
    {
        _METADATA_CLASS,
        _TENSOR_CLASS,
        "torch.distributed.checkpoint.metadata.BytesStorageMetadata",
        "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
        "torch.distributed.checkpoint.metadata.TensorProperties",
        "torch.distributed.checkpoint.metadata.StorageMeta",
        "torch.distributed.checkpoint.metadata.MetadataIndex",
        "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
        "torch.distributed.checkpoint.filesystem._StorageInfo",
        "pathlib.PosixPath",
    }
)
# Python 3.11.0-3.11.3 (Debian 12's 3.11.2) pickles an enum member as `getattr(Enum, 'NAME')`.
ENUMS = frozenset({"torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING"})
ALLOWED = DCP_GLOBALS | {pickle_ops.GETATTR, "torch.Size", "torch.serialization._get_layout"}
ALLOWED |= {f"torch.{dtype}" for dtype in pickle_safe.ITEM_SIZES}
# Inert containers and values a planner's `planner_data` may hold (the old check let every
# global `pickle_safe` makes a record of through; these are the ones a real unpickler may build)
ALLOWED |= {"collections.OrderedDict", "torch.device", "_codecs.encode"}
ALLOWED |= {f"builtins.{name}" for name in ("set", "frozenset", "complex")}


def foreign_globals(data: bytes) -> list[str]:
    """What a `.metadata` pickle names or calls outside ALLOWED, from its opcodes (nothing
    built, nothing run); [] when the load child may build it (`pickle_allowed.load`)."""
    return pickle_allowed.refusals(data, ALLOWED, ENUMS)


def load_metadata(data: bytes) -> object:
    """The real DCP Metadata of `data`, for a load child with torch imported (see module doc)."""
    return pickle_allowed.load(data, ALLOWED, ENUMS)


def info_of(dcp: DcpFolder) -> CheckpointInfo:
    """The folder as a catalog entry: model tensors, optimizer state apart, bytes from dtypes."""
    notes = [f"DCP {dcp.version or '?'}: {len(dcp.needed)} data file(s)"]
    if dcp.foreign:
        foreign = ", ".join(dcp.foreign[:5])
        notes.append(f".metadata names {foreign}: never run (verify --load refuses it)")
    model = [t for t in dcp.tensors if not t.key.startswith(_OPTIMIZER_PREFIXES)]
    optimizer = [t for t in dcp.tensors if t.key.startswith(_OPTIMIZER_PREFIXES)]
    layer = Layer(
        name="state_dict",
        class_name=None,
        n_params=sum(t.numel for t in model),
        weights=tuple(WeightInfo(t.key, t.shape, t.dtype) for t in model),
    )
    opt = None
    if optimizer or any(v.startswith(_OPTIMIZER_PREFIXES) for v in dcp.values):
        opt = OptimizerInfo(
            class_name=None,  # torch stores no optimizer class in a state dict
            n_variables=len(optimizer),
            state_bytes=sum(t.nbytes for t in optimizer),
        )
    return CheckpointInfo(
        format=Format.TORCH_DCP,
        kind=Kind.WEIGHTS,
        layers=(layer,),
        n_params=layer.n_params,
        weights_bytes=sum(t.nbytes for t in model),
        optimizer=opt,
        notes=tuple(notes),
        world_size=world_size(dcp.needed),
    )


def world_size(names: Iterable[str]) -> int | None:
    """The ranks that wrote data files (`__<rank>_<n>.distcp`), from their names (as
    `.metadata` names them, or a folder's listing)."""
    ranks = {int(m[1]) for name in names if (m := _DATA_RANK.match(name))}
    return max(ranks) + 1 if ranks else None


def _entries(metadata: Any) -> tuple[list[DcpTensor], list[str]]:
    tensors: list[DcpTensor] = []
    values: list[str] = []
    if not isinstance(metadata, dict):
        raise CorruptCheckpoint(".metadata has no state_dict_metadata")
    for key, entry in metadata.items():
        if not isinstance(entry, pickle_safe.Opaque) or entry.global_name != _TENSOR_CLASS:
            values.append(str(key))
            continue
        fields = entry.state if isinstance(entry.state, dict) else {}
        properties = fields.get("properties")
        dtype = "?"
        if isinstance(properties, pickle_safe.Opaque):
            # TensorProperties pickles its fields as a tuple state (dtype first), or a dict
            state = properties.state
            if isinstance(state, tuple) and state:
                dtype = str(state[0])
            elif isinstance(state, dict):
                dtype = str(state.get("dtype", "?"))
            elif properties.args:
                dtype = str(properties.args[0])
        chunks = []
        for chunk in fields.get("chunks") or ():
            if isinstance(chunk, pickle_safe.Opaque) and isinstance(chunk.state, dict):
                chunks.append((_ints(chunk.state.get("offsets")), _ints(chunk.state.get("sizes"))))
        tensors.append(DcpTensor(str(key), _ints(fields.get("size")), dtype, tuple(chunks)))
    return tensors, values


def _needed(storage: Any) -> dict[str, int]:
    """{data file: bytes needed} from `storage_data`'s `_StorageInfo(relative_path, offset,
    length)` records; a path that climbs out of the folder is refused."""
    if not isinstance(storage, dict):
        raise CorruptCheckpoint(".metadata has no storage_data")
    needed: dict[str, int] = {}
    for info in storage.values():
        fields = info.state if isinstance(info, pickle_safe.Opaque) else None
        if not isinstance(fields, dict):
            continue
        name, offset = fields.get("relative_path"), fields.get("offset")
        length = fields.get("length")
        if not isinstance(name, str) or not isinstance(offset, int) or not isinstance(length, int):
            continue
        if "/" in name or "\0" in name or name in ("", ".", ".."):  # NUL: found by fuzzing
            raise CorruptCheckpoint(f".metadata names a data file outside its folder: {name!r}")
        needed[name] = max(needed.get(name, 0), offset + length)
    return needed


def _problems(folder: Path, needed: dict[str, int], metadata_mtime_ns: int) -> list[str]:
    problems = []
    for name, size in sorted(needed.items()):
        try:
            st = os.lstat(folder / name)
        except FileNotFoundError:
            problems.append(f"{name} is missing (.metadata names it)")
            continue
        if st.st_size < size:
            problems.append(f"{name} has {st.st_size} bytes, .metadata needs {size}")
        elif st.st_mtime_ns > metadata_mtime_ns:
            problems.append(f"{name} is newer than .metadata (a save into the folder again)")
    return problems


def _describe(ops: pickle_ops.Ops) -> str:
    names = pickle_safe.placeholders(ops)
    if ops.top_call:
        return f"it is a call of {ops.top_call}, never run"
    if names:
        return "it names " + ", ".join(names[:5])
    return "it holds no Metadata"


def _ints(values: Any) -> tuple[int, ...]:
    if not isinstance(values, tuple | list):
        return ()
    return tuple(
        v
        for v in values[:64]
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 63
    )
