"""Issue 43: the `final` trigger on a real catalog, real Hugging Face Trainer folders (the
session's cached `hf_runs`: max_steps 6, saved at steps 4 and 6) and this process's own open
file as a writer that /proc shows: a run's final checkpoint is its newest once the run has ended,
by the framework's record (`trainer_state.json` at max_steps) or by quiet time with no process
writing in its folder; an older checkpoint is skipped for good, and a run that resumes and ends
again gets a final job for its newer checkpoint too."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from ckpt_daemon.catalog.store import Store
from ckpt_daemon.settings import config as config_module
from ckpt_daemon.usecases import indexer
from ckpt_daemon.usecases.pipeline import make_jobs

pytestmark = pytest.mark.slow


def final_jobs(store: Store, root: Path) -> dict[str, tuple[str, str | None]]:
    found = store.stage_jobs.list()
    return {str(Path(j.path).relative_to(root)): (j.state, j.error) for j in found}


def test_the_final_checkpoint_of_each_run_gets_one_job(tmp_path: Path, hf_runs: Path) -> None:
    root = tmp_path / "runs"
    shutil.copytree(hf_runs / "trainer" / "out", root / "ended" / "out")
    # A run cut short at step 4 (of 6): its record says nothing of an end; quiet time does.
    cut_short = hf_runs / "trainer" / "out" / "checkpoint-4"
    shutil.copytree(cut_short, root / "cut" / "out" / "checkpoint-4")
    (tmp_path / "config.yaml").write_text(
        f"state_dir: {tmp_path / 'state'}\nroots:\n  - path: {root}\n"
        "pipeline:\n  - {name: last, command: [/bin/true], on: {final: 1s}}\n"
    )
    config = config_module.load(str(tmp_path / "config.yaml"))
    store = Store(config.database, may_migrate=True)
    try:
        indexer.scan(config, store, actor="test")
        # A process writes in the cut run's folder (this one, a real open file): not ended.
        with open(root / "cut" / "out" / "train.log", "w") as log:
            log.write("step 4\n")
            log.flush()
            waiting: dict[int, str] = {}
            make_jobs(store, config.pipeline, waiting)
            assert final_jobs(store, root) == {
                "ended/out/checkpoint-6": ("pending", None),  # trainer_state.json: 6 of 6
                "ended/out/checkpoint-4": (
                    "skipped",
                    f"not its run's final checkpoint: {root}/ended/out/checkpoint-6 was "
                    "saved after it",
                ),
            }
            assert len(waiting) == 1  # the cut run's newest, looked at again later
        # Its log closed; an hour later (its folder's mtimes set back: quiet since then).
        old = time.time() - 3600
        for path in (root / "cut" / "out", root / "cut" / "out" / "train.log"):
            os.utime(path, (old, old))
        waiting.clear()  # the runner lets them go every `final_recheck`
        make_jobs(store, config.pipeline, waiting)
        cut = [j for j in store.stage_jobs.list() if "/cut/" in j.path]
        assert [(Path(j.path).name, j.state) for j in cut] == [("checkpoint-4", "pending")]
        # The run resumes and ends again: its newer checkpoint is final too.
        resumed = root / "cut" / "out" / "checkpoint-6"
        shutil.copytree(hf_runs / "trainer" / "out" / "checkpoint-6", resumed)
        now = time.time()
        for path in [resumed, *resumed.iterdir()]:
            os.utime(path, (now, now))
        indexer.scan(config, store, actor="test")
        make_jobs(store, config.pipeline, {})
        cut = [j for j in store.stage_jobs.list() if "/cut/" in j.path]
        assert [(Path(j.path).name, j.state) for j in cut] == [
            ("checkpoint-4", "pending"),
            ("checkpoint-6", "pending"),
        ]
    finally:
        store.close()
