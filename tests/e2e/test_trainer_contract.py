"""Issue 39, item 4: the trainer's contract, checked after every save of four real trainers
under a live `ckpt serve` (support/trainer_contract.py says what I1-I6 are and how each is
judged). The short version of bench/trainer_contract_campaign.py: one scenario per trainer, each
killed with SIGKILL after a save and resumed from what `ckpt latest --resumable` answers, each
with the policy a user of that framework writes; the PyTorch loop on a small filesystem with
`min_free` (the disk guard, and a control run of the same loop without the service).

A failure lists every violation: the invariant, the save, the files and the audit entries."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support import trainer_contract as tc

pytestmark = pytest.mark.slow

SCENARIOS = {
    # The loop, scaled down: epoch files + last.pt + best.pt on a 12 MB tmpfs with
    # min_free 3MB (without the service it ends with ~4 MB free), keep_last 2 + the best.
    "torch": tc.Scenario(
        trainer="torch",
        epochs=6,
        size=4096,
        policy={"keep_last": 2, "keep_best": {"metric": "val_loss", "n": 1}},
        fs_mb=12,
        min_free="3MB",
        kill_after=3,
    ),
    # save_total_limit 2 + load_best_model_at_end; the user's policy keeps the last and the best.
    "hf": tc.Scenario(
        trainer="hf",
        epochs=5,
        size=16,
        policy={"keep_last": 1, "keep_best": {"metric": "eval_loss", "n": 1}},
        kill_after=3,
    ),
    # The same Trainer under DeepSpeed ZeRO-2: the optimizer state is the tag folder inside
    # each checkpoint-N/ (no optimizer.pt); resumed by DeepSpeed.
    "hf-deepspeed": tc.Scenario(
        trainer="hf-deepspeed",
        epochs=5,
        size=16,
        policy={"keep_last": 1, "keep_best": {"metric": "eval_loss", "n": 1}},
        kill_after=3,
    ),
    # save_top_k 2 + save_last; the user's policy keeps one moment.
    "lightning": tc.Scenario(
        trainer="lightning", epochs=6, size=64, policy={"keep_last": 1}, kill_after=3
    ),
    # Epoch files + best.keras (save_best_only) + BackupAndRestore, no policy: versions only
    # (after the resume ModelCheckpoint forgets its best: keras#17012).
    "keras": tc.Scenario(trainer="keras", epochs=5, size=32, kill_after=3),
}


@pytest.fixture(scope="module")
def privileged() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a tmpfs in a private mount namespace")


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_trainers_contract_holds_at_every_save(name: str, tmp_path: Path, privileged) -> None:
    scenario = SCENARIOS[name]
    outcome = tc.run(scenario, tmp_path / name)
    assert outcome.error is None, outcome.error
    drove = f"{outcome.trainer_exits} {outcome.timeline}\n" + "\n---\n".join(outcome.trainer_tails)
    assert not outcome.violations, _explain(outcome) + "\n" + drove
    # The harness really drove the trainer: every save checked, the kill and the resume done.
    assert outcome.saves == scenario.epochs, drove
    assert outcome.kills == 1 and outcome.trainer_exits[-1] == 0, drove
    assert outcome.checks == outcome.saves + 1, drove
    if scenario.fs_mb:
        assert outcome.control_exit == 0, "the control run must fit the disk without us"


def _explain(outcome: tc.Outcome) -> str:
    seen: set[tuple[str, str]] = set()
    lines = [f"{len(outcome.violations)} violations {outcome.by_invariant()}:"]
    for v in outcome.violations:
        if (v["invariant"], v["detail"]) not in seen:
            seen.add((v["invariant"], v["detail"]))
            lines.append(f"{v['invariant']} save {v['save']}: {v['detail']}")
    last = outcome.violations[-1].get("files") or {}
    return "\n".join([*lines, "files at the last violation:", json.dumps(last, indent=1)])
