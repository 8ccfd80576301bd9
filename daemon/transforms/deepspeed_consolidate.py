"""Consolidate a DeepSpeed ZeRO tag folder into one safetensors of the full model, without torch.

What `zero_to_fp32.py` (the script DeepSpeed leaves beside its checkpoints) does with every
partition loaded into RAM, done here as byte copies streamed a MiB at a time, so memory stays
flat whatever the model's size. The model's parameters are the fp32 master weights of the
optimizer partitions, one file per data-parallel rank (`*_optim_states.pt`):

- ZeRO 1/2: `single_partition_of_fp32_groups[g]` of each rank, concatenated in rank order, is
  param group g's flat vector (the last rank's partition saved without its padding); each
  parameter of `param_shapes[g]` follows the previous one (plus `param_alignment_paddings`
  where the file has them), and the consumed length, rounded up to `2 * world_size`, must be
  the vector's so rounded (zero_to_fp32's own check);
- ZeRO-3: each rank holds `ceil(numel / world_size)` elements of every parameter, in
  `param_shapes` order across the groups of `fp32_flat_groups` (concatenated); a parameter is
  the ranks' slices in rank order, cut to its numel, and every rank's partition must be
  consumed exactly.

The buffers (`buffer_names`, from the module in `model_states`) come first, as in
zero_to_fp32's state dict; then the parameters. Floating tensors come out in the dtype the
model trained in (`trained_dtype`: the config's bf16 or fp16, else float32), cast from the
fp32 master weights as torch casts them (`cast`), which is what zero_to_fp32's
`convert_zero_checkpoint_to_state_dict(dtype=...)` writes; float32 for a float32 run, its
default. Refused with the
reason: tied parameters, model parallelism, a partition of another dtype. Frozen parameters
(`requires_grad=False`: a fine-tune's base) are no partition's: ZeRO 1/2 keeps each whole in
`frozen_param_fragments` of the model states, ZeRO-3 a padded slice per rank's model states,
joined in rank order and cut to its numel; they come between the buffers and the rest.
Written through `transforms.safetensors_out` (header first, temp name, read back and verified,
the tag folder unchanged, then renamed).
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import CorruptCheckpoint, UsageError
from ..formats import deepspeed_zero, window
from ..formats.deepspeed_zero import ZeroFolder, numel
from ..formats.pickle_safe import ITEM_SIZES, TensorRecord
from ..fs import beneath, fsops
from . import safetensors_out
from .safetensors_out import Tensor
from .split import SplitResult
from .tensor_blocks import row_major

_CHUNK = 1 << 20  # bytes per read: what the consolidation holds of the model at once
SHARD_BYTES = 5 * 10**9  # above it, shards + index: zero_to_fp32's own default max_shard_size
_CODES = safetensors_out.DTYPE_CODES
_FLOATS = ("float16", "bfloat16", "float32", "float64")  # what is cast to the output's dtype


@dataclass(frozen=True)
class _Run:
    """A contiguous range of elements in one rank file: its fd and byte start."""

    fd: int
    start: int  # byte offset of element 0 in the file
    count: int  # elements
    size: int = 4  # bytes per element (float32 partitions; a frozen fragment's, a buffer's own)


@dataclass(frozen=True)
class _Source:
    """Where an output tensor's bytes come from: runs of elements, in order."""

    runs: tuple[tuple[_Run, int, int], ...]
    cast: tuple[str, str] | None = None  # (stored dtype, output dtype) when they differ


Runs = list[tuple[_Run, int, int]]  # (run, first element, elements), in the tensor's order


def inference_path(source: Path, out_dir: Path | None = None) -> Path:
    """`save_dir/global_step3` -> `save_dir/global_step3.inference.safetensors` (beside the
    tag, never inside it: the tag folder stays DeepSpeed's)."""
    parent = out_dir if out_dir is not None else source.parent
    return parent / f"{source.name}.inference{safetensors_out.SUFFIX}"


