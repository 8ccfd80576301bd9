"""Per-rank torch files of one sharded save (FSDP2 / verl): `model_world_size_W_rank_R.pt`,
`optim_world_size_W_rank_R.pt`, `extra_state_world_size_W_rank_R.pt` in one folder (verl's
`global_step_N/actor/`), one checkpoint whose path is their folder.

Each model file is `torch.save(model.state_dict())` on its rank: a dict of DTensors. A DTensor
pickles as `torch._tensor._rebuild_from_type_v2(_rebuild_wrapper_subclass, DTensor, (cls,
dtype, global size, global stride, ...), {"_local_tensor": <tensor>, "_spec": DTensorSpec})`;
the restricted unpickler (`pickle_safe`) turns every one of those globals into an inert record,
so the global shape, the placements (`Shard(dim)`, `Replicate()`) and the rank's coordinate on
the mesh are read as data, the local tensor as a record of its storage: no byte of tensor data
is read, no torch class is ever made. A plain tensor in such a file is the same on every rank.

Where a rank's piece sits in the global tensor is DTensor's `Shard` rule (`torch.chunk`: pieces
of ceil(size / mesh size) along `dim`, the last ones shorter or empty, the mesh size its rank
map's length); FSDP2 pads its local storage, so a piece is read by its record's shape and
stride, never its storage's size. The ranks must agree on each tensor's shape and placement, no
two ranks of one mesh may hold one piece, and the pieces must tile the tensor (`core.tiling`):
a rank's file copied over another's is `corrupt`, never a model. Meshes of more than one
dimension (FSDP with tensor parallelism, HSDP) are refused with the reason.

Complete: for every role present (model, optim, extra_state), every rank 0..W-1 of the one
world size W the names declare, each file a whole zip (`torch.save` writes the central directory
last: a file cut short is no zip); and where verl left its marks, its `fsdp_config.json` naming
the same world size and its `latest_checkpointed_iteration.txt` (above `global_step_N/`, written
once every role saved) naming N or later. Else `UnfinishedSave` naming what is missing (the
indexer judges `incomplete`, then `abandoned`).
"""

from __future__ import annotations

import json
import math
import os
import re
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..core.errors import CorruptCheckpoint, UnfinishedSave
from ..core.model import CheckpointInfo, Format, Kind, Layer, OptimizerInfo, WeightInfo
from ..core.tiling import check_tiles
from ..fs import beneath, sharded_names
from . import megatron, pickle_safe, torch_zip, window
from .pickle_safe import Opaque, TensorRecord

RANK_FILE = sharded_names.RANK_FILE
MODEL, OPTIM = "model", "optim"
_REBUILD = "torch._tensor._rebuild_from_type_v2"
_DTENSOR = "torch.distributed.tensor.DTensor"
_SHARD = "torch.distributed.tensor.placement_types.Shard"
_REPLICATE = "torch.distributed.tensor.placement_types.Replicate"
MAX_WORLD = 1 << 16
FSDP_CONFIG = "fsdp_config.json"  # verl: {"FSDP_version": 1|2, "world_size": W}


@dataclass(frozen=True)
class Piece:
    """One rank's part of a global tensor: its local record, where it starts globally."""

    rank: int
    file: str
    record: TensorRecord
    offsets: tuple[int, ...]


@dataclass(frozen=True)
class GlobalTensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    placements: tuple[str, ...]  # "Shard(0)", "Replicate()", or the class of another placement
    pieces: tuple[Piece, ...]  # sorted by offsets; one piece for a replicated tensor


@dataclass(frozen=True)
class RankSet:
    folder: Path
    world_size: int
    files: dict[str, dict[int, str]]  # role -> rank -> file name


