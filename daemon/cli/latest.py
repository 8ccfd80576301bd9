"""`ckpt latest`: the checkpoint a preempted job resumes from.

A read command scripts call at every job start: it imports nothing beyond click at load time."""

from __future__ import annotations

import click

from . import documents
from .context import Context, pass_context
from .options import json_option
from .output import echo, emit_json


@click.command()
@click.option(
    "--run",
    help="Only this run and the runs below it (exp covers exp/checkpoints). Required when "
    "several runs have ok checkpoints.",
)
@click.option(
    "--resumable",
    is_flag=True,
    help="Only checkpoints training can resume from: optimizer state that its loader restores "
    "(a .keras, a tf-keras .h5, a TF checkpoint, a torch or Lightning checkpoint with a scheduler "
    "or epoch/step); not a Keras 3 legacy .h5, a .keras whose compile config lost its optimizer, "
    "weights-only files (.safetensors) or a SavedModel.",
)
@json_option(
    "The checkpoint's row + `resumable`, `resume_reason` and `passed_over` (newer "
    "checkpoints --resumable passed over, each with its path and reason) as JSON."
)
@pass_context
def latest(obj: Context, run: str | None, resumable: bool, as_json: bool) -> None:
    """The newest `ok` checkpoint of a run. Prints its path alone (exit 6 if none).

    Newest is the most training progress: optimizer iterations, then epoch, then step, then
    mtime. For a TF checkpoint the path is the prefix `tf.train.Checkpoint.restore` takes. A
    checkpoint whose files changed since they were indexed is never printed: the next one is.

    \b
    Example:  python train.py --resume-from "$(ckpt latest --run exp1 --resumable)"
    """
    with obj.catalog() as cat:
        found = cat.latest(run, resumable)
    for skipped in found.details.get("skipped") or []:
        echo(f"ckpt: skipped {skipped}", err=True)
    passed = found.details.get("passed_over") or []
    if passed:  # why the answer is not the newest: said once, the list is in --json
        first = passed[0]
        more = f" (and {len(passed) - 1} more)" if len(passed) > 1 else ""
        echo(f"ckpt: passed over {first['path']}{more}: {first['reason']}", err=True)
    if as_json:
        emit_json(documents.latest(found))
    else:
        echo(found.path)