def split(
    root: Path,
    source: Path,
    *,
    out: Path | None = None,
    replacing: fsops.Identity | None = None,
    keep_compile: bool = False,  # every splitter's signature: a DeepSpeed tag compiles nothing
    source_hash: str | None = None,
    shard_bytes: int | None = SHARD_BYTES,
) -> SplitResult:
    """Write the consolidated safetensors of the tag folder `source` (below `root`) beside it
    or into `out`; above `shard_bytes` of tensors, the folder `global_stepN.inference/` of
    `model-0000N-of-0000M.safetensors` shards and their `model.safetensors.index.json`."""
    if out is not None and not out.is_dir():
        raise UsageError(f"{out} is not a folder")
    final = inference_path(source, out)
    before = fsops.current_stat(root, [source])
    zf = deepspeed_zero.look(source, root)
    if zf.unfinished:
        raise UsageError(f"not split: {source} is not a whole save ({zf.unfinished[0]})")
    _refuse(zf, source)
    with ExitStack() as stack:
        fds: dict[str, int] = {}

        def fd_of(name: str) -> int:
            if name not in fds:
                fds[name] = beneath.open_regular(source / name, root)
                stack.callback(os.close, fds[name])
            return fds[name]

        tensors, sources = _plan(zf, source, fd_of)
        return safetensors_out.write_inference(
            root,
            source,
            final,
            tensors,
            lambda t: _bytes(sources[t.name]),
            before=before,
            like=source / zf.expected[0],  # its mode and times: a rank file's
            source_hash=source_hash,
            replacing=replacing,
            shard_bytes=shard_bytes,
        )


def _refuse(zf: ZeroFolder, source: Path) -> None:
    if zf.zero_stage not in (1, 2, 3):
        raise UsageError(f"not split: {source} has no ZeRO partitions (stage {zf.zero_stage})")
    if zf.mp_world_size != 1:
        raise UsageError(
            f"not split: {source} is model-parallel ({zf.mp_world_size} ranks): "
            "DeepSpeed's zero_to_fp32 does not consolidate it either"
        )
    top = zf.files[zf.expected[0]].obj
    if isinstance(top, dict) and top.get("shared_params"):
        raise UsageError(f"not split: {source} has tied parameters (not consolidated here)")


def _plan(zf: ZeroFolder, source: Path, fd_of: Any) -> tuple[list[Tensor], dict[str, _Source]]:
    tensors: list[Tensor] = []
    sources: dict[str, _Source] = {}

    def add(name: str, shape: tuple[int, ...], runs: Runs, stored: str, dtype: str) -> None:
        tensors.append(Tensor(name, _CODES[dtype], shape))
        sources[name] = _Source(tuple(runs), (stored, dtype) if stored != dtype else None)

    model = zf.files[zf.expected[0]]
    out = trained_dtype(zf.ds_config)
    for name, record in zf.buffers:
        dtype = out if record.dtype in _FLOATS else record.dtype
        if dtype not in _CODES or record.numel != numel(record.shape):
            raise UsageError(f"not split: buffer {name} is {record.dtype}")
        fd = fd_of(model.name)
        start = _data_start(fd, model.name, model.prefix, record)
        run = _Run(fd, start, record.numel, ITEM_SIZES[record.dtype])
        add(name, record.shape, [(run, 0, record.numel)], record.dtype, dtype)
    for name, shape in zf.frozen_shapes:
        runs, stored = _frozen(zf, source, fd_of, name, numel(shape))
        add(name, shape, runs, stored, out)
    ranks = [zf.files[name] for name in zf.optim_files()]
    key = "fp32_flat_groups" if zf.zero_stage == 3 else "single_partition_of_fp32_groups"
    flats = [[_run(source, f, fd_of, r) for r in _groups(f.obj, key, f.name)] for f in ranks]
    placed = _zero3(zf, flats) if zf.zero_stage == 3 else _zero2(zf, flats, ranks[0].obj)
    for name, shape, runs in placed:
        if name in sources:
            raise UsageError(f"not split: {source} names {name!r} twice")
        add(name, shape, runs, "float32", out)
    return tensors, sources


