"""The metrics a checkpoint's generation keeps when its training log is rewritten. Pure.

A job resumed by `BackupAndRestore` with CSVLogger's default `append=False` rewrites
`history.csv` from the resumed epoch on: epochs 1-7 vanish from the log, and a re-run epoch may
be logged again with other values. A metric derivation once took from a log for a generation of
a checkpoint (its bytes: `hash`) is what the log said when that checkpoint was written, so:

- a log no longer holding that epoch (or that metric) never erases it: the recorded value stays,
  with its source;
- a log that now says another value for it is a new generation of that log: the checkpoint keeps
  the recorded value, and a note says what the log says now;
- a value of higher precedence than any log (the checkpoint's own sidecar) still wins, and a
  log value for a metric not recorded yet (the row was logged after the first derivation) is
  added. A new generation of the checkpoint (other bytes) records afresh.

Recorded values are kept in the generation's entry of the row's `details["generations"]` as
{name: [value or None (NaN/inf), source]}, beside its hash: `record_of` and `as_record`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .model import MetricValue

LOG_SOURCES = ("csv:", "json:", "tensorboard:")  # the run_logs sources: what a rewrite can erase

Record = dict[str, tuple[float, str]]


def is_logged(source: str) -> bool:
    return source.startswith(LOG_SOURCES)


def record_of(entry: Mapping[str, Any] | None) -> Record:
    """The logged values recorded in a generation's entry ({} when none, or malformed)."""
    raw = entry.get("logged") if isinstance(entry, Mapping) else None
    out: Record = {}
    for name, pair in raw.items() if isinstance(raw, Mapping) else ():
        if isinstance(pair, list | tuple) and len(pair) == 2 and isinstance(pair[1], str):
            value = pair[0]
            if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
                out[str(name)] = (math.nan if value is None else float(value), pair[1])
    return out


def as_record(values: Sequence[MetricValue]) -> dict[str, list[Any]]:
    """The logged ones of `values` as a generation's entry keeps them (JSON: no NaN)."""
    return {
        m.name: [m.value if math.isfinite(m.value) else None, m.source]
        for m in values
        if is_logged(m.source)
    }


def keep_recorded(
    derived: Sequence[MetricValue], recorded: Record, epoch: int | None
) -> tuple[tuple[MetricValue, ...], tuple[str, ...]]:
    """`derived` (one value per name, from the logs as they are now) with the `recorded` ones of
    the same generation kept over a rewritten log, and the notes saying where the log changed."""
    by_name = {m.name: m for m in derived}
    notes: list[str] = []
    for name, (value, source) in recorded.items():
        now = by_name.get(name)
        if now is not None and not is_logged(now.source) and now.source != "filename":
            continue  # the checkpoint's own sidecar: above any log
        if now is None or now.source == "filename":
            by_name[name] = MetricValue(name, value, source)
        elif not _same(now.value, value):
            by_name[name] = MetricValue(name, value, source)
            at = f"epoch {epoch} " if epoch is not None else ""
            notes.append(
                f"{now.source.split(':', 1)[1]} was rewritten: {at}{name} {_text(value)} kept "
                f"as logged when this checkpoint was written (the log now says {_text(now.value)})"
            )
    return tuple(by_name[k] for k in sorted(by_name)), tuple(notes)


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _text(value: float) -> str:
    return f"{value:.10g}"
