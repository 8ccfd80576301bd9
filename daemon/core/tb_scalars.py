"""TensorBoard scalars as metrics: the tag and folder conventions of Keras's `TensorBoard`
callback (Keras 3 and tf-keras, measured on real runs), pure.

`<log_dir>/train/` holds `epoch_loss`, `epoch_accuracy`, `epoch_learning_rate` (Keras 3) with the
0-based epoch as the event's step; `<log_dir>/validation/` holds the same `epoch_*` tags (named
`val_*` in `fit`'s logs and CSVLogger's columns) and `evaluation_*_vs_iterations` keyed by the
training step; `update_freq='batch'` or N adds `batch_*` tags keyed by step. Other tags (custom
`tf.summary.scalar` calls) are keyed by their step under their own name.

Lightning's `TensorBoardLogger` (`lightning_logs/version_N/events.out.tfevents.*`, beside
`version_N/checkpoints/`) writes each logged key under its own name with the step
`global_step - 1` at log time, and an `epoch` scalar (the 0-based epoch) beside every value, as
its CSVLogger does (`core.lightning_csv`): such a stream is keyed like that CSV, by
`global_step` (`step + 1`, the counter a checkpoint records) and by its 0-based epoch (the
`epoch` Lightning stores in its checkpoints), never shifted; `epoch` is a counter, not a metric.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

VALIDATION_FOLDER = "validation"


@dataclass(frozen=True)
class Scalar:
    tag: str
    step: int
    wall_time: float
    value: float


@dataclass(frozen=True)
class TbMetrics:
    """What one event folder's files say, as metrics: `by_epoch` is keyed by 1-based epoch."""

    by_epoch: dict[int, dict[str, float]]
    by_step: dict[int, dict[str, float]]
    epoch_times: dict[int, float]  # the latest wall time of an epoch's values

    @property
    def epochs(self) -> int:
        return max(self.by_epoch, default=0)


def metric_key(tag: str, folder_name: str) -> tuple[str, str]:
    """("epoch" | "step", metric name) for a tag written into a folder named `folder_name`:
    Keras's callback writes `<log_dir>/train` and `<log_dir>/validation`; validation values get
    Keras's `val_` prefix (as in `fit`'s logs and CSVLogger's columns)."""
    validation = folder_name == VALIDATION_FOLDER
    kind = "step"
    name = tag
    if tag.startswith("epoch_") and len(tag) > len("epoch_"):
        kind, name = "epoch", tag[len("epoch_") :]
    elif tag.startswith("batch_") and len(tag) > len("batch_"):
        name = tag[len("batch_") :]
    elif tag.startswith("evaluation_") and tag.endswith("_vs_iterations"):
        name = tag[len("evaluation_") : -len("_vs_iterations")] or tag
        validation = True
    if validation and not name.startswith("val_"):
        name = "val_" + name
    return kind, name


def to_metrics(scalars: Iterable[Scalar], folder_name: str) -> TbMetrics:
    """Scalars (in file order; later values of a key win, as a restarted writer appends) keyed
    by epoch or step. An epoch tag's step is the 0-based epoch; negative steps are dropped."""
    scalars = list(scalars)
    if is_lightning(scalars):
        return _lightning_metrics(scalars)
    by_epoch: dict[int, dict[str, float]] = {}
    by_step: dict[int, dict[str, float]] = {}
    times: dict[int, float] = {}
    for scalar in scalars:
        kind, name = metric_key(scalar.tag, folder_name)
        if scalar.step < 0:
            continue
        if kind == "epoch":
            epoch = scalar.step + 1
            by_epoch.setdefault(epoch, {})[name] = scalar.value
            times[epoch] = max(times.get(epoch, scalar.wall_time), scalar.wall_time)
        else:
            by_step.setdefault(scalar.step, {})[name] = scalar.value
    return TbMetrics(by_epoch, by_step, times)


LIGHTNING_EPOCH = "epoch"


def is_lightning(scalars: list[Scalar]) -> bool:
    """A bare `epoch` tag of whole numbers that never go down: Lightning's logger (Keras's
    callback writes `epoch_*` tags, never `epoch` itself)."""
    epochs = [s.value for s in scalars if s.tag == LIGHTNING_EPOCH]
    return (
        bool(epochs)
        and all(e >= 0 and e == int(e) for e in epochs)
        and all(a <= b for a, b in pairwise(epochs))
    )


def _lightning_metrics(scalars: list[Scalar]) -> TbMetrics:
    by_epoch: dict[int, dict[str, float]] = {}
    by_step: dict[int, dict[str, float]] = {}
    times: dict[int, float] = {}
    epoch_at = {s.step: int(s.value) for s in scalars if s.tag == LIGHTNING_EPOCH}
    for scalar in scalars:
        if scalar.tag == LIGHTNING_EPOCH or scalar.step < 0:
            continue
        by_step.setdefault(scalar.step + 1, {})[scalar.tag] = scalar.value
        epoch = epoch_at.get(scalar.step)
        if epoch is not None:
            by_epoch.setdefault(epoch, {})[scalar.tag] = scalar.value
            times[epoch] = max(times.get(epoch, scalar.wall_time), scalar.wall_time)
    return TbMetrics(by_epoch, by_step, times)
