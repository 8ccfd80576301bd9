"""`ckpt prune`, `pin`, `unpin`, `trash ...` and `log`: the retention commands of the CLI."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..core.errors import LeaseLost, PartialFailure, UsageError
from . import documents
from .context import MAX_LIMIT, Context, pass_context
from .options import json_option
from .output import echo, emit_json, live_work, table
from .remote import trash_remote

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ..core.progress import Progress
    from ..core.retention import Decision
    from ..usecases.pruner import PruneReport


@click.command()
@click.option(
    "--run",
    "runs",
    multiple=True,
    metavar="RUN",
    help="Only this run and the runs below it, each on its own (repeatable).",
)
@click.option("--keep-last", type=click.IntRange(min=1), help="Keep the N newest.")
@click.option("--keep-best", type=click.IntRange(min=1), help="Keep the N best by --metric.")
@click.option("--metric", help="The metric of --keep-best, e.g. val_loss.")
@click.option("--mode", type=click.Choice(["min", "max"]), help="Default: as Keras's monitor.")
@click.option("--keep-every", type=click.IntRange(min=1), help="Keep every Nth epoch (or step).")
@click.option("--keep-within", metavar="DUR", help="Keep those within DUR of the run's newest.")
@click.option("--max-bytes", metavar="SIZE", help="Trash beyond this size per run (e.g. 50GB).")
@click.option("-n", "--dry-run", is_flag=True, help="Say what would happen; change nothing.")
@json_option("The plan and the outcome as JSON.")
@pass_context
def prune(
    obj: Context,
    runs: tuple[str, ...],
    keep_last: int | None,
    keep_best: int | None,
    metric: str | None,
    mode: str | None,
    keep_every: int | None,
    keep_within: str | None,
    max_bytes: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Apply retention: each checkpoint is kept (with every reason) or moved to the trash.

    With no keep flag, the policies of the config apply (`retention:`, per root, `runs:`).
    The newest checkpoint of a run, pinned ones, incomplete ones and the best of each metric
    are never trashed. Exit 3 if some moves failed, 4 if another process holds a run or
    took it meanwhile (its lease lost while this one was stopped).

    \b
    Example:  ckpt prune --run exp1 --keep-last 3 --keep-best 2 --metric val_loss --dry-run
    """
    from ..core.retention import KeepBest, Policy
    from ..core.units import parse_duration, parse_size

    if (keep_best is None) != (metric is None):
        raise UsageError("--keep-best and --metric go together")
    if metric is not None and not metric.strip():
        raise UsageError("--metric: an empty name: give the metric, e.g. val_loss")
    try:
        within = parse_duration(keep_within) if keep_within is not None else None
    except ValueError as exc:
        raise UsageError(f"--keep-within: {exc}") from None
    try:
        size = parse_size(max_bytes) if max_bytes is not None else None
    except ValueError as exc:
        raise UsageError(f"--max-bytes: {exc}") from None
    try:
        given = Policy(
            keep_last=keep_last,
            keep_best=(KeepBest(metric, keep_best, mode),) if keep_best and metric else (),
            keep_every=keep_every,
            keep_within=within,
            max_bytes=size,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    policy = None if given.is_empty() else given
    with obj.catalog() as cat:
        if metric is not None:
            cat.check_metric("--metric", metric)
        roots = [str(r.path) for r in cat.config.roots]
        with live_work("moved to the trash", as_json=as_json, roots=roots) as work:

            def moved(p: Progress) -> None:  # each move as it is done; the plan at the end
                work.update(p)
                if p.finished and not as_json:
                    why = f": {p.detail}" if p.detail else ""
                    work.line(f"{p.outcome} {work.relative(p.item)}{why}")

            report = cat.prune(list(runs), policy, dry_run=dry_run, on_progress=moved)
    if as_json:
        emit_json(report.as_dict())
    else:
        _print_plan(report, obj.shown)
    if report.lease_lost:  # another process took a run: exit 4, as a lease held at the start
        runs_lost = ", ".join(lost["run"] for lost in report.lease_lost)
        raise LeaseLost(f"prune: stopped: the lease of {runs_lost} was lost (see above)")
    if report.failures:
        raise PartialFailure(f"prune: {len(report.failures)} move(s) failed")


def _print_plan(report: PruneReport, shown: Callable[[str], str]) -> None:
    """The plan of each run, paths relative to their root (as `ckpt list`); on a terminal
    each line fits its width (the path cut from the left, the reasons from the right)."""
    from ..core.units import format_size
    from .output import fitted, path_line, terminal_width

    width = terminal_width()
    verb = "would trash" if report.dry_run else "trashed"
    for rp in report.runs:
        tiered = [d for d in rp.plan.to_trash() if d.action == "tier"]
        tiered = [d for d in tiered if rp.moved is None or d.id in rp.moved]
        to_store = f" ({len(tiered)} to the object store)" if tiered else ""
        given_up = len(rp.remote_doomed()) if rp.remote_moved is None else len(rp.remote_moved)
        if given_up:
            to_store += (
                f", {given_up} remote cop{'y' if given_up == 1 else 'ies'} to the store's trash"
            )
        echo(  # what moved, not what was planned (failures are listed below)
            fitted(
                f"{rp.run}: {rp.trashed} of {len(rp.plan.decisions)} {verb}{to_store}, "
                f"{format_size(rp.bytes_freed)} ({rp.policy})",
                width,
            )
        )
        for head, path, why in _plan_lines(rp.plan.decisions, shown):
            echo(path_line(head, path, why, width))
        for note in rp.plan.notes:
            echo(fitted(f"  note: {note}", width))
    for skipped in report.skipped:
        echo(f"{skipped['run']}: skipped: {skipped['reason']}")
    for failure in report.failures:
        echo(f"  failed: {shown(failure['path'])}: {failure['error']}", err=True)


def _plan_lines(
    decisions: Sequence[Decision], shown: Callable[[str], str]
) -> list[tuple[str, str, str]]:
    """`  keep  job/best.keras  newest`, and under a rewritten file the decisions on its kept
    versions (`      v1 trash  matched no keep rule`): a version is folded under its file,
    not a checkpoint of its own (a version of a file no longer in the plan has its own line)."""
    from ..core.versions import original_parts

    lines: dict[str, list[tuple[str, str, str]]] = {}
    folded: dict[str, list[tuple[str, str, str]]] = {}
    for d in decisions:
        path = shown(d.path)
        version = original_parts(path.split("/"))
        why = "; ".join(d.reasons)
        if version is not None:
            file, generation = "/".join(version[0]), version[1]
            folded.setdefault(file, []).append((f"      v{generation} ", f"{d.action:<5}", why))
        else:
            lines[path] = [(f"  {d.action:<5} ", path, why)]
    for file, under in folded.items():
        lines.setdefault(file, [("  (versions of ", f"{file})", "")]).extend(under)
    return [line for group in lines.values() for line in group]


@click.command()
@click.argument("ref")
@pass_context
def pin(obj: Context, ref: str) -> None:
    """Pin a checkpoint (id or path): retention never trashes it.

    \b
    Example:  ckpt pin "$(ckpt best --metric val_loss --run exp1)"
    """
    with obj.catalog() as cat:
        c = cat.pin(ref)
    where = "" if c.status.value != "trashed" else f" (in the trash: ckpt trash restore {c.id})"
    echo(f"pinned: {obj.shown(c.path)}{where}")


@click.command()
@click.argument("ref")
@pass_context
def unpin(obj: Context, ref: str) -> None:
    """Unpin a checkpoint (id or path).

    \b
    Example:  ckpt unpin 42
    """
    with obj.catalog() as cat:
        echo(f"unpinned: {obj.shown(cat.pin(ref, False).path)}")


@click.group()
def trash() -> None:
    """The trash: `ckpt trash list`, `restore REF`, `purge [--older-than DUR]`, `remote REF...`
    (remote copies under their store's trash prefix)."""


trash.add_command(trash_remote)


@trash.command(name="list")
@json_option("JSON array.")
@pass_context
def trash_list(obj: Context, as_json: bool) -> None:
    """Trashed checkpoints: where they were, where they are, when and why.

    \b
    Example:  ckpt trash list --json
    """
    from ..core.units import format_size

    with obj.catalog() as cat:
        items = cat.trash()
    if as_json:
        emit_json(items)  # the catalog's trash records, as they are
        return
    from ..core.table import Column

    table(
        [
            Column("ID", align="right", keep=True),
            Column("CHECKPOINT", cut="left", keep=True, min_width=16),
            Column("SIZE", align="right"),
            Column("TRASHED"),
            Column("WHY", cut="right"),
        ],
        [
            [
                str(t["id"]),
                obj.shown(t["path"]) + (" (remote copy)" if t.get("location") == "remote" else ""),
                format_size(t["bytes"]),
                t.get("at", "-"),
                t["reason"] or "",
            ]
            for t in items
        ],
    )


@trash.command()
@click.argument("ref")
@pass_context
def restore(obj: Context, ref: str) -> None:
    """Put a trashed checkpoint back, byte for byte (REF: id or original path).

    \b
    Example:  ckpt trash restore runs/exp1/weights.03-0.41.hdf5
    """
    with obj.catalog() as cat:
        echo(f"restored: {obj.shown(cat.restore(ref).path)}")


@trash.command()
@click.option(
    "--older-than",
    metavar="DUR",
    help="Only what was trashed longer ago than this (default: trash.purge_after).",
)
@click.option("-n", "--dry-run", is_flag=True, help="List what would be deleted.")
@json_option("JSON: {dry_run, purged, failures}.")
@pass_context
def purge(obj: Context, older_than: str | None, dry_run: bool, as_json: bool) -> None:
    """Delete trashed checkpoints for good, once past the grace period.

    \b
    Example:  ckpt trash purge --older-than 3d --dry-run
    """
    from ..usecases.pruner import parse_older_than

    parse_older_than(older_than, obj.config())  # a mistyped duration first, before the catalog
    with obj.catalog() as cat:
        done, failures = cat.purge(older_than, dry_run=dry_run)
        in_trash = len(cat.trash()) if not done and not failures and not as_json else 0
    if as_json:
        emit_json(documents.purge(dry_run, done, failures))
    else:
        verb = "would purge" if dry_run else "purged"
        for item in done:
            echo(f"{verb}: {obj.shown(item['path'])}")
        if not done and not failures:  # a dry run always says what it would do
            age = f"--older-than {older_than}" if older_than is not None else "trash.purge_after"
            echo(
                f"nothing to purge: {in_trash} checkpoint(s) in the trash, none trashed "
                f"longer ago than {age}"
            )
        for failure in failures:
            echo(f"failed: {obj.shown(failure['path'])}: {failure['error']}", err=True)
    if failures:
        raise PartialFailure(f"trash purge: {len(failures)} item(s) failed")


@click.command(name="log")
@click.option("--run", help="Only events of this run and the runs below it.")
@click.option("--limit", type=click.IntRange(min=1, max=MAX_LIMIT), default=200, show_default=True)
@json_option("JSON array of events.")
@pass_context
def log_command(obj: Context, run: str | None, limit: int, as_json: bool) -> None:
    """The audit log: every index, trash, restore, purge, pin, with reason, actor and node.

    Times are UTC to the second; paths are relative to their root. On a terminal a long
    reason is cut (`--json` has it whole); into a pipe, nothing is cut.

    \b
    Example:  ckpt log --run exp1 --limit 20
    """
    with obj.catalog() as cat:
        events = cat.log(run, limit)
        if as_json:
            emit_json(events)  # oldest first, as the catalog keeps them
            return
        roots = [str(root.path) for root in cat.config.roots]
    from .tables import log_columns, log_rows

    table(log_columns(events), log_rows(events, roots))