def rank_set(folder: Path, names: frozenset[str] | None = None) -> RankSet:
    """The rank files of `folder` by role and rank; UnfinishedSave when a rank is missing, a
    CorruptCheckpoint when names disagree on the world size."""
    if names is None:
        names = frozenset(os.listdir(folder))
    files: dict[str, dict[int, str]] = {}
    worlds: set[int] = set()
    for name in sorted(names):
        m = RANK_FILE.match(name)
        if m is None:
            continue
        world, rank = int(m[2]), int(m[3])
        worlds.add(world)
        files.setdefault(m[1], {})[rank] = name
    if not worlds:
        raise CorruptCheckpoint(f"{folder.name}: no per-rank files (*_world_size_W_rank_R.pt)")
    if len(worlds) > 1:
        raise CorruptCheckpoint(f"{folder.name}: rank files of world sizes {sorted(worlds)}")
    world = worlds.pop()
    if not 0 < world <= MAX_WORLD:
        raise CorruptCheckpoint(f"{folder.name}: world size {world} out of range")
    missing = [
        f"{role}_world_size_{world}_rank_{r}.pt"
        for role, ranks in sorted(files.items())
        for r in range(world)
        if r not in ranks
    ]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        shown = ", ".join(missing[:3]) + more
        raise UnfinishedSave(f"rank file(s) missing for world size {world}: {shown}")
    if MODEL not in files:
        raise CorruptCheckpoint(f"{folder.name}: rank files without the model's")
    return RankSet(folder, world, files)


@contextmanager
def opened(path: Path, root: Path | None) -> Iterator[tuple[IO[bytes], zipfile.ZipFile]]:
    """A rank file as an open torch zip; UnfinishedSave when it is not a whole zip (yet)."""
    fd = beneath.open_regular(path, root)
    with os.fdopen(fd, "rb") as raw:
        try:
            archive = zipfile.ZipFile(raw)
        except zipfile.BadZipFile as exc:
            raise UnfinishedSave(f"{path.name} is not a whole torch file ({exc})") from None
        with archive:
            yield raw, archive


def state_of(archive: zipfile.ZipFile, name: str) -> Any:
    member = torch_zip.pickle_member(archive)
    if member is None:
        raise CorruptCheckpoint(f"{name} is a zip but not a torch file")
    return pickle_safe.load(window.read_member(archive, member, pickle_safe.MAX_PICKLE_BYTES))


def model_tensors(ranks: RankSet, root: Path | None) -> list[GlobalTensor]:
    """Every tensor of the model rank files, with each rank's piece (metadata only)."""
    per_name: dict[str, list[tuple[int, str, Any]]] = {}
    order: list[str] = []
    for rank, name in sorted(ranks.files[MODEL].items()):
        with opened(ranks.folder / name, root) as (_raw, archive):
            state = state_of(archive, name)
        if not isinstance(state, dict):
            raise CorruptCheckpoint(f"{name} holds no state dict")
        for key, value in state.items():
            if str(key) not in per_name:
                order.append(str(key))
            per_name.setdefault(str(key), []).append((rank, name, value))
    return [_global(key, per_name[key], ranks.world_size) for key in order]


def _global(key: str, seen: list[tuple[int, str, Any]], world: int) -> GlobalTensor:
    first = seen[0][2]
    if isinstance(first, TensorRecord):  # a plain tensor: the same on every rank
        rank, name, record = seen[0]
        whole = Piece(rank, name, record, (0,) * len(record.shape))
        return GlobalTensor(key, record.dtype, record.shape, (), (whole,))
    pieces: dict[int, Piece] = {}  # by coordinate on the mesh
    records = [(rank, name, dtensor(value, key)) for rank, name, value in seen]
    shape, placements = records[0][2].shape, records[0][2].placements
    for rank, name, d in records:
        if len(d.placements) != 1:
            raise CorruptCheckpoint(f"{key}: a {len(d.placements)}-D device mesh is not read here")
        if (d.shape, d.placements) != (shape, placements):
            raise CorruptCheckpoint(f"{key}: ranks disagree on its shape or placement")
        if d.mesh_size is not None and not 0 < d.mesh_size <= world:
            raise CorruptCheckpoint(f"{key}: a mesh of {d.mesh_size} ranks, world size {world}")
        where = d.coordinate if d.coordinate is not None else rank
        offsets = _offsets(key, shape, placements[0], where, d.mesh_size or world, d.local)
        if where in pieces and (d.mesh_size or world) == world:  # one mesh: one rank a piece
            both = f"ranks {pieces[where].rank} and {rank}"
            raise CorruptCheckpoint(f"{key}: {both} hold the same piece (overlap)")
        if offsets is not None and where not in pieces:  # else a replica of a piece we have
            pieces[where] = Piece(rank, name, d.local, offsets)
    ordered = sorted(pieces.values(), key=lambda p: p.offsets)
    check_tiles(key, shape, [(p.offsets, p.record.shape) for p in ordered])
    dtype = records[0][2].local.dtype
    return GlobalTensor(key, dtype, shape, placements, tuple(ordered))


