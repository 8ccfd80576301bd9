"""Folder checkpoints: the registry of folder layouts that make one checkpoint of a whole folder.

A folder checkpoint is ONE catalog entry whose path is the folder; its files (names, sizes, one
hash over them) are its members, its completeness is judged as a whole by its format's reader
(`formats.folder_readers`), and trash, restore and purge move it as one unit. A layout only
*recognises* a folder from the names in it (no file is opened here); what the files say is the
reader's business.

A layout is a format row's (`core.families`: `layout`); a folder format is added by its row and
its module, nothing here. Its reader (the row's `reader`) runs in the reader child, under its
limits, and raises `CorruptCheckpoint`/`NotReady` for what is missing: the indexer turns that
into `incomplete` while the folder is young and `corrupt` once it has settled. Files inside its
folders whose names the watcher would not map to the folder are its `announces`' (the service
then re-reads the folder, never the file alone).

A claim says whether the folder is *whole*: every file under it belongs to the checkpoint, so
discovery does not descend into it and trash renames the folder itself. A folder that also holds
other runs' checkpoints (a Trainer `output_dir` with its final `save_pretrained` files beside its
`checkpoint-N/` folders) is claimed with its own files only, and its subfolders are walked on.

Traps (docs/checkpoints.md): the Hugging Face Trainer rotates `output_dir/checkpoint-*` folders
by mtime, so nothing of ours is ever written into a checkpoint folder (its mtime would make it
"newest") and no folder of ours is ever named `checkpoint-*`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..core.families import resolve, rows
from ..core.model import Format
from .temp_names import TEMP_PREFIX


@dataclass(frozen=True)
class Claim:
    """What a layout says of one folder."""

    family: str  # the `Format` value of the checkpoint (its reader's key)
    members: tuple[Path, ...]  # every file of the checkpoint, sorted, symlinks excluded
    whole: bool  # the folder is the checkpoint: not descended into, moved as one unit


@dataclass(frozen=True)
class FolderLayout:
    """A kind of folder checkpoint, recognised from the names in the folder alone."""

    family: str
    # (folder name, its file names, its subfolder names) -> is it one of ours?
    recognises: Callable[[str, frozenset[str], frozenset[str]], bool]
    # A file name inside such a folder that the watcher must map to the folder (pure).
    announces: Callable[[str, str], bool]
    # (folder name, file names, subfolder names) -> does the checkpoint own its subfolders?
    owns_subfolders: Callable[[str, frozenset[str], frozenset[str]], bool] = (
        lambda _name, _files, _dirs: True
    )


# ---- Hugging Face: Trainer `checkpoint-N/` folders and `save_pretrained` model folders ----

TRAINER_FOLDER = re.compile(r"^checkpoint-\d+$")
HF_CONFIG = "config.json"
ADAPTER_CONFIG = "adapter_config.json"  # a PEFT adapter's (formats.peft_adapter)
TRAINER_STATE = "trainer_state.json"
TRAINER_FILES = frozenset(
    {TRAINER_STATE, "optimizer.pt", "scheduler.pt", "training_args.bin", "scaler.pt"}
)
_WEIGHTS = re.compile(
    r"^(model|pytorch_model|adapter_model|tf_model|flax_model)"
    r"(-\d{5}-of-\d{5})?\.(safetensors|bin|h5|msgpack)(\.index\.json)?$"
)
_RNG_STATE = re.compile(r"^rng_state(_\d+)?\.pth$")
_INDEX = re.compile(r"\.(safetensors|bin)\.index\.json$")


def is_hf_weights(name: str) -> bool:
    return bool(_WEIGHTS.match(name))


def _hf_recognises(name: str, files: frozenset[str], _dirs: frozenset[str]) -> bool:
    weights = any(_WEIGHTS.match(f) for f in files)
    if any(_INDEX.search(f) for f in files):
        return True  # a sharded model: one checkpoint, whatever else is there
    if TRAINER_FOLDER.match(name):  # the Trainer's: claimed from its first file on
        return weights or bool(files & TRAINER_FILES) or HF_CONFIG in files
    return weights and bool(files & {HF_CONFIG, TRAINER_STATE, ADAPTER_CONFIG})


def _hf_announces(folder_name: str, name: str) -> bool:
    if TRAINER_FOLDER.match(folder_name):
        return True
    return bool(
        name in TRAINER_FILES
        or name in (HF_CONFIG, ADAPTER_CONFIG)
        or _RNG_STATE.match(name)
        or _INDEX.search(name)
        or (_WEIGHTS.match(name) and "-of-" in name)
    )


def _hf_owns_subfolders(name: str, _files: frozenset[str], dirs: frozenset[str]) -> bool:
    # A Trainer's checkpoint folder is always moved whole (a file moved out of it would change
    # its mtime: the rotation trap); an output_dir keeps its checkpoint-N folders apart.
    return bool(TRAINER_FOLDER.match(name)) or not any(TRAINER_FOLDER.match(d) for d in dirs)


HF_FOLDER_LAYOUT = FolderLayout(
    family=Format.HF_FOLDER.value,
    recognises=_hf_recognises,
    announces=_hf_announces,
    owns_subfolders=_hf_owns_subfolders,
)

# ---- async saves: Orbax step folders and torch.distributed.checkpoint folders ----

# `<step>/` or, while in flight, `<step>.orbax-checkpoint-tmp[-<timestamp>]` (formats.orbax_step)
ORBAX_STEP_FOLDER = re.compile(r"^\d+(\.orbax-checkpoint-tmp(-\d+)?)?$")
ORBAX_STEP_METADATA = "_CHECKPOINT_METADATA"  # written first, rewritten at commit
DCP_METADATA = ".metadata"  # written last by the coordinator (formats.dcp_folder)
DCP_DATA = re.compile(r"^__\d+_\d+\.distcp$")


def _orbax_recognises(name: str, files: frozenset[str], _dirs: frozenset[str]) -> bool:
    # an in-flight name alone is Orbax's: a writer killed early leaves no metadata in it
    in_flight = ".orbax-checkpoint-tmp" in name
    return bool(ORBAX_STEP_FOLDER.match(name)) and (in_flight or ORBAX_STEP_METADATA in files)


def _orbax_announces(folder_name: str, _name: str) -> bool:
    return bool(ORBAX_STEP_FOLDER.match(folder_name))


def _dcp_recognises(_name: str, files: frozenset[str], _dirs: frozenset[str]) -> bool:
    return DCP_METADATA in files or any(DCP_DATA.match(f) for f in files)


def _dcp_announces(_folder_name: str, name: str) -> bool:
    return name == DCP_METADATA or bool(DCP_DATA.match(name))


ORBAX_LAYOUT = FolderLayout(
    family=Format.ORBAX.value, recognises=_orbax_recognises, announces=_orbax_announces
)
DCP_LAYOUT = FolderLayout(
    family=Format.TORCH_DCP.value, recognises=_dcp_recognises, announces=_dcp_announces
)

# ---- DeepSpeed ZeRO: a tag folder `global_stepN/` of per-rank states (formats.deepspeed_zero) ----

_ZERO_FILE = re.compile(
    r"^(mp_rank_\d+_model_states|(bf16_)?zero_pp_rank_\d+_mp_rank_\d+_(model|optim)_states)\.pt$"
)


def _zero_recognises(_name: str, files: frozenset[str], _dirs: frozenset[str]) -> bool:
    return any(_ZERO_FILE.match(f) for f in files)


def _zero_announces(_folder_name: str, name: str) -> bool:
    return bool(_ZERO_FILE.match(name))


DEEPSPEED_LAYOUT = FolderLayout(
    family=Format.DEEPSPEED_ZERO.value, recognises=_zero_recognises, announces=_zero_announces
)


def layouts() -> list[FolderLayout]:
    """The layouts discovery tries, the format rows' in order, first match wins. SavedModel
    folders are found by discovery's own markers (fs.discovery.SAVED_MODEL_MARKERS) first."""
    return [resolve(r.layout) for r in rows() if r.layout is not None]


