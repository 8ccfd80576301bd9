"""The Python API's pipeline half (`ckpt_daemon.api.Catalog`): the stages' jobs (`jobs`), a job
sent back to the queue or cancelled, and a stage run by hand on one checkpoint (`run_stage`),
recorded as the service records it; and the `integrity` scan of one checkpoint's weights."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core.errors import NotFound, UsageError
from ..core.pipeline import STATES, Stage
from .remote import CatalogRemote

if TYPE_CHECKING:
    from ..catalog.store_stage_jobs import StageJob


def job_json(job: StageJob, *, detailed: bool = False) -> dict[str, Any]:
    """A job as `ckpt jobs --json` prints it (docs/cli-contract.md)."""
    doc: dict[str, Any] = {
        "id": job.id,
        "stage": job.stage,
        "path": job.path,
        "run": job.run,
        "state": job.state,
        "attempts": job.attempts,
        "error": job.error,
        "started_at": job.started_at,
        "ended_at": job.ended_at,
        "checkpoint_id": job.checkpoint_id,
        "holder": job.holder,
        "result": job.result,
    }
    if detailed:
        doc["output"] = job.output
    return doc


class CatalogPipeline(CatalogRemote):
    def jobs(self, run: str | None = None, state: str | None = None) -> list[StageJob]:
        """The stages' jobs, oldest first (`state`: pending, running, done, failed, cancelled,
        skipped; without it, every state but skipped)."""
        if state is not None and state not in STATES:
            raise UsageError(f"unknown state {state!r}: one of {', '.join(STATES)}")
        found = self._store.stage_jobs.list(run=run, state=state)
        # A stage not due for a checkpoint is a decision, not work: listed when asked for.
        return found if state is not None else [j for j in found if j.state != "skipped"]

    def checkpoint_jobs(self, checkpoint_ids: Sequence[int]) -> dict[int, list[StageJob]]:
        """{checkpoint id: its jobs, oldest first}, skipped ones too (why a stage did not run
        on it): what the web view shows of each checkpoint's stages."""
        found: dict[int, list[StageJob]] = {}
        for job in self._store.stage_jobs.list(checkpoint_ids=checkpoint_ids, limit=100_000):
            found.setdefault(job.checkpoint_id, []).append(job)
        return found

    def jobs_changed(self) -> str:
        """A text that changes whenever a job does (the web view's pages are drawn again)."""
        return self._store.stage_jobs.signature()

    def retry_job(self, job_id: int) -> StageJob:
        """A failed or cancelled job back to the queue, its attempts counted afresh."""
        return self._move(job_id, "pending", ("failed", "cancelled", "done"), "retried by hand")

    def cancel_job(self, job_id: int) -> StageJob:
        """A pending job cancelled (a running one is cancelled when its attempt ends)."""
        return self._move(job_id, "cancelled", ("pending", "failed"), "cancelled by hand")

    def _move(self, job_id: int, state: str, only_from: tuple[str, ...], why: str) -> StageJob:
        queue = self._store.stage_jobs
        job = queue.get(job_id)
        if job is None:
            raise NotFound(f"no job {job_id}")
        verb = "retried" if state == "pending" else state
        if not queue.set_state(job_id, state, only_from=only_from, why=why):
            raise UsageError(
                f"job {job_id} is {job.state}: only a {' or '.join(only_from)} job can be {verb}"
            )
        moved = queue.get(job_id)
        assert moved is not None
        return moved

    def integrity(self, ref: str | int) -> dict[str, Any]:
        """The health scan of a checkpoint's weights (`usecases.integrity`): the built-in
        `integrity` stage's result line, `{metrics, note, flagged, path, format, files}`."""
        from ..usecases.integrity import scan_checkpoint

        return scan_checkpoint(self.get(ref))

    def stage(self, name: str) -> Stage:
        for stage in self.config.pipeline:
            if stage.name == name:
                return stage
        known = ", ".join(s.name for s in self.config.pipeline) or "none configured"
        raise UsageError(f"no stage {name!r} in the config's pipeline: {known}")

    def run_stage(self, name: str, ref: str) -> StageJob:
        """Run stage `name` on checkpoint `ref` now, in this process's child, and record its
        result as the service would (made or sent back to the queue, claimed, run, recorded)."""
        import os
        import socket
        import threading

        from ..service.pipeline_runner import run_and_record

        stage = self.stage(name)
        checkpoint = self.get(ref)
        if checkpoint.status.value != "ok" or checkpoint.hash is None:
            raise UsageError(
                f"{checkpoint.path} is {checkpoint.status.value}: only ok checkpoints run stages"
            )
        queue = self._store.stage_jobs
        queue.make([(checkpoint.id, checkpoint.hash, stage.name)])
        job = next(
            j
            for j in queue.list(checkpoint_id=checkpoint.id)
            if j.stage == stage.name and j.generation == checkpoint.hash
        )
        if job.state == "running":
            raise UsageError(f"job {job.id} of {stage.name} is running (held by {job.holder})")
        queue.set_state(
            job.id,
            "pending",
            only_from=("pending", "done", "failed", "cancelled"),
            why="run by hand",
        )
        holder = f"{socket.gethostname()}:{os.getpid()}"
        claimed = queue.claim_one(job.id, holder, self.config.lease_seconds)
        if claimed is None:
            raise UsageError(f"job {job.id} of {stage.name} was taken by another process meanwhile")
        run_and_record(self._store, self.config, stage, claimed, threading.Event())
        done = queue.get(job.id)
        assert done is not None
        return done
