"""Versions of files rewritten in place: which files get their generations kept, where a kept
generation lives, and which of a run's versions retention must protect. Pure.

A trainer that saves to a fixed name (`best.keras`, `last.h5`) truncates and rewrites the same
file, so each save destroys the previous generation. The service keeps a copy of each completed
generation in `<root>/.ckpt-versions/<the file's folder>/<stem>.v<generation><suffix>` (the
suffix kept, so Keras loads the copy as it loads the original). While the file still holds that
generation the copy is on `standby`; once the file is rewritten (or gone) the copy is a version,
an ordinary member of the run for retention.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from .housekeeping import KERAS_WEIGHTS

VERSIONS_DIR = ".ckpt-versions"
VERSIONS_COMPONENT = f"/{VERSIONS_DIR}/"  # in a version's path (a folder of ours: issue 11)
CAPTURE_MODES = ("fixed_names", "rewritten", "off")
# Longest first: `.weights.h5` must win over `.h5`.
_SUFFIXES = (".weights.h5", ".keras", ".hdf5", ".he5", ".h5")
_VERSION_NAME = re.compile(
    r"(?P<stem>.+)\.v(?P<generation>[0-9]{1,9})(?P<suffix>(?i:"
    + "|".join(re.escape(s) for s in _SUFFIXES)
    + r"))?",  # none: a name Keras keys no loader on (`best.pt` is kept as `best.pt.v2`)
    re.DOTALL,  # a name may hold any character but "/" and NUL
)


def split_suffix(name: str) -> tuple[str, str]:
    """(`best`, `.weights.h5`): the name without the suffix Keras keys its loaders on."""
    lowered = name.lower()
    for suffix in _SUFFIXES:
        if lowered.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], name[-len(suffix) :]
    return name, ""


def is_fixed_name(name: str) -> bool:
    """A name with no number in its stem (`best.keras`, `model_last.h5`): a trainer that saves
    to it rewrites it. Numbered names (`ckpt-05.keras`) are a file per save, and so is Keras
    BackupAndRestore's `latest.weights.h5` here: its state, not a model (the scan skips it once
    its `training_metadata.json` is there), kept only if it is seen rewritten."""
    stem, _suffix = split_suffix(name)
    return name != KERAS_WEIGHTS and not any(ch.isdigit() for ch in stem)


_ROLLING_WORDS = ("last", "latest")
_BEST_WORDS = ("best",)


def _stem_words(name: str) -> list[str]:
    """The lower-case words of a file name before its first dot (`model_last-v1.ckpt`:
    model, last, v1)."""
    stem = name.split(".", 1)[0].lower()
    return [w for w in re.split(r"[^a-z0-9]+", stem) if w]


def is_rolling_pointer(name: str) -> bool:
    """A name a trainer rewrites at every save to point at its newest state (`last.pt`,
    `latest.pth`, Lightning's `last.ckpt` and `last-v1.ckpt`, `model_last.h5`): each of its
    generations is the newest training moment when written, which the trainer (or an epoch
    file beside it) saves anyway. Keras BackupAndRestore's `latest.weights.h5` is its own
    state, not a pointer (`is_fixed_name`)."""
    words = _stem_words(name)
    return name != KERAS_WEIGHTS and any(w in _ROLLING_WORDS for w in words)


def is_best_like(name: str) -> bool:
    """A name a trainer rewrites only with a better model (`best.pt`, `model_best.h5`,
    `best.keras`): what a resumed Keras run overwrites with a worse one (keras#17012)."""
    return any(w.startswith(_BEST_WORDS) for w in _stem_words(name))


def trainer_file(name: str) -> str | None:
    """Why the file `name` is its trainer's own (a pointer it saves to again and a user's
    script loads by name), or None: retention and the disk guard never trash one."""
    if is_best_like(name) and is_fixed_name(name):
        return f"the trainer's best file ({name}: it rewrites it with each better model)"
    if is_rolling_pointer(name):
        return f"the trainer's last file ({name}: it rewrites it at every save)"
    return None


def should_capture(mode: str, name: str, generation: int) -> bool:
    """Whether to keep a copy of this generation of the file `name` as soon as it is complete:
    `fixed_names` (default) every generation of a fixed name, and of any file from its second
    generation on; `rewritten` only from the second generation (the first one is lost when the
    file is first rewritten, but a file written once costs nothing); `off` never."""
    if mode == "off":
        return False
    return generation >= 2 or (mode == "fixed_names" and is_fixed_name(name))


def version_parts(parts: Sequence[str], generation: int) -> tuple[str, ...]:
    """Where generation `generation` of the file at `parts` (relative to its root) is kept."""
    stem, suffix = split_suffix(parts[-1])
    return (VERSIONS_DIR, *parts[:-1], f"{stem}.v{generation}{suffix}")


def original_parts(parts: Sequence[str]) -> tuple[tuple[str, ...], int] | None:
    """The file a version at `parts` (relative to its root) was kept of, and its generation;
    None for anything that is not a version's name."""
    if len(parts) < 2 or parts[0] != VERSIONS_DIR:
        return None
    found = _VERSION_NAME.fullmatch(parts[-1])
    if found is None:
        return None
    name = found["stem"] + (found["suffix"] or "")
    return (*parts[1:-1], name), int(found["generation"])


def is_version_path(path: str) -> bool:
    """Whether `path` is in our versions folder: a kept version of a rewritten checkpoint (or
    its standby copy), not a checkpoint of its own."""
    return VERSIONS_COMPONENT in path or path.startswith(f"{VERSIONS_DIR}/")


@dataclass(frozen=True)
class Kept:
    """A version as retention sees it: its row, the file it keeps, which generation."""

    id: int
    version_of: str
    generation: int


def previous_generations(versions: Iterable[Kept], n: int) -> dict[int, str]:
    """{id: reason} of the `n` most recent kept generations of each file: what a trainer's next
    rewrite would otherwise leave as the only way back (`versions.keep_previous`)."""
    by_file: dict[str, list[Kept]] = {}
    for kept in versions:
        by_file.setdefault(kept.version_of, []).append(kept)
    out: dict[int, str] = {}
    for path, of_file in by_file.items():
        name = PurePosixPath(path).name
        ranked = sorted(of_file, key=lambda k: (k.generation, k.id), reverse=True)
        for rank, k in enumerate(ranked[:n], start=1):
            which = "previous generation" if rank == 1 else f"previous generation #{rank}"
            out[k.id] = f"{which} of {name} (v{k.generation})"
    return out
