"""A checkpoint's health, as the `integrity` stage recorded it: its result line from a scan's
per-tensor tallies (`result`), and whether a checkpoint may be answered by `latest --resumable`,
`best` and `wait` (`unhealthy`: non-finite weights are never handed to a trainer or an engine
that would load them silently, vLLM#53537, sglang#26772). Pure.

The metrics, recorded as `integrity:<name>` whatever the stage is called:
`scanned` (1 when the weights were read, 0 when the format is not scanned), `tensors` (floating
tensors read), `nonfinite_tensors` (with a NaN or an Inf), `nan`, `inf` (values),
`zero_tensors` (all zeros), `huge_tensors` (a finite |x| > 1e30: uninitialized-looking),
`dense_nan_tensors` (half or more of their values NaN)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .model import Checkpoint
    from .pipeline import Stage

PREFIX = "integrity"
SCANNED = f"{PREFIX}:scanned"
NONFINITE = f"{PREFIX}:nonfinite_tensors"
NAMES = (
    "scanned",
    "tensors",
    "nonfinite_tensors",
    "nan",
    "inf",
    "zero_tensors",
    "huge_tensors",
    "dense_nan_tensors",
)
METRICS = tuple(f"{PREFIX}:{n}" for n in NAMES)
PENDING = "integrity_pending"  # a row's `details` key: its integrity verdict is still to come
MAX_FLAGGED = 20  # tensors named in the result line (it must fit the stage's kept output)


@dataclass(frozen=True)
class Tally:
    """One tensor's counts (`formats.tensor_values.Counts` with its name and dtype)."""

    name: str
    dtype: str
    elements: int
    nan: int = 0
    inf: int = 0
    zero: int = 0
    huge: int = 0

    @property
    def nonfinite(self) -> bool:
        return bool(self.nan or self.inf)

    @property
    def all_zero(self) -> bool:
        return self.elements > 0 and self.zero == self.elements

    @property
    def dense_nan(self) -> bool:
        return self.elements > 0 and 2 * self.nan >= self.elements

    def flags(self) -> list[str]:
        found = [f"{self.nan} NaN"] if self.nan else []
        found += [f"{self.inf} Inf"] if self.inf else []
        found += [f"{self.huge} above 1e30"] if self.huge else []
        found += ["all zeros"] if self.all_zero else []
        return found


def result(tallies: Iterable[Tally], scanned_files: int) -> dict[str, Any]:
    """The stage's result line: `{"metrics", "note", "flagged"}` (flagged: up to MAX_FLAGGED
    tensors with what was found in each, non-finite ones first)."""
    found = list(tallies)
    metrics = {
        "scanned": 1,
        "tensors": len(found),
        "nonfinite_tensors": sum(t.nonfinite for t in found),
        "nan": sum(t.nan for t in found),
        "inf": sum(t.inf for t in found),
        "zero_tensors": sum(t.all_zero for t in found),
        "huge_tensors": sum(bool(t.huge) for t in found),
        "dense_nan_tensors": sum(t.dense_nan for t in found),
    }
    flagged = sorted((t for t in found if t.flags()), key=lambda t: not t.nonfinite)
    note = _note(metrics, flagged, scanned_files)
    named = {f"{PREFIX}:{k}": v for k, v in metrics.items()}  # as the catalog records them
    shown = [
        {"name": t.name, "dtype": t.dtype, "elements": t.elements, "found": ", ".join(t.flags())}
        for t in flagged[:MAX_FLAGGED]
    ]
    return {"metrics": named, "note": note, "flagged": shown}


def not_scanned(what: str) -> dict[str, Any]:
    """The result line of a checkpoint whose weights are not read (its format): never a
    `healthy` it was not judged to be."""
    return {"metrics": {SCANNED: 0}, "note": f"not scanned: {what}", "flagged": []}


def _note(metrics: Mapping[str, int], flagged: list[Tally], files: int) -> str:
    where = f"{metrics['tensors']} tensors in {files} file{'s' if files != 1 else ''}"
    if not metrics["nonfinite_tensors"]:
        extra = [f"{metrics['zero_tensors']} all-zero"] if metrics["zero_tensors"] else []
        extra += [f"{metrics['huge_tensors']} with |x| > 1e30"] if metrics["huge_tensors"] else []
        return f"finite: {where}" + (f" ({', '.join(extra)})" if extra else "")
    first = flagged[0]
    return (
        f"NON-FINITE: {metrics['nonfinite_tensors']} of {where} "
        f"({metrics['nan']} NaN, {metrics['inf']} Inf), e.g. {first.name}: "
        + ", ".join(first.flags())
    )


def unhealthy(metrics: Mapping[str, float | None]) -> str | None:
    """Why a checkpoint must not be answered as one to resume from or serve: the integrity
    stage found NaN or Inf in its weights. None when it did not, or did not look."""
    bad = metrics.get(NONFINITE)
    if not bad:
        return None
    nan, inf = metrics.get(f"{PREFIX}:nan") or 0, metrics.get(f"{PREFIX}:inf") or 0
    return (
        f"integrity found non-finite weights: {int(bad)} tensor{'s' if bad != 1 else ''} "
        f"({int(nan)} NaN, {int(inf)} Inf)"
    )


def summary(metrics: Mapping[str, float | None]) -> str | None:
    """One line for `ckpt show`: `finite`, `NON-FINITE ...`, `not scanned`, or None (no
    integrity stage ran on it)."""
    scanned = metrics.get(SCANNED)
    if scanned is None:
        return None
    if not scanned:
        return "not scanned (its format's weights are not read by integrity)"
    why = unhealthy(metrics)
    if why is not None:
        return "NON-FINITE: " + why.split(": ", 1)[1]
    tensors = int(metrics.get(f"{PREFIX}:tensors") or 0)
    extra = []
    for name, said in (("zero_tensors", "all-zero"), ("huge_tensors", "with |x| > 1e30")):
        n = int(metrics.get(f"{PREFIX}:{name}") or 0)
        extra += [f"{n} {said}"] if n else []
    return f"finite ({tensors} tensors" + "".join(f", {e}" for e in extra) + ")"


def awaits_verdict(stages: Sequence[Stage], checkpoint: Checkpoint) -> bool:
    """Whether an integrity stage of `stages` (`uses: integrity`) is due on this complete
    checkpoint and has not recorded its verdict yet: `wait` answers it only once it has (the
    caller drops the ones whose integrity job ended without one: failed, cancelled)."""
    from .pipeline import not_due

    if SCANNED in checkpoint.metrics:
        return False
    return any(
        s.uses == "integrity"
        and s.trigger.kind in ("complete", "every")  # new_best, final: decided later
        and not_due(s, checkpoint, is_best=False) is None
        for s in stages
    )
