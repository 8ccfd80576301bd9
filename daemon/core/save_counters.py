"""Whether a step-labelled number in a Keras file's name (`ckpt.03.keras`, `ckpt-03.h5`,
`iter_3.keras`) is a save counter, the global step or the epoch. Pure: no I/O, no clock.

A label like `ckpt` means "counts saves" only for TF `CheckpointManager` files (`ckpt-3.index`:
the third save). Keras's ModelCheckpoint fills no step and no save counter into a file path, only
`{epoch}`, `{batch}` and the logs: a number of a Keras file whose multiple by one constant (the
steps per epoch) is the file's optimizer iteration count, over at least two files of the same
scheme, is the epoch the file was saved at.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import Protocol

KERAS_FILE_SUFFIXES = (".keras", ".h5", ".hdf5", ".he5")  # `.weights.h5` ends with `.h5`

Own = tuple[dict[str, int], str | None]  # (ints, where they come from), as `core.derive` keeps


class NamedSave(Protocol):
    """What this module reads of a run's checkpoint (`core.derive.Member` is one): its id, name,
    the ints its name and its sidecar give, the name's scheme and the optimizer's count."""

    @property
    def id(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def iterations(self) -> int | None: ...
    @property
    def name_ints(self) -> Mapping[str, int]: ...
    @property
    def name_scheme(self) -> str | None: ...
    @property
    def sidecar_ints(self) -> Mapping[str, int]: ...


def is_keras_file(name: str) -> bool:
    """A file Keras wrote (`.keras`, `.h5`, `.weights.h5`, `.hdf5`), not a TF checkpoint."""
    return name.lower().endswith(KERAS_FILE_SUFFIXES)


def step_differs_note(name: str, named: int, iterations: int) -> str:
    """The note of a name's step that is not the optimizer's count (and no epoch either)."""
    if is_keras_file(name):
        return (
            f"step {iterations} from the optimizer; the name's {named} is neither the step nor"
            " an epoch the iterations confirm"
        )
    return f"step {iterations} from the optimizer; the name's {named} counts saves"


def epochs_from_step_numbers(
    members: Sequence[NamedSave], own: MutableMapping[int, Own], mid_epoch: str
) -> list[str]:
    """Read as the epoch every step-labelled number of Keras files whose scheme shows it is one
    (updates `own`); returns the run's evidence sentences."""
    groups: dict[str | None, list[NamedSave]] = {}
    for m in members:
        ints = own[m.id][0]
        from_name = "step" in m.name_ints and "step" not in m.sidecar_ints
        if from_name and "epoch" not in ints and mid_epoch not in ints and is_keras_file(m.name):
            groups.setdefault(m.name_scheme, []).append(m)
    evidence = []
    for scheme, group in groups.items():
        counted = [m for m in group if m.iterations]
        ratio = _one_ratio([(m.name_ints["step"], m.iterations or 0) for m in counted])
        if ratio is None:
            continue
        shown = scheme or "the name's labelled number"
        why = (
            f"file name ({shown}): the number times {ratio} is the optimizer's iterations in"
            f" {len(counted)} files, so it is the epoch (Keras names no save counter)"
        )
        for m in group:
            ints = {k: v for k, v in own[m.id][0].items() if k != "step"}
            ints["epoch"] = m.name_ints["step"]
            own[m.id] = (ints, why)
        evidence.append(f"{shown}: read as the epoch, {why.split(': ', 1)[1]}")
    return evidence


def _one_ratio(pairs: Sequence[tuple[int, int]]) -> int | None:
    """The one constant c >= 2 with iterations == c * number for every pair (at least two
    different numbers), else None: c == 1 is the step itself."""
    numbers = {n for n, _ in pairs}
    if len(numbers) < 2 or min(numbers) < 1:
        return None
    ratios = {it // n if it % n == 0 else -1 for n, it in pairs}
    if len(ratios) != 1:
        return None
    ratio = ratios.pop()
    return ratio if ratio >= 2 else None
