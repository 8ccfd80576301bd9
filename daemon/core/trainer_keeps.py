"""What a torch-family trainer keeps and removes on its own (pure): Hugging Face `Trainer`'s
`save_total_limit` rotation and its `best_model_checkpoint`, Lightning `ModelCheckpoint`'s
`save_top_k` and its `best_k_models`.

A checkpoint its trainer rotated away is `removed by trainer`, never `missing` (as TF
`CheckpointManager`'s, `core.housekeeping`); the checkpoints a trainer names as its best are
protected by retention like our own best. The evidence is what the trainer itself wrote: a
newer `checkpoint-M/` beside a vanished `checkpoint-N/` (the Trainer deletes the oldest by mtime
when it saves a new one, never its best), and the `best_k_models` of the newest Lightning file
of a folder no longer naming a vanished file. Paths inside those records are the trainer's
(absolute, or relative to its working folder), so only their last component is compared.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Collection, Mapping
from typing import Any

HF_ROTATED = (
    "removed by trainer (Hugging Face save_total_limit rotation: a newer checkpoint folder "
    "was saved beside it)"
)
LIGHTNING_ROTATED = (
    "removed by trainer (Lightning ModelCheckpoint save_top_k: no longer among the "
    "best_k_models of the newest checkpoint)"
)
HF_BEST = "the Trainer's best_model_checkpoint (trainer_state.json)"
LIGHTNING_BEST = "among Lightning's best_k_models (ModelCheckpoint save_top_k)"
_TRAINER_FOLDER = re.compile(r"^checkpoint-(\d+)$")
LIGHTNING_VERSION_KEY = "pytorch-lightning_version"


def may_be_rotated(name: str) -> bool:
    """Whether a vanished file or folder of this name could be a trainer's rotation at all
    (an HF `checkpoint-N`, a Lightning `.ckpt`): only those are judged again later."""
    return bool(_TRAINER_FOLDER.match(name)) or name.endswith(".ckpt")


def hf_rotated(name: str, sibling_folders: Collection[str]) -> bool:
    """A vanished `checkpoint-N` folder while a `checkpoint-M` (M > N) is beside it."""
    vanished = _TRAINER_FOLDER.match(name)
    if vanished is None:
        return False
    numbers = (_TRAINER_FOLDER.match(s) for s in sibling_folders)
    return any(m is not None and int(m[1]) > int(vanished[1]) for m in numbers)


def lightning_rotated(name: str, newest_config: Mapping[str, Any] | None) -> bool:
    """A vanished top-k `.ckpt` that the newest Lightning file of its folder no longer lists."""
    kept = lightning_kept(newest_config)
    if kept is None or name.startswith("last") or not name.endswith(".ckpt"):
        return False
    return name not in kept


def lightning_kept(config: Mapping[str, Any] | None) -> frozenset[str] | None:
    """The file names of a Lightning checkpoint's `best_k_models` (+ its best), None if it has
    no ModelCheckpoint state."""
    if not isinstance(config, Mapping) or LIGHTNING_VERSION_KEY not in config:
        return None
    top_k = config.get("best_k_models")
    if not isinstance(top_k, Mapping):
        return None
    names = {_name(p) for p in top_k}
    best = config.get("best_model_path")
    if isinstance(best, str) and best:
        names.add(_name(best))
    return frozenset(names)


def hf_best(config: Mapping[str, Any] | None) -> str | None:
    """The folder name of an HF checkpoint's `best_model_checkpoint`, if it records one."""
    state = config.get("trainer_state") if isinstance(config, Mapping) else None
    best = state.get("best_model_checkpoint") if isinstance(state, Mapping) else None
    return _name(best) if isinstance(best, str) and best else None


def _name(path: Any) -> str:
    return posixpath.basename(str(path).replace("\\", "/").rstrip("/"))