def claim(folder: Path, files: frozenset[str], dirs: frozenset[str]) -> Claim | None:
    """The layout claim on `folder` (its regular file names and subfolder names), if any."""
    for layout in layouts():
        if layout.recognises(folder.name, files, dirs):
            whole = layout.owns_subfolders(folder.name, files, dirs)
            members = tuple(tree_files(folder) if whole else (folder / f for f in sorted(files)))
            return Claim(layout.family, members, whole)
    return None


def claim_of(folder: Path) -> Claim | None:
    """`claim` after listing `folder` (symlinks are neither files nor folders here)."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return None
    files = frozenset(
        e.name for e in entries if e.is_file(follow_symlinks=False) and not is_temp_name(e.name)
    )
    dirs = frozenset(e.name for e in entries if e.is_dir(follow_symlinks=False))
    return claim(folder, files, dirs)


def announced_folder(path: Path) -> Path | None:
    """The folder a file's event should re-read as a whole (pure: names only), or None."""
    folder = path.parent
    if TRAINER_FOLDER.match(folder.parent.name) and _ZERO_FILE.match(path.name):
        return folder.parent  # DeepSpeed's tag inside a Trainer folder: the Trainer folder's
    if any(layout.announces(folder.name, path.name) for layout in layouts()):
        return folder
    return None


def tree_files(folder: Path) -> Iterator[Path]:
    """Every regular file under `folder`, sorted per folder; symlinks are never followed."""
    for dirpath, dirs, files in os.walk(folder, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            path = Path(dirpath) / name
            if not path.is_symlink() and not is_temp_name(name):
                yield path


# Writers' temp files inside a folder being saved (safetensors' `.tmpXXXXXX`, TF's
# `.tempstate`, ours): never a member. A superset of fs.discovery's temp names.
_TEMP = re.compile(rf"(\.tempstate\d*$|\.tmp\w*$|^{re.escape(TEMP_PREFIX)})")


def is_temp_name(name: str) -> bool:
    """A writer's temp file inside a folder checkpoint (never a member)."""
    return bool(_TEMP.search(name))
