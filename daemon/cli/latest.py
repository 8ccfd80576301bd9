"""`ckpt latest`: the checkpoint a preempted job resumes from.

A read command scripts call at every job start: it imports nothing beyond click at load time."""

from __future__ import annotations

import click

from . import documents
from .context import Context, pass_context
from .options import json_option, versions_option
from .output import echo, emit_json, say_passed_over


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
@click.option(
    "--fetch",
    is_flag=True,
    help="When the newest is only in the object store (`remote:`), bring it back first "
    "(`ckpt fetch`) and print its local path: resuming from the store in one command.",
)
@versions_option
@json_option(
    "The checkpoint's row + `resumable`, `resume_reason`, `passed_over` (newer "
    "checkpoints --resumable passed over, each with its path and reason: one that cannot "
    "resume, or whose weights the integrity stage found non-finite), `location` and "
    "`remote_url` as JSON."
)
@pass_context
def latest(
    obj: Context, run: str | None, resumable: bool, fetch: bool, versions: bool, as_json: bool
) -> None:
    """The newest `ok` checkpoint of a run. Prints its path alone (exit 6 if none).

    Newest is the most training progress: optimizer iterations, then epoch, then step, then
    mtime. For a TF checkpoint the path is the prefix `tf.train.Checkpoint.restore` takes. A
    checkpoint whose files changed since they were indexed is never printed: the next one is.
    With --resumable, neither is one whose weights the `integrity` stage found non-finite (NaN
    or Inf): stderr says which was passed over and why.

    With object storage (`remote:`), a checkpoint tiered to the store can be the newest: its
    `s3://` URL is printed instead, or with --fetch it is brought back and its local path
    printed.

    \b
    Example:  python train.py --resume-from "$(ckpt latest --run exp1 --resumable --fetch)"
    """
    with obj.catalog() as cat:
        answer = cat.latest_located(run, resumable, fetch=fetch, versions=versions)
        found = answer.checkpoint
    for skipped in found.details.get("skipped") or []:
        echo(f"ckpt: skipped {skipped}", err=True)
    say_passed_over(found.details)  # why the answer is not the newest
    if as_json:
        doc = documents.latest(found)
        if "resumable" not in found.details:  # an answer from the store: judged on its row
            from ..core.resume import may_resume_listed

            doc["resumable"] = may_resume_listed(found)
        emit_json({**doc, "location": answer.location, "remote_url": answer.remote_url})
    else:
        echo(answer.remote_url if answer.remote_url and answer.location == "remote" else found.path)
