"""The names that make a folder one sharded checkpoint of a large-model stack (issue 44), from
its entries alone (no file opened): FSDP2 / verl per-rank files, Megatron `iter_N/` folders.

Their `FolderLayout`s are at the end, named by the formats' rows (`core.families`);
`formats.rank_files` and `formats.megatron` read what the files say:

- a folder holding `model_world_size_W_rank_R.pt` (and `optim_`, `extra_state_` ones): verl's
  `global_step_N/actor/`, one checkpoint of every rank's files;
- `iter_NNNNNNN/` with `metadata.json` or `common.pt` (Megatron-Core's torch_dist: a DCP folder
  plus those sidecars; `common.pt` is written first, `metadata.json` last), claimed before the
  plain DCP layout;
- `iter_NNNNNNN/` with `mp_rank_XX[_YYY]/` subfolders (Megatron's legacy torch format).

Megatron writes `latest_checkpointed_iteration.txt` in the parent once every rank has saved.
"""

from __future__ import annotations

import re

from ..core.model import Format
from .folder_layouts import FolderLayout

RANK_FILE = re.compile(r"^(model|optim|extra_state)_world_size_(\d+)_rank_(\d+)\.pt$")
ITER_FOLDER = re.compile(r"^iter_(\d+)$")
MP_RANK_FOLDER = re.compile(r"^mp_rank_\d{2}(_\d{3})?$")
TRACKER = "latest_checkpointed_iteration.txt"
MEGATRON_CONFIG = "metadata.json"  # Megatron-Core's CheckpointingConfig (sharded_backend...)
MEGATRON_COMMON = "common.pt"  # the state every rank shares (args, iteration), rank 0's
_DCP = re.compile(r"^(\.metadata|__\d+_\d+\.distcp)$")


def rank_files_recognises(_name: str, files: frozenset[str], _dirs: frozenset[str]) -> bool:
    return any(RANK_FILE.match(f) for f in files)


def rank_files_announces(_folder_name: str, name: str) -> bool:
    return bool(RANK_FILE.match(name))


def megatron_dist_recognises(name: str, files: frozenset[str], _dirs: frozenset[str]) -> bool:
    # Megatron-Core writes common.pt first, then the DCP files, metadata.json last
    # (dist_checkpointing.serialization.save): an iter_N/ of DCP files alone is plain DCP
    return bool(ITER_FOLDER.match(name)) and bool({MEGATRON_CONFIG, MEGATRON_COMMON} & files)


def megatron_dist_announces(folder_name: str, name: str) -> bool:
    return bool(ITER_FOLDER.match(folder_name)) and (
        name in (MEGATRON_CONFIG, MEGATRON_COMMON) or bool(_DCP.match(name))
    )


def megatron_legacy_recognises(name: str, _files: frozenset[str], dirs: frozenset[str]) -> bool:
    return bool(ITER_FOLDER.match(name)) and any(MP_RANK_FOLDER.match(d) for d in dirs)


def never(_folder_name: str, _name: str) -> bool:
    return False  # a legacy rank file sits one level down: the scan finds its iter_N folder


# The layouts of these formats' rows (core.families names them; its row order puts them before
# the plain DCP layout, which would claim a torch_dist folder too)
MEGATRON_DIST_LAYOUT = FolderLayout(
    Format.MEGATRON_DIST.value, megatron_dist_recognises, megatron_dist_announces
)
MEGATRON_LEGACY_LAYOUT = FolderLayout(
    Format.MEGATRON_LEGACY.value, megatron_legacy_recognises, never
)
RANK_FILES_LAYOUT = FolderLayout(
    Format.TORCH_RANKS.value, rank_files_recognises, rank_files_announces
)
