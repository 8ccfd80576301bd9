"""The text tables of `ckpt list`, `runs` and `log`: which columns, what each cell says.

One rule for paths: a checkpoint's path is shown relative to its root (so it starts with its
run's folder); when a listing spans several roots, a `root PATH` line heads each root's rows.
The layout itself (widths, alignment, fitting a terminal) is core.table's."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..core.errors import UsageError
from ..core.metric_names import default_metrics
from ..core.table import HARD_FLOOR, Column, number_cells
from ..core.text import metric_text, relative_path, visible
from ..core.units import format_size, iso_utc, short_time

if TYPE_CHECKING:
    from ..core.model import Checkpoint, Run

# Every column `ckpt list --columns` takes (besides metric names and `metrics`: all of them).
LIST_COLUMNS: dict[str, Column] = {
    "id": Column("ID", align="right", keep=True),
    "path": Column("PATH", cut="left", keep=True, min_width=32, shrink_first=True),
    "run": Column("RUN", cut="left"),
    "epoch": Column("EPOCH", align="right"),
    "step": Column("STEP", align="right"),
    "size": Column("SIZE", align="right"),
    "format": Column("FORMAT"),
    "kind": Column("KIND"),
    "optimizer": Column("OPTIMIZER", cut="right", min_width=9),
    "status": Column("STATUS"),
    "location": Column("LOCATION"),  # empty where the bytes are at the path (`local`)
    "mtime": Column("MTIME"),
    "versions": Column("VERSIONS", align="right"),  # kept versions folded under the file
}
REASON_FLAG = "*"  # after a status that has a reason (`ckpt show` says it)


def metric_order(names: Sequence[str]) -> list[str]:
    """Metric columns sorted by name, each `val_X` right after its `X` (accuracy, val_accuracy,
    loss, val_loss): the training and validation values of a metric sit side by side."""
    return sorted(set(names), key=lambda n: (n.removeprefix("val_"), n.startswith("val_")))


ALL_METRICS = "all"


def chosen_metrics(
    present: Sequence[str], metrics: str | None, monitored: Collection[str] = ()
) -> list[str]:
    """`--metrics a,b` (in that order), `--metrics all` (every metric in the listing), or the
    ones people choose checkpoints by (`core.metric_names.default_metrics`)."""
    if metrics is None:
        return metric_order(default_metrics(present, monitored))
    if metrics.strip() == ALL_METRICS:
        return metric_order(present)
    return [name.strip() for name in metrics.split(",") if name.strip()]


def list_table(
    rows: Sequence[Checkpoint],
    columns: str | None,
    metrics: str | None,
    *,
    default: str,
    places: Mapping[int, tuple[str, str | None]] | None = None,
    monitored: Collection[str] = (),
) -> tuple[list[Column], list[list[str]], dict[int, list[str]]]:
    """The columns, cells and root headings of `ckpt list` for `--columns` / `--metrics`
    (`default`: the columns without --columns; `places`: each row's location, as
    `Catalog.locations` gives it; `monitored`: metrics always shown)."""
    present = sorted({name for c in rows for name in c.metrics})
    wanted = _column_names(columns or default, present, rows)
    unknown = [m for m in chosen_metrics(present, metrics, monitored) if m not in present]
    if unknown and rows:  # as --columns: with no rows, no metric is known
        shown = ", ".join(metric_order(present)) or "none"
        raise UsageError(
            f"--metrics: unknown metric {unknown[0]!r} (metrics in this listing: {shown})"
        )
    explicit = columns is not None
    header: list[Column] = []
    cells: list[list[str]] = [[] for _ in rows]
    for name in wanted:
        if name == "metrics":
            for metric in chosen_metrics(present, metrics, monitored):
                header.append(Column(metric, align="right", keep=explicit, drop_last=True))
                for row, cell in zip(cells, _metric_cells(rows, metric), strict=True):
                    row.append(cell)
            continue
        if name in LIST_COLUMNS:
            base = LIST_COLUMNS[name]
            if name == "path":  # cut down to the file names before any column is left out
                base = replace(base, min_width=path_floor([c.path for c in rows]))
            header.append(replace(base, keep=base.keep or explicit))
            for row, c in zip(cells, rows, strict=True):
                row.append(_cell(c, name, places or {}))
        else:  # a metric named in --columns
            header.append(Column(name, align="right", keep=True, drop_last=True))
            for row, cell in zip(cells, _metric_cells(rows, name), strict=True):
                row.append(cell)
    return header, cells, root_headings([c.root for c in rows])


def path_floor(paths: Sequence[str]) -> int:
    """The narrowest a PATH column gets before other columns go: the longest file name with
    `…/` (a path is cut down to its file name, never into it), within 16 and 32."""
    longest = max((len(p) - p.rfind("/") - 1 for p in paths), default=0)
    return max(HARD_FLOOR, min(LIST_COLUMNS["path"].min_width, longest + 2))


def _column_names(columns: str, present: Sequence[str], rows: Sequence[Checkpoint]) -> list[str]:
    names = [name.strip() for name in columns.split(",") if name.strip()]
    if not names:
        raise UsageError("--columns: no column named")
    unknown = [n for n in names if n not in LIST_COLUMNS and n != "metrics" and n not in present]
    if unknown and rows:  # with no rows, no metric is known: nothing to check against
        known = ", ".join([*LIST_COLUMNS, "metrics"])
        metric_names = ", ".join(metric_order(present)) or "none"
        raise UsageError(
            f"--columns: unknown column {unknown[0]!r} (columns: {known}; "
            f"metrics in this listing: {metric_names})"
        )
    return names


# What each column of LIST_COLUMNS but `location` (see `_cell`) says of a checkpoint.
_CELLS: dict[str, Callable[[Checkpoint], str]] = {
    "id": lambda c: str(c.id),
    "path": lambda c: relative_path(c.path, [c.root]),
    "run": lambda c: c.run,
    "epoch": lambda c: "" if c.epoch is None else str(c.epoch),
    "step": lambda c: "" if c.step is None else str(c.step),
    "size": lambda c: format_size(c.size_bytes),
    "format": lambda c: c.format or "",
    "kind": lambda c: c.kind or "",
    "optimizer": lambda c: c.optimizer or "",
    "status": lambda c: c.status.value + (REASON_FLAG if c.reason else ""),
    "mtime": lambda c: short_time(iso_utc(c.mtime)),
    "versions": lambda c: str(c.versions_kept) if c.versions_kept else "",
}


def _cell(c: Checkpoint, name: str, places: Mapping[int, tuple[str, str | None]]) -> str:
    if name == "location":  # the bytes at the path need no word; elsewhere they do
        place = places.get(c.id, ("local", None))[0]
        return "" if place == "local" else place
    return _CELLS[name](c)


def _metric_cells(rows: Sequence[Checkpoint], metric: str) -> list[str]:
    # NaN for a metric logged as NaN/inf (printed `null`), None for a row without it ("").
    values = [
        (math.nan if c.metrics[metric] is None else c.metrics[metric])
        if metric in c.metrics
        else None
        for c in rows
    ]
    return number_cells(values)


def root_headings(roots: Sequence[str]) -> dict[int, list[str]]:
    """`root PATH` before the first row of each root, when the rows span several roots
    (rows are grouped by root first, see `grouped_by_root`)."""
    if len(set(roots)) < 2:
        return {}
    headings: dict[int, list[str]] = {}
    for i, root in enumerate(roots):
        if i == 0 or roots[i - 1] != root:
            headings[i] = [f"root {root}"]
    return headings


def grouped_by_root(rows: Sequence[Any]) -> list[Any]:
    """Rows of several roots grouped by root (in order of first appearance), each group in
    the query's order: relative paths are only unambiguous under their root's heading."""
    order: dict[str, int] = {}
    for row in rows:
        order.setdefault(row.root, len(order))
    return sorted(rows, key=lambda row: order[row.root])


# ---- ckpt runs ----

RUN_COLUMNS = [
    Column("RUN", cut="left", keep=True),
    Column("CHECKPOINTS", align="right", keep=True),
    Column("SIZE", align="right", keep=True),
    Column("NEWEST", cut="left"),
]


def runs_table(
    found: Sequence[Run], values: dict[str, dict[str, float | None]], metrics: str | None
) -> tuple[list[list[str]], dict[int, list[str]], dict[int, list[str]]]:
    """Cells of `ckpt runs` and the lines under each run: its file-name template (when the
    run knows one) and its best checkpoint per metric with the value (`values`: metrics by
    path of the best checkpoints)."""
    present = {name for r in found for name in r.best}
    unknown = [m for m in chosen_metrics(list(present), metrics) if m not in present]
    if unknown and found:
        shown = ", ".join(metric_order(list(present))) or "none"
        raise UsageError(f"--metrics: unknown metric {unknown[0]!r} (metrics of the runs: {shown})")
    cells, after = [], {}
    for i, r in enumerate(found):
        newest = _in_run(r, r.newest) if r.newest else "-"
        cells.append([r.name, str(r.checkpoints), format_size(r.bytes), newest])
        after[i] = failed_save_lines(r) + template_lines(r) + best_lines(r, values, metrics)
    return cells, root_headings([r.root for r in found]), after


def _in_run(r: Run, path: str) -> str:
    """A path of run `r` relative to the run's folder (just the file name, mostly)."""
    folder = r.root if r.name == "." else f"{r.root.rstrip('/')}/{r.name}"
    return relative_path(path, [folder, r.root])


