"""A checkpoint file name in parts: literal text and numbers, the labels before the numbers, and
the logged metric a printed value rounds. Pure: no I/O, no clock.

Shared by `core.naming` (which learns a run's scheme from these parts) and its label-only
fallback for names no scheme reads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from .training_metrics import disagrees
from .units import counted

Logged = Mapping[int, Mapping[str, float]]  # 1-based epoch -> metric -> value
NO_LOGS: Logged = MappingProxyType({})

EPOCH_LABELS = frozenset({"epoch", "epochs", "ep", "e"})
STEP_LABELS = frozenset({"step", "steps", "global_step", "ckpt", "it", "iter", "iteration"})
BATCH_LABELS = frozenset({"batch", "b"})
# Words that name a metric even when a `_`/`-`/`.` stands between them and the number.
_METRIC_WORDS = frozenset(
    {"loss", "acc", "accuracy", "auc", "mae", "mse", "rmse", "lr", "f1", "iou", "precision"}
    | {"recall", "error", "err", "top1", "top5", "ppl", "perplexity", "bleu", "score", "dice"}
)
_TF_SUFFIX = re.compile(r"\.(?:index|data-\d+-of-\d+)$")
_EXT = re.compile(r"(?:\.weights)?\.(?:h5|hdf5|keras|ckpt|pb|tf)$", re.I)
# Digit runs are cut at 40: a hostile 5,000-digit name must not reach int()'s digit limit.
_NUMBER = re.compile(
    r"(?<![A-Za-z])(?i:nan|inf)(?![A-Za-z])|\d{1,40}(?:\.\d{1,40})?(?:[eE][-+]?\d{1,4})?"
)
_LABEL = re.compile(r"([A-Za-z][A-Za-z0-9_]*?)([=:]|[-_.])?$")
FIXED = re.compile(r"\d+\.(\d+)")
SCI = re.compile(r"\d(?:\.(\d+))?([eE])[-+]\d+")


@dataclass(frozen=True)
class NameFields:
    ints: dict[str, int]  # "epoch" / "step" / "batch" read from the name (1-based as written)
    metrics: dict[str, str]  # metric name -> its text exactly as written in the name ("0.913")
    template: str | None  # the scheme's template it was read with; None: labels only/nothing


def base_name(name: str) -> str:
    """A TF checkpoint's prefix (`ckpt-3.index` -> `ckpt-3`); other names unchanged."""
    return _TF_SUFFIX.sub("", name)


# --- splitting names --------------------------------------------------------------------------


@dataclass(frozen=True)
class Split:
    literals: tuple[str, ...]  # one more than texts: before, between and after the numbers
    texts: tuple[str, ...]
    ext: str

    @property
    def key(self) -> tuple[tuple[str, ...], str]:
        return self.literals, self.ext


def split_name(name: str) -> Split:
    base = base_name(name)
    ext_match = _EXT.search(base)
    stem, ext = (base[: ext_match.start()], ext_match[0]) if ext_match else (base, "")
    literals, texts, at = [], [], 0
    for m in _NUMBER.finditer(stem):
        literals.append(stem[at : m.start()])
        texts.append(m[0])
        at = m.end()
    literals.append(stem[at:])
    return Split(tuple(literals), tuple(texts), ext)


def is_decimal(text: str) -> bool:
    return not text.isdigit()


def label_before(literal: str) -> tuple[str, bool] | None:
    """The word right before a number, and whether it is bound to it (`acc0.9`, `loss=0.2`)."""
    m = _LABEL.search(literal)
    return None if m is None else (m[1], m[2] is None or m[2] in "=:")


def int_role(label: tuple[str, bool] | None) -> str | None:
    word = label[0].lower() if label else ""
    for candidate in (word, word.rsplit("_", 1)[-1]):  # `model_e03`: the last word labels it
        for role, words in (
            ("epoch", EPOCH_LABELS),
            ("step", STEP_LABELS),
            ("batch", BATCH_LABELS),
        ):
            if candidate in words:
                return role
    return None


def metric_label(label: tuple[str, bool] | None) -> str | None:
    """A label that names a metric: bound to its number, or a metric-like word."""
    if label is None:
        return None
    word, bound = label
    low = word.lower()
    metricish = low in _METRIC_WORDS or low.startswith("val_") or "loss" in low or "acc" in low
    return word if bound or metricish else None


# --- metric names against the logs ------------------------------------------------------------


def agreement(
    texts: Sequence[str], epochs: Sequence[int | None], logged: Logged, metric: str
) -> tuple[int, int]:
    """(names whose text rounds the logged value, names with a logged value) for `metric`.
    Counting stops at the second disagreement: `fits` allows one, so the verdict is the same."""
    agree = checked = 0
    for text, epoch in zip(texts, epochs, strict=True):
        row = logged.get(epoch) if epoch is not None else None
        if row is not None and metric in row:
            checked += 1
            agree += not disagrees(text, row[metric])
            if checked - agree > 1:
                break
    return agree, checked


def fits(agree: int, checked: int, series: bool) -> bool:
    """Every name agrees, or all but one stray (in a series of 3 or more)."""
    return checked > 0 and agree >= (max(2, checked - 1) if series else checked)


