"""Lightning CSVLogger text -> metrics by epoch and by step (pure).

Its rows are sparse: a train row and a val row share an epoch (and a val row a step), each with
the other's cells empty, so the values of one epoch are merged, a later non-empty cell winning.
Its `epoch` is 0-based, as the `epoch` Lightning stores in its checkpoints (and puts in their
names), so it is kept as it is: never shifted as a Keras CSVLogger's is. Its `step` is
`global_step - 1` at log time; by step, rows are keyed by `global_step` (`step + 1`), the counter
a checkpoint records. `epoch` and `step` are counters, never metrics.
"""

from __future__ import annotations

from .training_metrics import ByKey, _csv_rows, as_int

_COUNTERS = ("epoch", "step")


def parse(text: str) -> tuple[ByKey, ByKey]:
    rows, partial = _csv_rows(text, ",")
    header: list[str] = []
    by_epoch: ByKey = {}
    by_step: ByKey = {}
    for row in [*rows, *([partial] if partial is not None else [])]:
        if "epoch" in row and "step" in row:  # the header (rewritten when a key appears)
            header = row
            continue
        if not header or len(row) != len(header):
            continue
        cells = dict(zip(header, row, strict=True))
        values = {
            k: v for k, c in cells.items() if k not in _COUNTERS and (v := _number(c)) is not None
        }
        if not values:
            continue
        epoch, step = as_int(cells.get("epoch", "")), as_int(cells.get("step", ""))
        if epoch is not None and epoch >= 0:
            by_epoch.setdefault(epoch, {}).update(values)
        if step is not None and step >= 0:
            by_step.setdefault(step + 1, {}).update(values)
    return by_epoch, by_step


def _number(cell: str) -> float | None:
    try:
        value = float(cell)
    except ValueError:
        return None
    return value if value == value else None  # NaN: nothing logged
