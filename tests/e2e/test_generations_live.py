"""Issue 10, rewritten fixed names, live: `ckpt serve` watches while Keras rewrites `best.keras`
(save_best_only) and `last.keras` every epoch. Each generation the service saw must carry the
epoch (and optimizer iterations) of the moment it was written: the truth is what the training
callbacks saw, matched to the service's generations by content (BLAKE3 of the bytes), never by
order or by time. A pause after each epoch lets every generation settle before the next one;
the deadlines are generous, so a busy machine makes the test slower, not red."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support import Daemon, Workspace, forked_python
from tests.support.training_runs import child_env, live_command

pytestmark = pytest.mark.slow
EPOCHS = 6
PAUSE_S = 1.5
TRAIN_TIMEOUT_S = 600
INDEX_DEADLINE_S = 180
GENERATION_FIELDS = {"generation", "hash", "epoch", "step", "iterations", "indexed_at"}


def minimal_service_workspace(base: Path) -> Workspace:
    """A root and nothing about naming or metrics; quick completion, no scheduled rescans."""
    ws = Workspace(base, settle_seconds=1)
    ws.config.write_text(
        f"state_dir: {base / 'state'}\nroots:\n  - path: {ws.root}\n"
        "completion:\n  settle_seconds: 1\n  min_age_seconds: 0.2\n"
        "service:\n  heartbeat: 1s\nschedule:\n  rescan: 0\n"
    )
    return ws


def shown(ws: Workspace, path: Path) -> dict[str, Any] | None:
    result = ws.run("show", str(path), "--json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def test_each_live_generation_of_best_and_last_gets_the_epoch_it_was_written_at(
    tmp_path: Path,
) -> None:
    ws = minimal_service_workspace(tmp_path)
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready")
    run_dir, truth_path = ws.root / "live", tmp_path / "live-truth.json"  # truth outside root
    train = forked_python.popen(  # from the TensorFlow zygote: no import of its own
        live_command(run_dir, truth_path, PAUSE_S, EPOCHS),
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output = train.communicate(timeout=TRAIN_TIMEOUT_S)[0]
    finally:
        if train.poll() is None:
            train.kill()
            train.wait()
    assert train.returncode == 0, output
    truth: dict[str, list[dict[str, Any]]] = json.loads(truth_path.read_text())
    assert len(truth["last.keras"]) == EPOCHS
    assert 2 <= len(truth["best.keras"]) < EPOCHS  # really rewritten, not every epoch

    for name in ("best.keras", "last.keras"):
        path, written = run_dir / name, truth[name]
        final = written[-1]

        def caught_up(path: Path = path, final: dict[str, Any] = final) -> bool:
            doc = shown(ws, path)
            return doc is not None and doc["hash"] == final["blake3"] and doc["status"] == "ok"

        daemon.wait_until(caught_up, INDEX_DEADLINE_S, f"{name}: its last generation indexed")
        doc = shown(ws, path)
        assert doc is not None
        assert doc["epoch"] == final["epoch"], (name, doc["epoch"], final["epoch"])
        for metric, value in final["logs"].items():
            assert doc["metrics"].get(metric) == pytest.approx(value, rel=1e-6), (name, metric)

        generations = doc.get("generations")
        assert isinstance(generations, list), f"{name}: `generations` is {generations!r}"
        by_hash = {g["blake3"]: g for g in written}
        problems = []
        for seen in generations:
            missing = GENERATION_FIELDS - set(seen)
            if missing:
                problems.append(f"generation {seen.get('generation')}: no {sorted(missing)}")
                continue
            wrote = by_hash.get(seen["hash"])
            if wrote is None:
                problems.append(f"generation {seen['generation']}: hash of no written version")
            elif (seen["epoch"], seen["iterations"]) != (wrote["epoch"], wrote["iterations"]):
                problems.append(
                    f"generation {seen['generation']}: epoch {seen['epoch']} iterations "
                    f"{seen['iterations']}, written at epoch {wrote['epoch']} iterations "
                    f"{wrote['iterations']}"
                )
        assert not problems, f"{name}:\n" + "\n".join(problems)
        numbers = [g["generation"] for g in generations]
        epochs = [g["epoch"] for g in generations]
        assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers), numbers
        assert epochs == sorted(epochs) and len(set(epochs)) == len(epochs), epochs  # oldest first
        assert generations[-1]["hash"] == final["blake3"]
        # With a pause after every epoch the service has time for each version; on a very
        # busy machine it may miss one, never more than half of them.
        assert len(generations) * 2 >= len(written), (name, len(generations), len(written))
    assert daemon.stop() == 0, daemon.log
