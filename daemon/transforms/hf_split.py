"""Split a Hugging Face Trainer `checkpoint-N/` folder into an inference folder that
`from_pretrained` loads: the folder without its optimizer, scheduler, RNG and trainer state.

What goes in: every regular file at the folder's top level except the training state
(`TRAINING_STATE`: `optimizer.pt`, `scheduler.pt`, `scaler.pt`, `rng_state*.pth`,
`trainer_state.json`, `training_args.bin`): `config.json`, `generation_config.json`, the weights
(`model.safetensors`, `pytorch_model.bin`, their shards and index), tokenizer and processor files,
custom code. Subfolders (DeepSpeed's `global_step*/`, FSDP's sharded state) are training state
too: left out and named in the result. Each file is a byte copy (a reflink clone where the
filesystem shares blocks, else an in-kernel copy; never a hard link: the checkpoint may go to
the trash later, and a trainer may rewrite it); none is rewritten, so `from_pretrained` reads
exactly the bytes the Trainer wrote.

Where it goes: beside the checkpoint, `checkpoint-N` -> `inference-N` (a folder of another name
`<name>.inference`), never a name the Trainer's rotation takes (`checkpoint-*`: it would delete
it) and never inside the checkpoint (a new file there makes the folder "newest" by mtime, and
`save_total_limit` then deletes the real newest). The checkpoint folder is only read: its mtime
is checked unchanged at the end.

How: a temp folder beside the final name (`fsclone.new_folder`, `.ckpt-tmp-…`, which discovery
never enters and `fsops.remove_stale_temps` removes after a crash), each file copied (the
source's bytes hashed just before), our marker (`marker.FOLDER_FILE`) written; then nothing in
it but what was planned, every copy hashed against its source's hash, the copy read as a
checkpoint reader reads it (`formats.hf_weights`: safetensors headers against their sizes, the
index's shards all there, the same parameter count), the source unchanged (its files and the
folder's own mtime), and only then the no-clobber rename. The folder takes the checkpoint
folder's mode and times. The source's bytes are read twice (hashed, copied), the copy's once
(hashed file by file against the source and as a whole for the catalog in the same pass);
written once (not at all when the filesystem clones).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import ArtifactMismatch, CorruptCheckpoint, UsageError
from ..core.model import FileStat
from ..formats import hf_weights
from ..fs import folder_layouts, fsclone, fsops, hashing
from . import marker
from .split import SplitResult

TRAINING_STATE = frozenset(
    {"optimizer.pt", "scheduler.pt", "scaler.pt", "trainer_state.json", "training_args.bin"}
)
_TRAINING_STATE = re.compile(r"^(rng_state(_\d+)?\.pth|optimizer(_\d+)?\.(pt|bin))$")
# DeepSpeed's, in a Trainer folder saved under it: `latest` names the tag folder of optimizer
# partitions (the folder's optimizer state); its two scripts consolidate that tag.
DEEPSPEED_STATE = frozenset({"latest", "zero_to_fp32.py", "zero_to_torch.py"})
_ROTATED = re.compile(r"^checkpoint-")  # what the Trainer's rotation globs (`checkpoint-*`)


@dataclass(frozen=True)
class Plan:
    """What the inference folder of `source` holds, and what it leaves out."""

    source: Path
    kept: tuple[Path, ...]  # the files copied, by name
    dropped: tuple[str, ...]  # training state left out ("global_step6/" for a folder)


def inference_path(source: Path, out_dir: Path | None = None) -> Path:
    """`checkpoint-6` -> `inference-6` beside it (or in `out_dir`); any other name gets
    `.inference`. Never a `checkpoint-*` name: the Trainer's rotation would delete it."""
    rotated = _ROTATED.match(source.name)
    name = f"inference-{source.name[rotated.end() :]}" if rotated else f"{source.name}.inference"
    return (out_dir if out_dir is not None else source.parent) / name


def is_training_state(name: str) -> bool:
    return name in TRAINING_STATE or name in DEEPSPEED_STATE or bool(_TRAINING_STATE.match(name))


