"""`ckpt jobs` (the pipeline's queue: list, `retry ID`, `cancel ID`), `ckpt stage run NAME
REF` (a stage by hand on one checkpoint, recorded as the service records it) and `ckpt
integrity REF` (the built-in integrity stage's scan of the weights)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..api.pipeline import job_json
from ..core.pipeline import STATES
from .context import Context, pass_context
from .options import json_option
from .output import echo, emit_json

if TYPE_CHECKING:
    from ..catalog.store_stage_jobs import StageJob


@click.group(invoke_without_command=True)
@click.option("--run", "run", metavar="RUN", help="Only jobs of checkpoints of RUN (and below).")
@click.option("--state", type=click.Choice(STATES), help="Only jobs in this state.")
@json_option("JSON array: {id, stage, path, run, state, attempts, error, started_at, ended_at}.")
@click.pass_context
def jobs(ctx: click.Context, run: str | None, state: str | None, as_json: bool) -> None:
    """The pipeline's jobs: one per complete checkpoint and stage of `pipeline:`.

    `retry ID` sends a failed or cancelled job back to the queue; `cancel ID` cancels a
    pending one.

    \b
    Examples:  ckpt jobs --state failed
               ckpt jobs --run exp1 --json
               ckpt jobs retry 12
    """
    if ctx.invoked_subcommand is not None:
        return
    obj: Context = ctx.obj
    with obj.catalog() as cat:
        found = cat.jobs(run=run, state=state)
    if as_json:
        emit_json([job_json(j) for j in found])
        return
    from ..core.table import Column
    from .output import table

    columns = [
        Column("ID", align="right", min_width=2),
        Column("STAGE", min_width=5),
        Column("STATE", min_width=5),
        Column("TRIES", align="right", min_width=5),
        Column("PATH", cut="left", shrink_first=True),
        Column("RESULT", cut="right"),
    ]
    rows = [
        [str(j.id), j.stage, j.state, str(j.attempts), obj.shown(j.path), _outcome(j)]
        for j in found
    ]
    if not rows:
        echo("no jobs" + ("" if state is None else f" {state}"))
        return
    table(columns, rows)


def _outcome(job: StageJob) -> str:
    if job.error:
        return job.error
    metrics = (job.result or {}).get("metrics") or {}
    return ", ".join(f"{k}={v:g}" if v is not None else f"{k}=nan" for k, v in metrics.items())


def _job_action(name: str, state: str, summary: str) -> None:
    """`ckpt jobs NAME ID`: the catalog's `NAME_job` on job ID, then the job's new state."""

    @jobs.command(name=name, help=f"{summary}\n\n\b\nExample:  ckpt jobs {name} 12")
    @click.argument("job_id", metavar="ID", type=int)
    @pass_context
    def act(obj: Context, job_id: int) -> None:
        with obj.catalog() as cat:
            job = getattr(cat, f"{name}_job")(job_id)
        _say(obj, job, state)


def _say(obj: Context, job: StageJob, outcome: str) -> None:
    echo(f"job {job.id} ({job.stage} of {obj.shown(job.path)}): {outcome}")


_job_action("retry", "pending", "Send job ID back to the queue (attempts counted afresh).")
_job_action("cancel", "cancelled", "Cancel job ID (pending or failed).")


@click.group()
def stage() -> None:
    """Pipeline stages by hand: `ckpt stage run NAME REF`."""


@stage.command(name="run")
@click.argument("name")
@click.argument("ref")
@json_option("The job afterwards, as JSON (with `output`, the tail of what it printed).")
@pass_context
def stage_run(obj: Context, name: str, ref: str, as_json: bool) -> None:
    """Run stage NAME of the config's `pipeline:` on checkpoint REF now, and record its result.

    The stage runs as the service runs it (its command, time limit, environment and stdin),
    in this process's child; its metrics join the checkpoint's. Exit 3 if it failed.

    \b
    Example:  ckpt stage run eval runs/exp1/ckpt_epoch003.pt
    """
    from ..core.errors import PartialFailure

    with obj.catalog() as cat:
        job = cat.run_stage(name, ref)
    if as_json:
        emit_json(job_json(job, detailed=True))
    else:
        _say(obj, job, f"{job.state} {_outcome(job)}")
    if job.state != "done":
        raise PartialFailure(f"stage {name} {job.state}: {job.error}")


@click.command()
@click.argument("ref")
@json_option(
    "One line: {metrics: {integrity:scanned, integrity:tensors, integrity:nonfinite_tensors, "
    "integrity:nan, integrity:inf, integrity:zero_tensors, integrity:huge_tensors, "
    "integrity:dense_nan_tensors}, note, flagged, path, format, files} (the stage's result line)."
)
@pass_context
def integrity(obj: Context, ref: str, as_json: bool) -> None:
    """Scan checkpoint REF's weights for NaN, Inf, all-zero and huge (|x| > 1e30) tensors.

    Reads safetensors files, torch zips (.pt, .pth, .bin, Lightning .ckpt), Hugging Face
    folders, DCP folders and Keras HDF5 weights a chunk at a time, running nothing of the
    file; other formats are `not scanned`. This is the built-in `integrity` stage (`uses:
    integrity`): recorded as the checkpoint's `integrity:*` metrics, its health, by which
    `latest --resumable`, `best` and `wait` pass over a checkpoint with non-finite weights.
    Exit 0 whatever it found (the finding is the answer); 1 for weights that contradict
    themselves.

    \b
    Example:  ckpt integrity runs/exp1/ckpt_epoch003.pt
    """
    with obj.catalog() as cat:
        found = cat.integrity(ref)
    if as_json:
        emit_json(found)
        return
    echo(f"{obj.shown(found['path'])}: {found['note']}")
    for tensor in found["flagged"]:
        echo(f"  {tensor['name']} ({tensor['dtype']}, {tensor['elements']}): {tensor['found']}")
