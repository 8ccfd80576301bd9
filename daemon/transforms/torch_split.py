"""Split a `torch.save` zip (a `.pt`/`.pth` training checkpoint, a Lightning `.ckpt`) into an
inference `.safetensors` of its model's state dict; the original stays the resume artifact.

Written without torch: the restricted unpickler (`formats.pickle_safe`) gives each model tensor
as a record (dtype, shape, stride, storage offset, storage key), and the tensor's bytes are
copied from its storage member `<prefix>/data/<key>` (STORED, a byte range of the file) into a
safetensors file whose header we write ourselves (8-byte length, JSON, space padding to 8).
A view (a slice at an offset, a transpose, a tensor sharing its storage with others) is copied
element by element in the tensor's own order (`transforms.tensor_blocks`: a strided numpy
view of the mapped storage, an unsigned integer of the dtype's width: bfloat16 and float8 bytes
move untouched), so each saved tensor holds exactly what `torch.load` would give. Refused with
the reason: a legacy (pre-1.6) file, a big-endian file, a dtype safetensors has no name for
(quantized, complex32), a storage that does not hold the view, two tensors under one name.

The file itself is written and verified by `transforms.safetensors_out` (header, streamed
bytes, read back and hashed against the copy before the rename); the source is checked
unchanged right before the rename.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import IO

from ..core.errors import UsageError
from ..core.model import Format
from ..formats import pickle_safe, torch_state, torch_zip, window
from ..fs import fsops
from . import safetensors_out
from .safetensors_out import Tensor
from .split import SplitResult
from .tensor_blocks import Chunk, Planned, storage_starts, tensor_bytes

SUFFIX = safetensors_out.SUFFIX


def inference_path(source: Path, out_dir: Path | None = None) -> Path:
    """`full.pt` -> `full.inference.safetensors`, `last.ckpt` -> `last.inference.safetensors`;
    a kept version `best.pt.v3` -> `best.pt.v3.inference.safetensors` (its generation stays in
    the name: every version of `best.pt` would otherwise claim one artifact's name)."""
    generation = source.suffix[2:].isdigit() and source.suffix.startswith(".v")
    stem = source.stem if source.suffix and not generation else source.name
    return (out_dir if out_dir is not None else source.parent) / f"{stem}.inference{SUFFIX}"


def split(
    root: Path,
    source: Path,
    *,
    out: Path | None = None,
    replacing: fsops.Identity | None = None,
    keep_compile: bool = False,  # every splitter's signature: a torch file compiles nothing
    source_hash: str | None = None,
) -> SplitResult:
    """Write the inference `.safetensors` of the torch zip `source` (below `root`) beside it or
    into `out`; never replaces anything but `replacing` (this checkpoint's own artifact).
    UsageError for what is not split (see the module doc), CorruptCheckpoint for a storage
    that does not hold its tensors, ArtifactMismatch if the written file does not verify."""
    if out is not None and not out.is_dir():
        raise UsageError(f"{out} is not a folder")
    final = inference_path(source, out)
    before = fsops.current_stat(root, [source])  # also refuses a source outside `root`
    with open(source, "rb") as raw:
        if torch_zip.is_legacy(raw.read(len(torch_zip.LEGACY_MAGIC))):
            raise UsageError(
                f"not split: {source} is a legacy (pre-1.6) torch file: re-save it with a "
                "current torch (its storages are not a zip's members to copy)"
            )
        raw.seek(0)
        try:
            archive = zipfile.ZipFile(raw)
        except zipfile.BadZipFile as exc:
            raise UsageError(f"not split: {source} is not a torch zip ({exc})") from exc
        with archive:
            plan = _plan(archive, raw, source)
        by_name = {p.out.name: p for p in plan}
        return safetensors_out.write_inference(
            root,
            source,
            final,
            [p.out for p in plan],
            lambda t: tensor_bytes(by_name[t.name], lambda _file: raw.fileno()),
            before=before,
            like=source,
            source_hash=source_hash,
            replacing=replacing,
        )


def _plan(archive: zipfile.ZipFile, raw: IO[bytes], source: Path) -> list[Planned]:
    """Each model tensor whole, one piece where its storage member lies in the zip."""
    member = torch_zip.pickle_member(archive)
    if member is None:
        raise UsageError(f"not split: {source} is a zip but not a torch file")
    prefix = member[: -len(torch_zip.PICKLE_MEMBER)]
    if _byteorder(archive, prefix) != "little":
        raise UsageError(f"not split: {source} was saved big-endian (safetensors is little)")
    obj = pickle_safe.load(window.read_member(archive, member, pickle_safe.MAX_PICKLE_BYTES))
    torch_state.interpret(obj, Format.TORCH_ZIP)  # the reader's bounds and refusals
    if not torch_state.optimizer_state_of(obj):
        raise UsageError(f"nothing to split: {source} has no optimizer state")
    tensors = torch_state.model_tensors_of(obj)
    if not tensors:
        raise UsageError(f"not split: {source} holds no model tensors")
    outs: dict[str, Tensor] = {}
    for name, record in tensors:
        if name in outs or name == "__metadata__":
            raise UsageError(f"not split: {source} names two tensors {name!r}")
        code = safetensors_out.dtype_code(f"{name} of {source}", record.dtype)
        outs[name] = Tensor(name, code, tuple(record.shape))
    starts = storage_starts(raw, archive, tensors, source.name)
    return [
        Planned(
            outs[name],
            pickle_safe.ITEM_SIZES[record.dtype],
            (Chunk(source.name, starts[name], record, (0,) * len(record.shape)),),
        )
        for name, record in tensors
    ]


def _byteorder(archive: zipfile.ZipFile, prefix: str) -> str:
    try:
        return archive.read(f"{prefix}byteorder").decode(errors="replace").strip()
    except KeyError:
        return "little"  # torch < 1.13 wrote no byteorder member: always little-endian