def _deepspeed_tag(source: Path, dropped: list[str]) -> str | None:
    """The DeepSpeed tag folder `latest` names, when it is among the dropped subfolders."""
    if "latest" not in dropped:
        return None
    try:
        with open(source / "latest", "rb") as f:
            tag = f.read(4096).decode("utf-8", "replace").strip()
    except OSError:
        return None
    return tag if f"{tag}/" in dropped else None


def plan(source: Path) -> Plan:
    """The files to copy; UsageError for a folder that has nothing to split or that
    `from_pretrained` could not load (no config.json, no weights)."""
    kept, dropped = [], []
    for entry in sorted(os.scandir(source), key=lambda e: e.name):
        if folder_layouts.is_temp_name(entry.name):
            continue  # a writer's (or our) temp file: never a member
        if entry.is_symlink():
            raise UsageError(f"not split: {entry.path} is a symlink (never followed)")
        if entry.is_dir(follow_symlinks=False):
            dropped.append(entry.name + "/")
        elif not entry.is_file(follow_symlinks=False):
            raise UsageError(f"not split: {entry.path} is not a regular file")
        elif is_training_state(entry.name):
            dropped.append(entry.name)
        else:
            kept.append(Path(entry.path))
    names = {p.name for p in kept}
    tag = _deepspeed_tag(source, dropped)
    if "optimizer.pt" not in dropped and tag is None:
        raise UsageError(f"nothing to split: {source} has no optimizer state (optimizer.pt)")
    if folder_layouts.HF_CONFIG not in names:
        raise UsageError(f"not split: {source} has no config.json: from_pretrained needs it")
    if not any(folder_layouts.is_hf_weights(n) for n in names):
        only = f": its only copy is DeepSpeed's partitions in {tag}/ (ZeRO-3)" if tag else ""
        raise UsageError(f"not split: {source} has no weights file{only}")
    return Plan(source, tuple(kept), tuple(dropped))


def split(
    root: Path,
    source: Path,
    *,
    out: Path | None = None,
    replacing: fsops.Identity | None = None,
    keep_compile: bool = False,  # every splitter's signature: an HF folder compiles nothing
    source_hash: str | None = None,
) -> SplitResult:
    """Write the inference folder of the HF folder `source` (below `root`) beside it or into
    `out`; nothing there is ever replaced (WouldReplace). Refused (and nothing left behind) if
    the checkpoint changed meanwhile; ArtifactMismatch if the copy does not verify. `replacing`
    given: the folder there is this checkpoint's own (the caller checked): re-verified against
    the source and kept as it is."""
    if out is not None and not out.is_dir():
        raise UsageError(f"{out} is not a folder")
    final = inference_path(source, Path(os.path.abspath(out)) if out is not None else None)
    refuse_rotated(root, final)
    if final.parent.is_relative_to(source):
        raise UsageError(f"not split into {final.parent}: nothing is written into the checkpoint")
    planned = plan(source)
    expected = hf_weights.read_weights(source, frozenset(p.name for p in planned.kept), root)
    folder_before = _folder_stat(source)
    before = fsops.current_stat(root, planned.kept)  # also refuses a source outside `root`
    if replacing is not None:
        digests = {src.name: hashing.hash_files([src], root) for src in planned.kept}
        size, digest = verify(root, final, digests, expected.n_params)
        _check_unchanged(root, planned, before, folder_before)
        return SplitResult(source, final, size, digest, folder_bytes(source), len(digests))
    mark = marker.encode("inference", source, source_hash)
    with fsclone.new_folder(root, final, like=source) as temp:
        try:
            digests = {src.name: _copy(root, src, temp / src.name) for src in planned.kept}
            fsops.atomic_write(root, temp / marker.FOLDER_FILE, marker.folder_file(mark))
            size, digest = verify(root, temp, digests, expected.n_params)
        except Exception as exc:
            _check_unchanged(root, planned, before, folder_before, exc)
            raise
        _check_unchanged(root, planned, before, folder_before)  # the last look, before the rename
    return SplitResult(source, final, size, digest, folder_bytes(source), len(planned.kept))


