"""`ckpt scan`, `list`, `show`, `best` and `runs`: indexing and reading the catalog.

The read commands are the ones scripts call in loops: this module imports nothing beyond click
at load time, and each command imports only what it prints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ..core.errors import CkptError, NotFound, PartialFailure
from ..core.views import checkpoint_json
from . import documents
from .context import MAX_LIMIT, Context, pass_context
from .options import json_option, versions_option
from .output import echo, emit_json, emit_json_rows, live_work, say_passed_over, table

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..core.model import Checkpoint
    from ..core.progress import Progress

# `ckpt list`'s text columns without --columns (named here: --help says it without loading
# the table code).
DEFAULT_LIST_COLUMNS = "id,path,epoch,step,size,status,location,versions,metrics"


@click.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option(
    "--reindex",
    is_flag=True,
    help="Derive epochs, steps and metrics of every run walked again (after a change of "
    "filename_template or metrics_files), without reading any checkpoint again.",
)
@json_option("Print the scan report as JSON.")
@pass_context
def scan(obj: Context, paths: tuple[str, ...], reindex: bool, as_json: bool) -> None:
    """Index checkpoints now: PATHS (inside configured roots), or every root.

    Unchanged files are not read again; changed ones are re-indexed; vanished ones are
    marked missing. Then each run's epochs and metrics are derived from all its names, logs
    and checkpoints (`metrics_refreshed` counts the rows that changed). On a root other
    daemons share (PostgreSQL catalog), a new file another daemon is reading right now is left
    to it (`elsewhere`). Exits 3 when some checkpoints are corrupt or unreadable.

    \b
    Example:  ckpt scan runs/exp1 --json
              ckpt scan --reindex      # after editing filename_template
    """
    from ..logs import setup

    setup("debug" if obj.debug else "warning")
    with obj.catalog(create=True) as cat:
        roots = [str(r.path) for r in cat.config.roots]
        with live_work("checked", as_json=as_json, roots=roots) as work:
            report = cat.scan(paths, reindex=reindex, on_progress=_scan_lines(work, as_json))
    if as_json:
        emit_json(report.as_dict())
    else:
        echo(
            f"{len(report.indexed)} indexed, {report.unchanged} unchanged, "
            f"{len(report.incomplete)} incomplete, {len(report.failed)} failed, "
            f"{len(report.missing)} missing, {len(report.removed)} removed by their trainer, "
            f"{len(report.skipped)} skipped, {report.metrics_refreshed} re-derived"
            + (
                f", {len(report.elsewhere)} being read by another daemon"
                if report.elsewhere
                else ""
            )
        )
        for path, status, reason in report.failed:
            echo(f"  {status}: {path}: {reason}", err=True)
        for problem in report.errors:
            echo(f"  error: {problem}", err=True)
    if report.failed or report.errors:
        failed = len(report.failed) + len(report.errors)
        raise PartialFailure(f"scan: {failed} item(s) failed or could not be read")


def _scan_lines(work: Any, as_json: bool) -> Callable[[Progress], None]:
    """Feeds the bar, and streams a line per file read (indexed, incomplete or failed) as it
    is done; the unchanged ones of a big tree only count."""

    def report(p: Progress) -> None:
        work.update(p)
        if as_json or p.outcome in (None, "unchanged", "skipped", "vanished"):
            return
        why = f"  {p.detail}" if p.detail else ""
        work.line(f"{p.outcome:<10}  {work.relative(p.item)}{why}")

    return report


@click.command(name="list")
@click.option(
    "--run",
    help="Only this run (its folder relative to its root) and the runs below it "
    "(exp covers exp/checkpoints, not exp2).",
)
@click.option("--format", "fmt", help="Only this format, e.g. keras-v3-zip, keras-legacy-h5.")
@click.option(
    "--status",
    help="Only this status: ok, incomplete, abandoned, corrupt, unreadable, missing, removed, "
    "trashed, purged, standby. Without it, rows of files trashed, purged or removed by their "
    "trainer are left out, and so are standby rows (the kept copy of the generation a rewritten "
    "file holds now).",
)
@click.option(
    "--versions",
    is_flag=True,
    help="List the kept versions of rewritten files as rows too (without it, each file's "
    "VERSIONS column counts them).",
)
@click.option(
    "--all",
    "every_row",
    is_flag=True,
    help="Every row: kept versions, and files trashed, purged or removed by their trainer.",
)
@click.option("--kind", help="Only this kind: full, weights, adapter (a PEFT adapter).")
@click.option(
    "--where",
    multiple=True,
    metavar="EXPR",
    help="NAME OP VALUE with OP in < <= > >= == != over metrics and epoch, step, "
    "size, n_params; repeat to AND them.",
)
@click.option(
    "--sort",
    default="mtime",
    show_default=True,
    help="A column (epoch, step, size, mtime, id, path) or a metric name.",
)
@click.option("--desc", is_flag=True, help="Sort descending.")
@click.option("--limit", type=click.IntRange(min=0, max=MAX_LIMIT), help="At most N rows.")
@click.option(
    "--columns",
    metavar="A,B,...",
    help="Text columns, in this order: id, path, run, epoch, step, size, format, kind, "
    "optimizer, status, location, mtime, a metric name, or `metrics` (the --metrics columns). "
    f"Default: {DEFAULT_LIST_COLUMNS}.",
)
@click.option(
    "--metrics",
    metavar="M1,M2",
    help="The metric columns, val_X after X (default: the metrics checkpoints are chosen by: "
    "losses, accuracies, scores, and those retention's keep_best names; `all`: every metric "
    "in the listing, learning rates and runtimes too).",
)
@click.option(
    "--location",
    type=click.Choice(["local", "remote", "both", "none"]),
    help="Only checkpoints whose bytes are there: at their path (local), only in the object "
    "store (remote: tiered), both, or neither.",
)
@json_option("JSON array of checkpoint objects.")
@pass_context
def list_command(
    obj: Context,
    run: str | None,
    fmt: str | None,
    status: str | None,
    kind: str | None,
    versions: bool,
    every_row: bool,
    where: tuple[str, ...],
    sort: str,
    desc: bool,
    limit: int | None,
    columns: str | None,
    metrics: str | None,
    location: str | None,
    as_json: bool,
) -> None:
    """List catalogued checkpoints: the checkpoints themselves, each rewritten file with the
    count of its kept versions (VERSIONS; `--versions` lists them as rows), without the rows of
    files trashed, purged or removed by their trainer (`--status trashed` lists those), except
    checkpoints tiered to the object store: LOCATION says `remote` (their bytes are there).

    Paths are relative to their root (they start with the run's folder; every command takes
    them back as REF from any folder); a listing over several roots has a `root PATH` line
    before each root's rows; `--json` has absolute paths. A status marked `*` has a reason
    (`ckpt show ID` says it). Columns empty in every row are left out; on a narrow terminal
    the path is shortened from the left (`…/exp1/e07.keras`) before any column is left out;
    into a pipe, rows are never cut.

    \b
    Example:  ckpt list --run exp1 --where "val_loss < 0.3" --sort val_loss --limit 5
    \b
              ckpt list --columns id,path,epoch,format,metrics --metrics val_loss
    """
    with obj.catalog() as cat:
        rows = cat.list(
            run=run,
            where=where,
            sort=sort,
            desc=desc,
            limit=limit,
            format=fmt,
            status=status,
            kind=kind,
            versions=versions,
            every_row=every_row,
            location=location,
        )
        places = cat.locations(rows)
    if as_json:
        emit_json_rows(documents.list_rows(rows, places))
        return
    from .tables import grouped_by_root, list_table

    monitored = _monitored(obj.config())
    header, cells, headings = list_table(
        grouped_by_root(rows),
        columns,
        metrics,
        default=DEFAULT_LIST_COLUMNS,
        places=places,
        monitored=monitored,
    )
    table(header, cells, before=headings)


@click.command()
@click.argument("ref")
@json_option("JSON object with layers, configs, events.")
@pass_context
def show(obj: Context, ref: str, as_json: bool) -> None:
    """Everything known about one checkpoint. REF is a catalog id or a path: relative to its
    root (as `list` and every text line print it), absolute, or relative to the working folder.

    \b
    Example:  ckpt show runs/exp1/weights.07-0.23.hdf5
    """
    with obj.catalog() as cat:
        doc = checkpoint_json(cat.get(ref), detailed=True)
    if as_json:
        emit_json(doc)
        return
    from ..core.show_text import show_text
    from .output import print_wrapped

    print_wrapped(show_text(doc))


@click.command()
@click.option("--metric", required=True, help="Metric name, e.g. val_loss.")
@click.option(
    "--mode",
    type=click.Choice(["min", "max"]),
    help="Default: max for acc/auc/precision/recall/f1 metrics, else min.",
)
@click.option("--run", help="Only this run and the runs below it (exp covers exp/checkpoints).")
@click.option(
    "--artifact",
    type=click.Choice(["inference"]),
    help="Print the best checkpoint's inference artifact instead (see `ckpt split`).",
)
@click.option(
    "--fetch",
    is_flag=True,
    help="When the best is only in the object store (`remote:`), bring it back first "
    "(`ckpt fetch`) and print its local path.",
)
@versions_option
@json_option(
    "The checkpoint's row + `artifact`, `passed_over` (better checkpoints whose weights the "
    "integrity stage found non-finite, with path and reason), `location` and `remote_url` as "
    "JSON (with --artifact, `path` is the artifact's)."
)
@pass_context
def best(
    obj: Context,
    metric: str,
    mode: str | None,
    run: str | None,
    artifact: str | None,
    fetch: bool,
    versions: bool,
    as_json: bool,
) -> None:
    """The best `ok` checkpoint by a metric. Prints its absolute path alone, for scripts (exit
    6 if none; exit 2, naming the metrics there are, if no checkpoint has the metric).

    With object storage (`remote:`), a checkpoint tiered to the store (its bytes no longer on
    the local disk) can be the best: its `s3://` URL is printed instead, or with --fetch it is
    brought back and its local path printed.

    A checkpoint whose weights the `integrity` stage found non-finite is never the answer: the
    next best is, and stderr says which was passed over and why.

    \b
    Example:  python eval.py --weights "$(ckpt best --metric val_loss --run exp1)"
    """
    with obj.catalog() as cat:
        answer = cat.best_located(metric, mode, run, fetch=fetch, versions=versions)
        found = answer.checkpoint
        better = None if versions else _better_copy(cat, metric, mode, run, found)
        chosen = _artifact(cat.get(found.id), artifact) if artifact else None
    for skipped in found.details.get("skipped") or []:
        echo(f"ckpt: skipped {skipped}", err=True)
    say_passed_over(found.details)  # better ones with non-finite weights (integrity stage)
    if better is not None:
        echo(f"ckpt: a kept copy is better: {better} (ckpt best --versions)", err=True)
    if as_json:
        doc = documents.best(found, chosen)
        emit_json({**doc, "location": answer.location, "remote_url": answer.remote_url})
    elif chosen:
        echo(chosen["path"])
    else:
        echo(answer.remote_url if answer.remote_url and answer.location == "remote" else found.path)


def _better_copy(
    cat: Any, metric: str, mode: str | None, run: str | None, found: Checkpoint
) -> str | None:
    """The path of a kept copy of a rewritten file better than `found` (keras#17012: a resumed
    run overwrote the real best), said on stderr: the answer stays a trainer's checkpoint."""
    try:
        with_copies = cat.best(metric, mode, run, versions=True)
    except CkptError:
        return None
    if with_copies.version_of is None or with_copies.id == found.id:
        return None
    if with_copies.metrics.get(metric) == found.metrics.get(metric):
        return None  # as good, not better
    return str(with_copies.path)


