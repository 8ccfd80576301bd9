"""Which varying integer part of a series of names is the epoch, the step or the batch, and
which is a session part (a run, fold or seed counter, a session time stamp) that is literal
within each of its sub-series. Pure: no I/O, no clock.

The promise is "no evidence, no epoch": an integer gets a role from its label, or from a pattern
Keras itself writes (an epoch that grows with the series; a batch that restarts under each epoch
at save_freq's spacing). Anything else leaves the series without a scheme, and its names are
read by their labels alone.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from itertools import pairwise

from .name_parts import Logged, int_role

# Words that label some other counter than the training's: their number is never the epoch,
# step or batch (`epoch03_fold2`, `run2_07`, `seed42-e05`, `model_v3`).
COUNTER_WORDS = frozenset(
    {"fold", "folds", "seed", "run", "session", "sess", "trial", "v", "ver", "version", "exp"}
    | {"experiment", "lr", "cv", "split", "rank", "gpu", "worker", "replica", "shard", "part"}
    | {"job", "id", "attempt", "restart", "resume", "round", "config", "cfg", "arch", "k"}
)
# No epoch, step or batch count reaches 8 digits unlabelled; a date or time stamp does.
TIMESTAMP_MIN = 10_000_000


@dataclass
class Slot:
    texts: list[str]
    label: tuple[str, bool] | None
    literal: str | None = None  # the same text in (nearly) every name: part of the name
    role: str | None = None  # epoch / step / batch, or the metric's field name
    part: bool = False  # a session part: literal within each of its sub-series
    spec: str = ""
    why: str = ""

    def ints(self) -> list[int]:
        return [int(t) for t in self.texts]


def counter_word(label: tuple[str, bool] | None) -> str | None:
    """The label's word when it names another counter, bound to its number (`fold3`, `run2`,
    `model_seed=4`). Not `run-3`: a word and a separator before a number is often a prefix."""
    word = label[0].lower() if label and label[1] else ""
    for candidate in (word, word.rsplit("_", 1)[-1]):
        if candidate in COUNTER_WORDS:
            return candidate
    return None


def assign_int_roles(slots: list[Slot], logged: Logged) -> bool:
    """Give each varying integer part its role or mark it a session part (False: one is left
    without, or none is an epoch/step: the series shows no scheme)."""
    for slot in slots:
        labelled_counter = int_role(slot.label) is None and counter_word(slot.label)
        if labelled_counter and not _part_by_label(slot):
            return False  # a fold/seed number in every name: no sub-series to read
    rest = [s for s in slots if not s.part]
    if len(rest) == 2 and all(s.label is None or not _has_role_label(s) for s in rest):
        _part_by_stretches(rest[0], rest[1])
    rest = [s for s in rest if not s.part]
    if not rest:
        return False
    for slot in rest:
        if not _has_role_label(slot) and max(slot.ints()) >= TIMESTAMP_MIN:
            return False  # a time stamp is no epoch, step or batch
    return _int_roles(rest, logged)


def _has_role_label(slot: Slot) -> bool:
    return slot.label is not None and int_role(slot.label) is not None


def _part_by_label(slot: Slot) -> bool:
    word = counter_word(slot.label)
    groups = len(set(slot.texts))
    if groups * 2 > len(slot.texts):
        return False
    slot.part = True
    slot.why = f"{word} {_values(slot)}: labelled {word!r}, a session part (one scheme per value)"
    return True


def _part_by_stretches(a: Slot, b: Slot) -> None:
    """Two unlabelled integers, one growing through the series, the other constant over long
    stretches of it (a resumed run's session counter or time stamp): the constant one is a
    session part, never the epoch (`run1_01..05` + `run2_06..10`)."""
    for part, grows in ((a, b), (b, a)):
        values = grows.ints()
        if len(set(values)) < len(values):
            continue  # the grower repeats: not one training's epochs
        in_order = [t for _, t in sorted(zip(values, part.texts, strict=True))]
        stretches = 1 + sum(x != y for x, y in pairwise(in_order))
        if stretches == len(set(in_order)) and stretches >= 2 and stretches * 2 <= len(values):
            part.part = True
            part.why = (
                f"session {_values(part)}: the same over stretches of the series while the "
                "next number grows, a session part (one scheme per value)"
            )
            return


def _values(slot: Slot) -> str:
    shown = list(dict.fromkeys(slot.texts))
    return ", ".join(shown[:3]) + (", ..." if len(shown) > 3 else "")


def _int_roles(slots: list[Slot], logged: Logged) -> bool:
    free = []
    labelled = Counter(int_role(s.label) for s in slots)
    for slot in slots:
        role = int_role(slot.label)
        if role is None or slot.label is None or labelled[role] > 1:  # `b.1-b2`: says nothing
            free.append(slot)
        else:
            slot.role, slot.why = role, int_why(slot, role, f"labelled {slot.label[0]!r}")
    lone_batch = [s for s in slots if s.role == "batch"] if len(slots) == 1 else []
    for slot in lone_batch:  # Keras writes {batch} only beside {epoch}: `b.7` labels no batch
        slot.role, slot.why = None, ""
        free.append(slot)
    roles = [r for r in ("epoch", "batch") if not any(s.role == r for s in slots)]
    if len(free) == 1 and len(slots) == 1:
        return _lone_role(free[0], logged)
    if "step" in {s.role for s in slots} and "epoch" in roles:
        roles.remove("epoch")
    if len(free) > len(roles):
        return False
    for slot, role in zip(free, roles, strict=False):
        slot.role, slot.why = role, int_why(slot, role, "by its place in the name")
    batch = next((s for s in free if s.role == "batch"), None)
    if batch is None:
        return True
    # Keras writes {batch} after {epoch}: an unlabelled number before it (a time) is no batch;
    # nor an unlabelled one that does not restart under each epoch as save_freq's batches do.
    epoch = next((s for s in slots if s.role == "epoch"), None)
    return (
        epoch is not None
        and slots.index(batch) > slots.index(epoch)
        and (int_role(batch.label) == "batch" or save_freq_pattern(epoch.ints(), batch.ints()))
    )


def save_freq_pattern(epochs: Sequence[int], batches: Sequence[int]) -> bool:
    """Whether (epoch, batch) pairs look like ModelCheckpoint(save_freq=N): epochs repeat, the
    batch varies under a fixed epoch, and restarts under each: the first save of every epoch
    comes within N batches of its start (1-based), N the spacing within an epoch."""
    under: dict[int, set[int]] = {}
    for epoch, batch in zip(epochs, batches, strict=True):
        under.setdefault(epoch, set()).add(batch)
    gaps = [b - a for v in under.values() for a, b in pairwise(sorted(v))]
    return bool(gaps) and all(min(v) <= min(gaps) for v in under.values())


def _lone_role(slot: Slot, logged: Logged) -> bool:
    """The only varying integer: a step by its spacing, else the epoch when it reads as one."""
    values = slot.ints()
    spaced = reduce(math.gcd, values) >= 100 or min(values) >= 1000
    in_logs = bool(logged) and max(values) <= max(logged)
    if spaced and not in_logs:
        slot.role, slot.why = "step", int_why(slot, "step", "by its spacing")
        return True
    if _model_family(slot) and not (logged and all(v in logged for v in values)):
        return False  # `resnet18`, `resnet34`, `resnet50`, `resnet101`: models, not epochs
    slot.role, slot.why = "epoch", int_why(slot, "epoch", "grows with the series")
    return True


def _model_family(slot: Slot) -> bool:
    """A number glued to a word that is no epoch label, with values no epoch counter writes:
    not from the first epochs (save_best_only always saves epoch 1), not contiguous, not
    evenly spaced at a saving period (10, 20, 30 or 1, 6, 11)."""
    if slot.label is None or not slot.label[1] or int_role(slot.label) is not None:
        return False
    values = sorted(set(slot.ints()))
    gaps = {b - a for a, b in pairwise(values)}
    contiguous = gaps == {1}
    periodic = len(gaps) == 1 and (values[0] % min(gaps) == 0 or values[0] == 1)
    return values[0] > 2 and not contiguous and not periodic


def int_why(slot: Slot, role: str, how: str) -> str:
    values = sorted(slot.ints())
    width = min(len(t) for t in slot.texts)
    padded = width > 1 and any(len(t) == width and t.startswith("0") for t in slot.texts)
    slot.spec = f"0{width}d" if padded else ""
    pad = f", written {width} digits wide" if padded else ""
    return f"{role}: {how}, {values[0]} → {values[-1]} over {len(values)} names{pad}"