def refuse_rotated(root: Path, final: Path) -> None:
    """Never a folder the Trainer's rotation takes; never one put into a `checkpoint-*` folder
    (a new entry changes its mtime: the rotation would then keep it and delete the newest) nor
    anywhere inside a Trainer checkpoint `checkpoint-<N>` (it would become part of it)."""
    if _ROTATED.match(final.name):
        raise UsageError(f"not split: {final.name} is a name the Trainer's rotation deletes")
    parts = fsops.relative_parts(root, final)[:-1]
    inside = [p for p in parts if folder_layouts.TRAINER_FOLDER.match(p)]
    if inside or (parts and _ROTATED.match(parts[-1])):
        raise UsageError(
            f"not split into {final.parent}: it is inside a Trainer checkpoint folder "
            f"({(inside or parts)[-1]}), whose mtime the Trainer's save_total_limit rotation reads"
        )


def verify(
    root: Path, folder: Path, digests: dict[str, str], n_params: int | None
) -> tuple[int, str]:
    """The inference folder (or its temp) against its source: exactly the copied files (their
    source's hashes in `digests`, taken from the source's bytes) and our marker, each file
    re-hashed, read back as a checkpoint reader reads it. Returns its bytes and the hash of
    its files (`fs.hashing.hash_artifact`'s, the catalog's), from the same read."""
    files = sorted(folder_layouts.tree_files(folder))  # every regular file, sorted
    names = sorted(p.name for p in files)
    wanted = sorted([*digests, marker.FOLDER_FILE])
    if names != wanted or any(p.parent != folder for p in files):
        raise ArtifactMismatch(f"inference folder holds {names}, not {wanted}")
    each, whole = hashing.hash_each_and_all(files, root)
    for path, found in zip(files, each, strict=True):
        if path.name in digests and found != digests[path.name]:
            raise ArtifactMismatch(f"inference folder: {path.name} differs from its source")
    try:
        found_weights = hf_weights.read_weights(folder, frozenset(digests), root)
    except CorruptCheckpoint as exc:
        raise ArtifactMismatch(f"inference folder does not read as weights: {exc}") from exc
    if found_weights.n_params != n_params:
        raise ArtifactMismatch(
            f"inference folder holds {found_weights.n_params} parameters, its source {n_params}"
        )
    return sum(p.stat().st_size for p in files), whole


def _copy(root: Path, src: Path, target: Path) -> str:
    """`src` copied to `target` (a reflink where possible); returns the hash of the source's
    bytes, taken just before the copy (`verify` hashes the copy against it)."""
    expected = hashing.hash_files([src], root)
    fsclone.clone_new(root, src, target, lambda _temp: None)
    return expected


def folder_bytes(folder: Path) -> int:
    """The checkpoint's bytes: every regular file in the folder and below (the optimizer and
    trainer state too), so "N% of checkpoint-96" compares the artifact with the whole folder,
    not with the files copied into it. Links are never followed."""
    total = 0
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
            total += folder_bytes(Path(entry.path))
        elif entry.is_file(follow_symlinks=False):
            total += entry.stat(follow_symlinks=False).st_size
    return total


def _folder_stat(folder: Path) -> tuple[int, int]:
    info = os.lstat(folder)
    return info.st_ino, info.st_mtime_ns


def _check_unchanged(
    root: Path,
    planned: Plan,
    before: FileStat,
    folder_before: tuple[int, int],
    cause: BaseException | None = None,
) -> None:
    """The checkpoint is still what was copied: its files' stat, and the folder's own (a save
    into it, a file added or removed, changes its mtime; we never do)."""
    try:
        now: FileStat | None = fsops.current_stat(root, planned.kept)
        folder_now: tuple[int, int] | None = _folder_stat(planned.source)
    except FileNotFoundError:
        now = folder_now = None
    if now != before or folder_now != folder_before:
        raise fsops.Refused(
            f"{planned.source} changed while being split: inference folder discarded"
        ) from cause