def trained_dtype(config: dict[str, Any]) -> str:
    """The dtype the model trained in, by its DeepSpeed config: bf16 or fp16 enabled, else
    float32 (the master weights' own)."""
    for key, dtype in (("bf16", "bfloat16"), ("bfloat16", "bfloat16"), ("fp16", "float16")):
        section = config.get(key)
        if isinstance(section, dict) and section.get("enabled") is True:
            return dtype
    return "float32"


def _frozen(zf: ZeroFolder, source: Path, fd_of: Any, name: str, n: int) -> tuple[Runs, str]:
    """A frozen parameter's element runs (whole in ZeRO 1/2's model states, a slice in each
    ZeRO-3 rank's) and its stored dtype."""
    if zf.zero_stage == 3:
        files = [f"zero_pp_rank_{r}_mp_rank_00_model_states.pt" for r in range(zf.dp_world_size)]
    else:
        files = [zf.expected[0]]
    runs: list[_Run] = []
    for file in files:
        f = zf.files[file]
        fragments = f.obj.get("frozen_param_fragments") if isinstance(f.obj, dict) else None
        record = fragments.get(name) if isinstance(fragments, dict) else None
        if not isinstance(record, TensorRecord) or record.dtype not in _FLOATS:
            raise UsageError(f"not split: {file} holds no fragment of the frozen {name}")
        if record.numel and record.stride != row_major(record.shape):
            raise UsageError(f"not split: the frozen {name} in {file} is not contiguous")
        fd = fd_of(file)
        start = _data_start(fd, file, f.prefix, record)
        runs.append(_Run(fd, start, record.numel, ITEM_SIZES[record.dtype]))
    if len({run.size for run in runs}) > 1:
        raise UsageError(f"not split: the frozen {name}'s fragments differ in dtype")
    stored = zf.files[files[0]].obj["frozen_param_fragments"][name].dtype
    return _slice(runs, 0, n), stored


def _groups(obj: Any, key: str, name: str) -> list[TensorRecord]:
    osd = obj.get("optimizer_state_dict") if isinstance(obj, dict) else None
    found = osd.get(key) if isinstance(osd, dict) else None
    if not isinstance(found, list) or not all(isinstance(t, TensorRecord) for t in found):
        raise CorruptCheckpoint(f"{name}: no {key} of tensors")
    return found


def _run(source: Path, f: deepspeed_zero.RankFile, fd_of: Any, record: TensorRecord) -> _Run:
    if record.dtype != "float32" or len(record.shape) != 1 or record.stride not in ((1,), ()):
        raise UsageError(f"not split: {f.name} holds a {record.dtype} partition")
    fd = fd_of(f.name)
    return _Run(fd, _data_start(fd, f.name, f.prefix, record), record.numel)


def _data_start(fd: int, name: str, prefix: str, record: TensorRecord) -> int:
    """The byte offset in the rank file `name` (open as `fd`) of the record's element 0,
    checked to lie with all its elements in a stored member."""
    if record.storage is None:
        raise CorruptCheckpoint(f"{name}: a tensor without storage")
    with open(fd, "rb", closefd=False) as raw, zipfile.ZipFile(raw) as archive:
        try:
            info = archive.getinfo(f"{prefix}data/{record.storage.key}")
        except KeyError as exc:
            raise CorruptCheckpoint(f"{name}: storage {record.storage.key} missing") from exc
        if info.compress_type != zipfile.ZIP_STORED:
            raise CorruptCheckpoint(f"{name}: storage {record.storage.key} is compressed")
        size = ITEM_SIZES[record.dtype]
        if record.offset < 0 or (record.offset + record.numel) * size > info.file_size:
            raise CorruptCheckpoint(f"{name}: storage {record.storage.key} is cut")
        return window.member_offset(raw, info) + record.offset * size


Placed = list[tuple[str, tuple[int, ...], Runs]]