@dataclass(frozen=True)
class DTensorRecord:
    """What a pickled DTensor says of itself (its values stay in its local tensor's storage)."""

    local: TensorRecord
    shape: tuple[int, ...]  # the global tensor's
    placements: tuple[str, ...]
    coordinate: int | None  # this rank's place on a 1-D mesh
    mesh_size: int | None  # ranks on the mesh (its rank map's length)


def dtensor(value: Any, key: str) -> DTensorRecord:
    """The record of a pickled DTensor; CorruptCheckpoint for anything else."""
    if not (isinstance(value, Opaque) and value.global_name == _REBUILD and len(value.args) >= 4):
        raise CorruptCheckpoint(f"{key}: neither a tensor nor a DTensor")
    kind, args, state = value.args[1], value.args[2], value.args[3]
    if isinstance(state, tuple) and len(state) == 2:  # (dict state, slots state)
        state = state[0] if isinstance(state[0], dict) else state[1]
    # the class itself is a placeholder class (a GLOBAL, never called)
    if getattr(kind, "global_name", None) != _DTENSOR or not isinstance(state, dict):
        raise CorruptCheckpoint(f"{key}: a tensor subclass other than DTensor")
    local, spec = state.get("_local_tensor"), state.get("_spec")
    if not isinstance(local, TensorRecord) or not isinstance(spec, Opaque):
        raise CorruptCheckpoint(f"{key}: a DTensor without its local tensor and spec")
    fields = spec.state if isinstance(spec.state, dict) else {}
    shape = _ints(args[2]) if isinstance(args, tuple) and len(args) > 2 else ()
    placements = tuple(_placement(p) for p in fields.get("placements") or ())
    mesh = fields.get("mesh")
    mesh_state = mesh.state if isinstance(mesh, Opaque) and isinstance(mesh.state, dict) else {}
    coordinate = mesh_state.get("_coordinate_on_dim")
    where = coordinate[0] if isinstance(coordinate, tuple) and len(coordinate) == 1 else None
    ranks = mesh_state.get("_rank_map", mesh_state.get("mesh"))  # torch 2.13; older releases
    size = ranks.numel if isinstance(ranks, TensorRecord) else None
    return DTensorRecord(local, shape, placements, where if isinstance(where, int) else None, size)


def _placement(p: Any) -> str:
    if isinstance(p, Opaque) and p.global_name == _SHARD:
        dim = p.state.get("dim") if isinstance(p.state, dict) else (p.args[0] if p.args else None)
        return f"Shard({dim})"
    if isinstance(p, Opaque) and p.global_name == _REPLICATE:
        return "Replicate()"
    return getattr(p, "global_name", type(p).__name__)


