"""Write a safetensors file (or a folder of shards with its index) from tensors streamed in
order, without torch or the safetensors package: every splitter and consolidator writes
through this one module.

The caller names every tensor up front (`Tensor`: name, safetensors dtype code, shape), so the
header (8-byte length, JSON, space padding to 8 as the reference writer pads) is written first;
then each tensor's bytes are asked of the caller in that order (`chunks(tensor)`, any number of
pieces: memory stays what one piece holds). Above `shard_bytes` of tensor data the output is
a folder of `model-0000N-of-0000M.safetensors` plus `model.safetensors.index.json` (the names
`from_pretrained` reads), tensors kept whole and in order, a shard closed before it would
pass the bound.

Nothing reaches the final name unverified: a single file goes through `fsops.rewrite`, a shard
folder through `fsclone.new_folder` (a temp name in the same folder, renamed when the block
ends); before the rename each file is read back by our own safetensors reader (header
consistent with its size, the same parameter count), every tensor's bytes are hashed from the
file against the hash taken while writing them, and the caller's `before_rename` (the source
unchanged) runs last. A piece stream longer or shorter than its tensor is refused there and then.
A splitter's artifact goes through `write_inference`: marked as the source's, the source checked
unchanged before the rename and after a failure (a rewrite under us explains the error).
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import ArtifactMismatch, CorruptCheckpoint, UsageError
from ..core.model import FileStat
from ..formats import safetensors_file
from ..fs import fsclone, fsops, hashing
from . import marker
from .split import SplitResult, check_unchanged

SUFFIX = ".safetensors"
INDEX_NAME = "model.safetensors.index.json"
METADATA_FORMAT = {"format": "pt"}  # what transformers' loaders look for
DTYPE_CODES = {v: k for k, v in safetensors_file.TORCH_DTYPES.items()}  # torch's name -> code
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Tensor:
    """One tensor of the output, named before any byte is written."""

    name: str
    dtype: str  # safetensors' code: "F32", "BF16", ...
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * safetensors_file.DTYPE_SIZES[self.dtype]


@dataclass(frozen=True)
class Written:
    """What `write` left at its final name."""

    path: Path  # the safetensors file, or the folder of shards
    files: tuple[Path, ...]  # the safetensors files (one, or the shards in order)
    bytes: int  # on disk, index included
    hash: str  # fs.hashing.hash_files(files)
    tensors: int


Chunks = Callable[[Tensor], Iterable[bytes]]


@dataclass
class _File:
    name: str
    tensors: list[Tensor] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)


def dtype_code(name: str, dtype: str) -> str:
    """The safetensors code of torch's `dtype`; UsageError for one safetensors cannot hold."""
    code = DTYPE_CODES.get(dtype)
    if code is None:
        raise UsageError(f"not split: tensor {name} is {dtype}, which safetensors cannot hold")
    return code


def shard_names(count: int) -> list[str]:
    """HF's names: `model-00001-of-00003.safetensors` ..."""
    return [f"model-{i + 1:05d}-of-{count:05d}{SUFFIX}" for i in range(count)]


def plan(tensors: Sequence[Tensor], shard_bytes: int | None) -> list[list[Tensor]]:
    """The tensors by output file: one list, or shards of at most `shard_bytes` of data each
    (a tensor bigger than the bound alone in its shard)."""
    check_names(tensors)
    total = sum(t.nbytes for t in tensors)
    if shard_bytes is None or total <= shard_bytes:
        return [list(tensors)]
    if shard_bytes <= 0:
        raise UsageError(f"shard size must be positive, not {shard_bytes}")
    groups: list[list[Tensor]] = [[]]
    size = 0
    for t in tensors:
        if groups[-1] and size + t.nbytes > shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(t)
        size += t.nbytes
    return groups


def check_names(tensors: Sequence[Tensor]) -> None:
    seen: set[str] = set()
    for t in tensors:
        if t.name in seen or t.name == "__metadata__":
            raise UsageError(f"not written: two tensors named {t.name!r}")
        if t.dtype not in safetensors_file.DTYPE_SIZES:
            raise UsageError(f"tensor {t.name}: dtype {t.dtype!r} is not a safetensors dtype")
        seen.add(t.name)


def header(tensors: Sequence[Tensor], metadata: dict[str, str]) -> bytes:
    """The 8-byte length and the JSON header of a file holding `tensors` in order."""
    entries: dict[str, object] = {"__metadata__": {**METADATA_FORMAT, **metadata}}
    at = 0
    for t in tensors:
        entries[t.name] = {
            "dtype": t.dtype,
            "shape": list(t.shape),
            "data_offsets": [at, at + t.nbytes],
        }
        at += t.nbytes
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)  # the reference writer's padding: data 8-aligned
    return struct.pack("<Q", len(text)) + text