def logged_names(logged: Logged) -> list[str]:
    return sorted({k for row in logged.values() for k in row})


def _abbreviates(label: str, name: str) -> int | None:
    """How closely `label` stands for the logged `name`: 0 exact .. 5 loosely; None: not."""
    a, b = label.lower(), name.lower()
    la, lb = a.split("_"), b.split("_")
    if a == b:
        return 0
    if a == b.replace("_", ""):
        return 1  # valloss -> val_loss
    if len(la) == len(lb) and all(y.startswith(x) and x for x, y in zip(la, lb, strict=True)):
        return 2  # acc -> accuracy, val_acc -> val_accuracy, l -> loss
    if len(lb) > 1 and a == "".join(p[:1] for p in lb):
        return 3  # vl -> val_loss, lr -> learning_rate
    if a.endswith("_" + b):
        return 4  # run_loss -> loss
    rest = iter(b)
    if a[:1] == b[:1] and all(c in rest for c in a):
        return _LOOSE  # valacc -> val_accuracy: only when the values agree too
    return None


_LOOSE = 5


def resolve_label(
    label: str, texts: Sequence[str], epochs: Sequence[int | None], logged: Logged, series: bool
) -> tuple[str, str]:
    """The logged name a label stands for (unambiguously), else the label; and why."""
    tiers: dict[int, list[str]] = {}
    for name in logged_names(logged):
        tier = _abbreviates(label, name)
        if tier is not None:
            tiers.setdefault(tier, []).append(name)
    unchecked = not any(e in logged for e in epochs)  # no logged row to compare values with
    for tier in sorted(tiers):
        names = tiers[tier]
        if tier == 0:
            return names[0], f"labelled {label!r}"
        if tier == 4:
            names = [max(names, key=len)]
        agreeing = [n for n in names if fits(*agreement(texts, epochs, logged, n), series)]
        fitting = agreeing or (names if unchecked and tier != _LOOSE else [])
        if len(fitting) == 1:
            return fitting[0], f"label {label!r} stands for the logged {fitting[0]}"
        if len(fitting) > 1:
            return label, f"label {label!r} could stand for {' or '.join(fitting)}: kept as written"
    return label, f"labelled {label!r}"


def match_logs(
    texts: Sequence[str], epochs: Sequence[int | None], logged: Logged, taken: set[str]
) -> tuple[str | None, str]:
    """The one logged metric every (but at most one) text rounds, and the sentence saying so."""
    if not logged:
        return None, "no logged metrics to name it by"
    if all(e is None for e in epochs):
        return None, "no epoch in the names to look the logs up by"
    found: list[tuple[int, str, int, int]] = []
    for name in logged_names(logged):
        agree, checked = agreement(texts, epochs, logged, name)
        if name not in taken and fits(agree, checked, len(texts) > 2):
            found.append((checked - agree, name, agree, checked))
    if not found:
        return None, "it matches no logged metric"
    best = min(f[0] for f in found)
    top = [f for f in found if f[0] == best]
    if len(top) > 1:
        names = " and ".join(f[1] for f in top)
        return None, f"it fits {names} equally ({top[0][2]} of {top[0][3]} names): left unnamed"
    _, name, agree, checked = top[0]
    text, epoch = next(
        (t, e)
        for t, e in zip(texts, epochs, strict=True)
        if e is not None and name in logged.get(e, {})
    )
    return name, (
        f"{text} = {name} at epoch {epoch} {_precision(text)} ({agree} of {checked} names)"
    )


def _precision(text: str) -> str:
    fixed, sci = FIXED.fullmatch(text), SCI.fullmatch(text)
    if fixed:
        return f"rounded to {counted(len(fixed[1]), 'place')}"
    if sci:
        return f"rounded to {counted(len(sci[1] or ''), 'decimal')} in scientific notation"
    return "at its printed precision"


def by_labels(name: str, logged: Logged = NO_LOGS) -> NameFields:
    """What a name says by its labels alone: `e03`, `epoch_3`, `step-500`, `val_loss=0.2`, and a
    bare number as the whole stem (`7.keras`) as the epoch. No template; nothing guessed."""
    split = split_name(name)
    ints: dict[str, int] = {}
    pairs = list(zip(split.literals, split.texts, strict=False))
    if len(pairs) == 1 and split.literals == ("", "") and not is_decimal(split.texts[0]):
        ints["epoch"] = int(split.texts[0])
    for literal, text in pairs:
        role = None if is_decimal(text) else int_role(label_before(literal))
        if role and role not in ints:
            ints[role] = int(text)
    if "batch" in ints and "epoch" not in ints:
        del ints["batch"]  # Keras writes {batch} only beside {epoch}
    metrics: dict[str, str] = {}
    for literal, text in pairs:
        word = metric_label(label_before(literal)) if is_decimal(text) else None
        if word:
            metric, _ = resolve_label(word, [text], [ints.get("epoch")], logged, False)
            metrics.setdefault(metric, text)
    return NameFields(ints, metrics, None)