def _offsets(
    key: str,
    shape: tuple[int, ...],
    placement: str,
    coordinate: int,
    world: int,
    local: TensorRecord,
) -> tuple[int, ...] | None:
    """Where `coordinate`'s piece starts (`torch.chunk`'s split), or None for a replica not
    rank 0's; CorruptCheckpoint when the local shape is not the piece the placement gives."""
    if placement == "Replicate()":
        if local.shape != shape:
            raise CorruptCheckpoint(f"{key}: a replica of shape {local.shape}, not {shape}")
        return (0,) * len(shape) if coordinate == 0 else None
    m = re.fullmatch(r"Shard\((\d+)\)", placement)
    if m is None or int(m[1]) >= len(shape):
        raise CorruptCheckpoint(f"{key}: placement {placement} is not read here")
    dim = int(m[1])
    size = shape[dim]
    step = -(-size // world)
    start = min(coordinate * step, size)
    length = max(0, min(step, size - start))
    expected = (*shape[:dim], length, *shape[dim + 1 :])
    if local.shape != expected:
        raise CorruptCheckpoint(
            f"{key}: rank piece of shape {local.shape}, {placement} gives {expected}"
        )
    return tuple(start if d == dim else 0 for d in range(len(shape)))


def read(folder: Path, root: Path | None = None) -> CheckpointInfo:
    """The reader of `formats.folder_readers`: the set as one checkpoint (see module doc)."""
    ranks = rank_set(folder)
    _check_verl(folder, ranks.world_size, root)
    tensors = model_tensors(ranks, root)
    optimizer_bytes, variables = 0, 0
    for role, files in ranks.files.items():
        if role == MODEL:
            continue
        for name in files.values():  # whole zips, their storages summed (never read)
            with opened(folder / name, root) as (_raw, archive):
                state = state_of(archive, name)
            walked = pickle_safe.walk(state)
            if role == OPTIM:
                moments = [t for path, t in walked.tensors if not path.endswith("_rank_map")]
                variables += len(moments)
                optimizer_bytes += sum(t.nbytes for t in moments)
    weights = tuple(WeightInfo(t.name, t.shape, t.dtype) for t in tensors)
    n_params = sum(math.prod(t.shape) for t in tensors)
    layer = Layer(name="state_dict", class_name=None, n_params=n_params, weights=weights)
    placements = sorted({p for t in tensors for p in t.placements})
    roles = ", ".join(sorted(ranks.files))
    shown = ", ".join(placements) or "none"
    notes = [f"{ranks.world_size} rank files per role ({roles}); placements {shown}"]
    optimizer = None
    if OPTIM in ranks.files:
        optimizer = OptimizerInfo(None, n_variables=variables, state_bytes=optimizer_bytes)
    return CheckpointInfo(
        format=Format.TORCH_RANKS,
        kind=Kind.WEIGHTS,
        layers=(layer,),
        n_params=n_params,
        weights_bytes=sum(
            math.prod(t.shape) * pickle_safe.ITEM_SIZES.get(t.dtype, 1) for t in tensors
        ),
        optimizer=optimizer,
        notes=tuple(notes),
        world_size=ranks.world_size,
        recorded={"step": step} if (step := _step(folder)) is not None else None,
    )


def _check_verl(folder: Path, world: int, root: Path | None) -> None:
    """verl's own marks, where there: `fsdp_config.json` beside the files names the world size
    (it must be the names'), and `latest_checkpointed_iteration.txt` above `global_step_N/`,
    written once every role saved, must name N or later (else the save is in flight)."""
    try:
        raw = beneath.read_bounded(folder / FSDP_CONFIG, 1 << 16, root)
    except FileNotFoundError:
        raw = None
    if raw is not None:
        try:
            declared = json.loads(raw).get("world_size")
        except (ValueError, AttributeError):
            raise CorruptCheckpoint(f"{FSDP_CONFIG} is not a JSON object") from None
        if declared is not None and declared != world:
            raise CorruptCheckpoint(f"{FSDP_CONFIG} says world size {declared}, the files {world}")
    step = _step(folder)
    if step is not None and re.fullmatch(r"global_step_?\d+", folder.parent.name):
        megatron.tracker_reached(folder.parent.parent, step, root, required=False)


def _step(folder: Path) -> int | None:
    """verl's `global_step_N/actor/`: the step is the parent's (or the folder's own) number."""
    for name in (folder.name, folder.parent.name):
        m = re.fullmatch(r"global_step_?(\d+)", name)
        if m:
            return int(m[1])
    return None


def _ints(values: Any) -> tuple[int, ...]:
    if not isinstance(values, tuple | list):
        return ()
    return tuple(
        v for v in values if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 62
    )