def write(
    root: Path,
    final: Path,
    tensors: Sequence[Tensor],
    chunks: Chunks,
    *,
    like: Path,
    metadata: dict[str, str] | None = None,
    shard_bytes: int | None = None,
    replacing: fsops.Identity | None = None,
    before_rename: Callable[[], None] | None = None,
) -> Written:
    """Write `tensors` (their bytes from `chunks`, called once per tensor in order) to `final`
    (a `.safetensors` below `root`), or, above `shard_bytes`, to the folder `final` without its
    suffix (`x.safetensors` -> `x/`); the output takes the mode and times of `like` (a folder
    output those of `like`'s folder when `like` is a file). Never replaces anything but
    `replacing`."""
    groups = plan(tensors, shard_bytes)
    meta = dict(metadata or {})
    if len(groups) == 1:
        with fsops.rewrite(root, final, like=like, replacing=replacing) as temp:
            done = _write_file(temp, groups[0], chunks, meta)
            _verify(temp, done)
            if before_rename is not None:
                before_rename()
            digest, size = hashing.hash_files([temp]), temp.stat().st_size
        return Written(final, (final,), size, digest, len(tensors))
    folder = final.with_suffix("") if final.suffix == SUFFIX else final
    like_folder = like if like.is_dir() else like.parent
    names = shard_names(len(groups))
    with fsclone.new_folder(root, folder, like=like_folder) as temp:
        weight_map: dict[str, str] = {}
        for name, group in zip(names, groups, strict=True):
            done = _write_file(temp / name, group, chunks, meta)
            _verify(temp / name, done)
            weight_map |= {t.name: name for t in group}
        index = {
            "metadata": {"total_size": sum(t.nbytes for t in tensors)},
            "weight_map": weight_map,
        }
        with open(temp / INDEX_NAME, "x") as f:
            f.write(json.dumps(index, indent=2) + "\n")
        if before_rename is not None:
            before_rename()
        paths = [temp / n for n in names]
        digest = hashing.hash_files(paths)
        size = sum(p.stat().st_size for p in paths) + (temp / INDEX_NAME).stat().st_size
    return Written(folder, tuple(folder / n for n in names), size, digest, len(tensors))


def write_inference(
    root: Path,
    source: Path,
    final: Path,
    tensors: Sequence[Tensor],
    chunks: Chunks,
    *,
    before: FileStat,
    like: Path,
    source_hash: str | None,
    replacing: fsops.Identity | None,
    shard_bytes: int | None = None,
) -> SplitResult:
    """`write` of the inference artifact of `source` (as it was `before`): marked as its
    artifact (`transforms.marker`), the source checked unchanged right before the rename."""
    mark = marker.encode("inference", source, source_hash)
    try:
        written = write(
            root,
            final,
            tensors,
            chunks,
            like=like,
            metadata={marker.ATTRIBUTE: mark},
            shard_bytes=shard_bytes,
            replacing=replacing,
            before_rename=lambda: check_unchanged(root, source, before),  # the last look
        )
    except Exception as exc:
        check_unchanged(root, source, before, exc)  # a rewrite under us explains the error
        raise
    return SplitResult(source, written.path, written.bytes, written.hash, before.size, len(tensors))


def _write_file(path: Path, tensors: list[Tensor], chunks: Chunks, meta: dict[str, str]) -> _File:
    done = _File(path.name, tensors)
    with open(path, "xb") as out:
        out.write(header(tensors, meta))
        for t in tensors:
            h, left = hashlib.blake2b(digest_size=16), t.nbytes
            for piece in chunks(t):
                if len(piece) > left:
                    raise CorruptCheckpoint(f"tensor {t.name}: more bytes than its shape holds")
                h.update(piece)
                out.write(piece)
                left -= len(piece)
            if left:
                raise CorruptCheckpoint(f"tensor {t.name}: {left} of its bytes missing")
            done.digests.append(h.hexdigest())
    return done


def _verify(path: Path, done: _File) -> None:
    """The file as a safetensors reader sees it, and each tensor's bytes as written."""
    with open(path, "rb") as f:
        try:
            info = safetensors_file.read(f)
        except CorruptCheckpoint as exc:
            raise ArtifactMismatch(f"{done.name} is not a valid safetensors: {exc}") from exc
        if info.n_params != sum(math.prod(t.shape) for t in done.tensors):
            raise ArtifactMismatch(f"{done.name}: parameter count differs from its source")
        f.seek(0)
        (n,) = struct.unpack("<Q", f.read(8))
        at = 8 + n
        for t, expected in zip(done.tensors, done.digests, strict=True):
            f.seek(at)
            h, left = hashlib.blake2b(digest_size=16), t.nbytes
            while left:
                piece = f.read(min(_CHUNK, left))
                if not piece:
                    break
                h.update(piece)
                left -= len(piece)
            if left or h.hexdigest() != expected:
                raise ArtifactMismatch(f"{done.name} differs from its source: {t.name}")
            at += t.nbytes
