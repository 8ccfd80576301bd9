"""`ckpt wait`: what an evaluator loop or a deploy step runs instead of `sleep 30`."""

from __future__ import annotations

import click

from ..core.errors import UsageError
from ..core.units import parse_duration
from . import documents
from .context import Context, pass_context
from .output import echo, emit_json, say_passed_over


@click.command()
@click.option("--run", required=True, help="The run (and the runs below it) to wait for.")
@click.option(
    "--newer-than",
    "newer_than",
    type=int,
    metavar="STEP",
    help="A checkpoint past this step (its epoch for checkpoints that record no step).",
)
@click.option(
    "--after",
    metavar="REF",
    help="A checkpoint past this one (a path or catalog id): further along, or at the same "
    'point and written later. Empty (a loop\'s first `--after "$ck"`): as if not given.',
)
@click.option("--metric", help="Only a checkpoint that has this metric.")
@click.option(
    "--better-than",
    "better_than",
    type=float,
    metavar="X",
    help="With --metric: its value better than X (lower for losses, higher for accuracy-like "
    "metrics, as `ckpt best` judges).",
)
@click.option(
    "--timeout",
    default="30m",
    show_default=True,
    help="Give up after this long (exit 6): 90s, 30m, 2h.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="The checkpoint's row + `preferred_over` and `passed_over` (new checkpoints with "
    "non-finite weights, each with its path and reason) as JSON.",
)
@pass_context
def wait(
    obj: Context,
    run: str,
    newer_than: int | None,
    after: str | None,
    metric: str | None,
    better_than: float | None,
    timeout: str,
    as_json: bool,
) -> None:
    """Block until a new complete checkpoint of a run is in the catalog; print its path.

    New: past --newer-than STEP, or past --after REF, or (neither) one the catalog did not
    hold when the wait began. Complete: `ok` only; a save in flight (an Orbax
    `.orbax-checkpoint-tmp` folder, a DCP folder without its `.metadata`), an abandoned one or
    a file still being written never answers, nor one whose weights the `integrity` stage
    found non-finite (passed over, said on stderr and at the timeout); with an `integrity`
    stage due on the run, a new checkpoint answers once its verdict is recorded. It wakes on
    the catalog's change (PostgreSQL LISTEN/NOTIFY, so a daemon on another host sharing the
    catalog wakes it; inotify on an SQLite catalog file), not a busy poll. Exit 6 at the
    timeout; exit 2 at once (one line saying which) when its SQLite catalog file is deleted,
    replaced or overwritten meanwhile.

    \b
    Example:  while ck=$(ckpt wait --run exp1 --after "$ck" --timeout 2h); do
                python eval.py "$ck"; done
    """
    try:
        seconds = parse_duration(timeout)
    except ValueError as exc:
        raise UsageError(f"--timeout: {exc}") from None
    with obj.catalog() as cat:
        found = cat.wait(
            run,
            newer_than=newer_than,
            # The example's loop passes "$ck", empty before its first answer: nothing seen yet.
            after=after or None,
            metric=metric,
            better_than=better_than,
            timeout=seconds,
        )
        # Printed before the catalog closes: the caller is waiting for this line.
        say_passed_over(found.details)
        if as_json:
            emit_json(documents.answer(found))
        else:
            echo(found.path)
