"""The checkpoint pipeline's bookkeeping: which jobs a complete checkpoint gets (made once, in
the catalog's queue, for each stage that is due and whose `needs` are done), which stages this
host may run (`runs_on` against `service.labels`), and what an attempt's end records (done with
its metrics, a retry after a backoff, failed with the reason). Running the child is the
service's (`service.stage_child`); deciding is `core.pipeline`'s."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..catalog.store import Store
from ..catalog.store_stage_jobs import StageJob, StageJobs
from ..core.errors import NotFound
from ..core.model import Checkpoint
from ..core.pipeline import (
    Stage,
    StageResult,
    backoff_seconds,
    final_verdict,
    not_due,
    parse_result,
)
from ..core.query import default_mode
from ..core.retention import Policy
from ..settings.config import Config
from .run_end import RunEnds


def runnable_here(stages: Iterable[Stage], labels: Sequence[str]) -> list[Stage]:
    """The stages this host may run: those whose `runs_on` labels it has."""
    return [s for s in stages if set(s.runs_on) <= set(labels)]


def make_jobs(store: Store, stages: Sequence[Stage], waiting: dict[int, str]) -> int:
    """The jobs of the complete checkpoints that lack them, each made once (any daemon may make
    them; the catalog keeps one): `pending` where the stage is due and its `needs` are done,
    `skipped` where it is not due (the decision recorded, so the checkpoint is looked at once),
    `cancelled` where a stage it needs failed. A stage whose needs are still open waits for the
    next pass: `waiting` ({checkpoint id: hash}) holds those, looked at again only once the
    caller drops them (when a job of theirs ends), and so does a `final` stage's checkpoint
    while its run may still be training (the caller drops those every `final_recheck`).
    Returns how many were made."""
    queue = store.stage_jobs
    made = 0
    ends, now = RunEnds(store), time.time()
    for ckpt_id in queue.without_jobs([s.name for s in stages], skip=waiting):
        try:
            checkpoint = store.get(str(ckpt_id))
        except NotFound:
            continue
        if checkpoint.hash is None or checkpoint.version_of is not None:
            continue
        states = {
            j.stage: j.state
            for j in queue.list(checkpoint_id=ckpt_id)
            if j.generation == checkpoint.hash
        }
        for stage in stages:
            if stage.name in states:
                continue
            key = [(ckpt_id, checkpoint.hash, stage.name)]
            why = not_due(stage, checkpoint, is_best=_is_best(store, stage, checkpoint))
            if why is None and stage.trigger.kind == "final":
                verdict, said = final_verdict(stage.trigger, ckpt_id, ends.of(checkpoint), now)
                if verdict == "wait":  # the run may still be training: looked at again later
                    waiting[ckpt_id] = checkpoint.hash
                    continue
                why = said if verdict == "skip" else None
            if why is not None:
                made += queue.make(key, state="skipped", error=why)
                continue
            unmet = [n for n in stage.needs if states.get(n) != "done"]
            gone = [n for n in unmet if states.get(n) in ("failed", "cancelled", "skipped")]
            if gone:
                why = f"needs {gone[0]}, which is {states[gone[0]]}"
                made += queue.make(key, state="cancelled", error=why)
            elif not unmet:
                made += queue.make(key)
            else:
                waiting[ckpt_id] = checkpoint.hash
    return made


def final_recheck(stages: Iterable[Stage]) -> float | None:
    """How often checkpoints waiting for their run's end (`on: final`) are looked at again: a
    quarter of the shortest quiet time, 1 to 30 s; None without a final stage."""
    quiet = [s.trigger.quiet_seconds for s in stages if s.trigger.kind == "final"]
    return min(max(min(quiet) / 4, 1.0), 30.0) if quiet else None


def _is_best(store: Store, stage: Stage, checkpoint: Checkpoint) -> bool:
    metric = stage.trigger.metric
    if stage.trigger.kind != "new_best" or metric is None or metric not in checkpoint.metrics:
        return False
    try:
        return store.best(metric, default_mode(metric), run=checkpoint.run).id == checkpoint.id
    except NotFound:
        return False


@dataclass(frozen=True)
class Attempt:
    """How one run of a stage's child ended."""

    exit_code: int | None  # None: killed (timeout, the service stopping, the job lost)
    stdout_tail: str
    output_tail: str  # stdout and stderr as printed, the tail
    error: str | None = None  # why it did not run or was killed


def record(queue: StageJobs, job: StageJob, stage: Stage, attempt: Attempt) -> str:
    """The attempt's end in the catalog (only while the job is still ours); returns the state
    recorded: done, pending (a retry), failed, or `lost` (another daemon has the job now)."""
    result: StageResult | str | None = None
    error = attempt.error
    if error is None and attempt.exit_code == 0:
        result = parse_result(stage.metric_prefix, attempt.stdout_tail)
        if isinstance(result, str):
            error = f"its result line was refused: {result}"
    elif error is None:
        lines = [ln for ln in attempt.output_tail.splitlines() if ln.strip()]
        error = f"exit {attempt.exit_code}" + (f": {lines[-1][:300]}" if lines else "")
    if error is None:
        parsed = result if isinstance(result, StageResult) else StageResult()
        document = {
            "metrics": parsed.metrics,
            "artifacts": list(parsed.artifacts),
            "note": parsed.note,
        }
        ok = queue.finish(
            job,
            state="done",
            error=None,
            output=attempt.output_tail,
            result=document,
            metrics_by_name=parsed.metrics,
        )
        return "done" if ok else "lost"
    retry = job.attempts <= stage.retries
    ok = queue.finish(
        job,
        state="failed",
        error=error,
        output=attempt.output_tail,
        result=None,
        retry_in=backoff_seconds(job.attempts) if retry else None,
    )
    return ("pending" if retry else "failed") if ok else "lost"


def awaiting_stages(
    config: Config, store: Store, found: Sequence[Checkpoint], policy: Policy
) -> dict[int, str]:
    """{checkpoint id: why retention keeps it}: those with a pending or running job of a stage
    whose metric a keep_best rule of `policy` ranks by (`keep_best: {metric: eval:accuracy}`
    waits for stage `eval`): a checkpoint is never dropped before it was evaluated."""
    feeding = {
        rule.metric.split(":", 1)[0]: rule.metric for rule in policy.keep_best if ":" in rule.metric
    }
    feeding = {s: m for s, m in feeding.items() if any(st.name == s for st in config.pipeline)}
    if not feeding or not found:
        return {}
    open_jobs = store.stage_jobs.open_for([c.id for c in found])
    kept = {}
    for ckpt_id, stages in open_jobs.items():
        fed = sorted(s for s in stages if s in feeding)
        if fed:
            kept[ckpt_id] = f"evaluation pending: stage {fed[0]} (keep_best {feeding[fed[0]]})"
    return kept