def _artifact(found: Checkpoint, kind: str) -> dict[str, Any]:
    for item in found.details.get("artifacts") or []:
        if item["kind"] == kind:
            return dict(item)
    raise NotFound(
        f"the best checkpoint {found.path} has no {kind} artifact: run `ckpt split {found.id}`"
    )


@click.command()
@click.option(
    "--metrics",
    metavar="M1,M2",
    help="Which metrics' best checkpoints to show (default: those with a direction: losses, "
    "accuracies, scores; `all`: every metric of the run).",
)
@json_option("JSON array of run objects.")
@pass_context
def runs(obj: Context, metrics: str | None, as_json: bool) -> None:
    """Runs (folders holding checkpoints) with counts, bytes, newest and best checkpoints.

    One row per run (its folder relative to its root; a `root PATH` line heads each root's
    runs when there are several roots), then its best checkpoint per metric with the value,
    paths relative to the run's folder.

    \b
    Example:  ckpt runs --json
    """
    from .tables import RUN_COLUMNS, grouped_by_root, runs_table

    with obj.catalog() as cat:
        found = cat.runs()
        if as_json:
            emit_json(documents.runs(found))
            return
        found = grouped_by_root(found)
        values = _best_values(cat, found)
    cells, before, after = runs_table(found, values, metrics)
    table(RUN_COLUMNS, cells, before=before, after=after)


def _monitored(config: Any) -> set[str]:
    """The metrics retention keeps the best checkpoints by, in any policy of the config."""
    policies = [config.retention, *(r.retention for r in (*config.run_rules, *config.roots))]
    return {b.metric for p in policies if p is not None for b in p.keep_best}


def _best_values(cat: Any, found: list[Any]) -> dict[str, dict[str, float | None]]:
    """The metrics of each run's best checkpoints, by path (one catalog read per checkpoint)."""
    values: dict[str, dict[str, float | None]] = {}
    for path in {p for r in found for p in r.best.values()}:
        try:
            values[path] = dict(cat.get(path).metrics)
        except NotFound:  # gone between the two reads: shown without its value
            values[path] = {}
    return values
