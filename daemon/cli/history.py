"""`ckpt history`, `plot` and `du`: looking at runs and at the space they take.

The decisions (epochs, values, marks, chart cells, kinds) are in core.history, core.chart and
core.usage; the reading in usecases.history; this module only prints (and `plot` draws through
cli.plot_png, the only matplotlib import, loaded by that command alone)."""

from __future__ import annotations

from pathlib import Path

import click

from ..core.errors import UsageError
from .context import Context, pass_context
from .options import json_option
from .output import echo, emit_json, table, terminal_width


@click.command()
@click.option(
    "--run", required=True, help="The run (its folder relative to its root), as `ckpt runs`."
)
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    help="A metric to show; repeat for more. Default: the run's keep_best metrics, val_loss "
    "and loss where logged.",
)
@json_option("The epochs and checkpoints as JSON.")
@pass_context
def history(obj: Context, run: str, metrics: tuple[str, ...], as_json: bool) -> None:
    """A run's metrics per epoch, from its logs and its checkpoints, each checkpoint marked:
    kept, best (by that metric, its mode as `ckpt best`), pinned, trashed, version, missing.

    On a terminal a chart of each metric comes first (fitted to its width); into a pipe or
    with --json, none. Epochs without a checkpoint are shown too (the curve of the logs).

    \b
    Example:  ckpt history --run exp1 --metric val_loss --metric val_accuracy
    """
    from ..core.history import history_json
    from ..core.history import table as history_table

    with obj.catalog() as cat:
        found = cat.history(run, metrics)
    if as_json:
        emit_json(history_json(found))
        return
    width = terminal_width()
    if width is not None:
        from ..core.chart import chart, legend, points

        charts = [
            chart(f"{name} ({mode}) per epoch, run {found.run}", points(found, name), width)
            for name, mode in found.metrics
        ]
        charts = [lines for lines in charts if lines]
        for lines in charts:
            for line in lines:
                echo(line)
            echo("")
        for line in legend(charts, width):
            echo(line)
        if charts:
            echo("")
    columns, cells = history_table(found)
    table(columns, cells)
    for note in found.notes:
        echo(f"ckpt: {note}", err=True)


@click.command()
@click.option(
    "--run", "runs", multiple=True, required=True, help="A run; repeat to overlay several."
)
@click.option("--metric", required=True, help="The metric to plot, e.g. val_loss.")
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The PNG file to write (replaced whole).",
)
@json_option("Also print what was plotted, as JSON.")
@pass_context
def plot(obj: Context, runs: tuple[str, ...], metric: str, output: Path, as_json: bool) -> None:
    """Write a PNG of a metric per epoch: one line per run, each checkpoint a marker (kept,
    best, pinned, trashed, version, missing). Needs matplotlib: pip install 'ckpt-daemon[plot]'.

    \b
    Example:  ckpt plot --run exp1 --run exp2 --metric val_loss -o compare.png
    """
    from . import plot_png  # first: without matplotlib, say so before reading anything

    plot_png.require()
    from ..core.history import series, series_json
    from ..usecases.history import write_output

    with obj.catalog() as cat:
        drawn = [series(cat.history(run, [metric]), metric) for run in runs]
    if not any(s.line for s in drawn):
        raise UsageError(f"no value of {metric!r} in {', '.join(runs)}: nothing to plot")
    write_output(output, plot_png.render(drawn, metric).png)
    if as_json:
        emit_json({"output": str(output), "series": [series_json(s) for s in drawn]})
    else:
        markers = sum(len(s.markers) for s in drawn)
        echo(f"{output}: {metric} of {len(drawn)} run(s), {markers} checkpoint(s) marked")
    for s in drawn:
        if s.unplaced:
            echo(
                f"ckpt: {s.run}: {len(s.unplaced)} checkpoint(s) without an epoch or value "
                "there, not plotted",
                err=True,
            )


@click.command()
@json_option("Bytes per root, run and kind as JSON.")
@pass_context
def du(obj: Context, as_json: bool) -> None:
    """Disk space per root and run, by kind: checkpoints, inference artifacts, versions, the
    trash; biggest first; and the bytes in the object store (verified remote copies: REMOTE,
    not part of TOTAL, which is the local disk's). From the catalog (sizes when indexed):
    nothing is walked.

    \b
    Example:  ckpt du --json
    """
    from ..core.usage import usage_json, versions_cost

    with obj.catalog() as cat:
        found = cat.du()
    if as_json:
        emit_json(usage_json(found))
        return
    from ..core.table import Column
    from ..core.units import format_size

    columns = [
        Column("RUN", cut="left", keep=True),
        Column("TOTAL", align="right", keep=True),
        *(Column(h, align="right") for h in ("CHECKPOINTS", "INFERENCE", "VERSIONS", "TRASH")),
        Column("REMOTE", align="right"),
    ]
    cells: list[list[str]] = []
    before: dict[int, list[str]] = {}
    for usage in found:
        head = f"root {usage.root.name}  {format_size(usage.root.total)}"
        cost = versions_cost(usage.root)
        if cost["bytes"]:  # versions in the trash hold space too, until purged
            head += (
                f"  (versions {format_size(cost['bytes'])}: {format_size(cost['kept_bytes'])}"
                f" kept + {format_size(cost['trash_bytes'])} in the trash)"
            )
        if usage.root.remote_bytes:
            head += f"  (remote {format_size(usage.root.remote_bytes)})"
        before[len(cells)] = [head]
        for t in usage.runs:
            sizes = [format_size(t.bytes[k]) if t.files[k] else "" for k in t.bytes]
            remote = format_size(t.remote_bytes) if t.remote_files else ""
            cells.append([t.name, format_size(t.total), *sizes, remote])
    if not cells:
        echo("the catalog holds no files (see `ckpt scan`)")
        return
    table(columns, cells, before=before)