def _slice(runs: list[_Run], first: int, count: int) -> Runs:
    """Elements [first, first + count) of the virtual concatenation of `runs`."""
    out: Runs = []
    at = 0
    for run in runs:
        if count <= 0:
            break
        if first < at + run.count:
            begin = max(0, first - at)
            take = min(run.count - begin, count)
            out.append((run, begin, take))
            first, count = first + take, count - take
        at += run.count
    if count > 0:
        raise CorruptCheckpoint("the partitions hold fewer elements than param_shapes need")
    return out


def _zero2(zf: ZeroFolder, flats: list[list[_Run]], first_rank: Any) -> Placed:
    world = zf.dp_world_size
    paddings = first_rank["optimizer_state_dict"].get("param_alignment_paddings")
    placed: Placed = []
    if len(flats[0]) != len(zf.param_shapes):
        raise CorruptCheckpoint("param groups in the partitions and in param_shapes differ")
    for g, shapes in enumerate(zf.param_shapes):
        vector = [rank[g] for rank in flats]  # the group's flat vector, rank after rank
        avail, offset = sum(r.count for r in vector), 0
        pads = paddings[g] if isinstance(paddings, list) and g < len(paddings) else None
        for i, (name, shape) in enumerate(shapes):
            placed.append((name, shape, _slice(vector, offset, numel(shape))))
            offset += numel(shape)
            if isinstance(pads, list) and i < len(pads) and isinstance(pads[i], int):
                offset += pads[i]
        align = 2 * world
        if -(-offset // align) * align != -(-avail // align) * align:
            raise CorruptCheckpoint(f"param group {g}: consumed {offset} of {avail} elements")
    return placed


def _zero3(zf: ZeroFolder, flats: list[list[_Run]]) -> Placed:
    world = zf.dp_world_size
    placed: Placed = []
    offset = 0
    for shapes in zf.param_shapes:
        for name, shape in shapes:
            n = numel(shape)
            part = -(-n // world)
            runs: Runs = []
            left = n
            for rank in flats:
                take = min(part, left)
                runs += _slice(rank, offset, take) if take else []
                left -= take
            placed.append((name, shape, runs))
            offset += part
    for r, rank in enumerate(flats):
        if sum(run.count for run in rank) != offset:
            raise CorruptCheckpoint(f"rank {r}: partition of {offset} elements expected")
    return placed


def _bytes(src: _Source) -> Iterator[bytes]:
    """A tensor's bytes in order (cast when its output dtype differs), `_CHUNK` at a time."""
    for run, first, n in src.runs:
        for piece in _read(run.fd, run.start + first * run.size, n * run.size):
            yield piece if src.cast is None else cast(piece, *src.cast)


def _read(fd: int, at: int, nbytes: int) -> Iterator[bytes]:
    end = at + nbytes
    while at < end:
        piece = os.pread(fd, min(_CHUNK, end - at), at)
        if not piece:
            raise CorruptCheckpoint("a partition file ends early")
        at += len(piece)
        yield piece


def cast(piece: bytes, stored: str, out: str) -> bytes:
    """`piece` (whole elements of `stored`) as `out`, as torch casts: through float32 (exact
    from float16/bfloat16), then to float16 (IEEE round to nearest even, as numpy) or bfloat16
    (round to nearest even on the upper 16 bits, NaN as 0x7FC0: c10's round_to_nearest_even)."""
    if stored == "bfloat16":
        values = (np.frombuffer(piece, dtype="<u2").astype("<u4") << np.uint32(16)).view("<f4")
    else:
        values = np.frombuffer(
            piece, dtype={"float16": "<f2", "float32": "<f4", "float64": "<f8"}[stored]
        )
        values = values.astype("<f4")
    if out == "float32":
        return values.tobytes()
    if out == "float16":
        return values.astype("<f2").tobytes()
    bits = values.view("<u4")
    rounded = (bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(
        16
    )
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return np.where(nan, np.uint32(0x7FC0), rounded).astype("<u2").tobytes()