def failed_save_lines(r: Run) -> list[str]:
    """`  last save did not complete: 2.orbax-checkpoint-tmp (abandoned)`, when it did not."""
    save = r.last_save_failed
    if save is None:
        return []
    return [f"  last save did not complete: {visible(_in_run(r, save['path']))} ({save['status']})"]


def template_lines(r: Run) -> list[str]:
    """`  names model-{epoch:02d}-{val_loss:.2f}.keras (inferred, 6 files)`: each file-name
    scheme of the run (`core.naming`), and its steps per epoch when learned."""
    lines = []
    for scheme in r.naming:
        template = visible(scheme.get("template", ""))
        origin, members = scheme.get("origin", "?"), scheme.get("members", 0)
        lines.append(f"  names {template} ({origin}, {members} file{'s' * (members != 1)})")
    if r.steps_per_epoch:
        lines.append(f"  {r.steps_per_epoch} steps per epoch (from optimizer iterations)")
    return lines


def best_lines(
    r: Run, values: dict[str, dict[str, float | None]], metrics: str | None
) -> list[str]:
    """`  best e03-vl1.643.keras: loss 1.047, val_loss 1.643`, one line per best checkpoint."""
    names = chosen_metrics(list(r.best), metrics)
    by_path: dict[str, list[str]] = {}
    for name in names:
        path = r.best.get(name)
        if path is None:
            continue
        value = values.get(path, {}).get(name)
        by_path.setdefault(path, []).append(f"{name} {metric_text(value)}")
    # The path first: on a narrow terminal the line is cut at its end, in the values.
    return [f"  best {_in_run(r, path)}: {', '.join(shown)}" for path, shown in by_path.items()]


# ---- ckpt log ----

LOG_COLUMNS = [
    Column("AT", keep=True),
    Column("ACTION", keep=True),
    Column("STATE", keep=True),
    Column("PATH", cut="left", keep=True, min_width=16),
    Column("ACTOR", cut="right", min_width=8, shrink_first=True),
    Column("NODE", cut="right", min_width=6, shrink_first=True),
    Column("REASON", cut="right", min_width=8, shrink_first=True),  # cut before the path
]


def log_columns(events: Sequence[dict[str, Any]]) -> list[Column]:
    """LOG_COLUMNS, its PATH cut down to the file names before the reason is left out."""
    floor = path_floor([e["path"] for e in events if e["path"]])
    return [replace(c, min_width=floor) if c.header == "PATH" else c for c in LOG_COLUMNS]


def log_rows(events: Sequence[dict[str, Any]], roots: Sequence[str]) -> list[list[str]]:
    return [
        [
            short_time(e["at"]),
            e["action"],
            e["state"],
            relative_path(e["path"], roots),
            e["actor"] or "",
            e.get("node") or "",
            e["reason"] or "",
        ]
        for e in events
    ]
