"""Issue 39, items 1 and 2: versions that cost only what they save, and retention that counts
training moments and never takes what a trainer resumes from, on real trainers' files.

- A plain PyTorch loop (`ckpt_epochNNN.pt` + `last.pt` + `best.pt`, val_loss in the dict and a
  CSV) under a live `ckpt serve` with `keep_last: 2, keep_best: {metric: val_loss, n: 1}` and
  retention every second: after every epoch the folder holds the two newest epochs, `last.pt`
  and `best.pt`, and our copies cost nothing (each generation of last.pt/best.pt is an epoch
  file's content).
- A Hugging Face Trainer run with a final `save_model()` beside its `checkpoint-N` folders:
  `keep_last: 1` + keep_best keeps its last resumable `checkpoint-N`, and `latest --resumable`
  answers it.
- Kept copies (`.ckpt-versions`) are no training moment: `ckpt best`, `latest` and `runs`
  never answer or count one unless asked (`--versions`), and `prune --dry-run` never ranks one
  newest nor last.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.daemon import Daemon, service_workspace
from tests.support.workspace import ZIP_FILES, ZIP_RUN, Workspace, rewritten_best, zip_run

TORCH_LOOP = Path(__file__).resolve().parents[1] / "support" / "torch_loop.py"
EPOCHS = 4  # val_loss best at epoch 1: best.pt stays epoch 1's while epochs 2-3 come


def folder(run: Path) -> set[str]:
    return {p.name for p in run.iterdir()}


def copies_bytes(ws: Workspace) -> int:
    kept = ws.root / ".ckpt-versions"
    return sum(p.stat().st_size for p in kept.rglob("*") if p.is_file()) if kept.exists() else 0


def test_service_retention_keeps_the_two_newest_epochs_last_and_best(tmp_path: Path) -> None:
    ws = service_workspace(
        tmp_path, "retention:\n  keep_last: 2\n  keep_best: {metric: val_loss, n: 1}\n"
    )
    ws.config.write_text(
        ws.config.read_text().replace("  rescan: 0\n", "  rescan: 0\n  retention: 1s\n")
    )
    run, gate = ws.root / "loop", tmp_path / "gate"
    gate.mkdir()
    daemon = Daemon(ws)
    daemon.wait_for_log("event=ready", timeout=120)
    trainer = subprocess.Popen(
        [sys.executable, str(TORCH_LOOP), str(run), str(EPOCHS), "--gate", str(gate)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    with trainer:
        for epoch in range(EPOCHS):
            daemon.wait_until(
                lambda e=epoch: (gate / f"saved-{e}").exists() or trainer.poll() is not None,
                300,
                f"epoch {epoch} saved",
            )
            assert trainer.poll() is None, trainer.stdout.read() if trainer.stdout else ""

            def indexed(e: int = epoch) -> bool:
                rows = {Path(r["path"]).name: r for r in ws.json("list", "--run", "loop")}
                return (
                    rows.get(f"ckpt_epoch{e:03d}.pt", {}).get("status") == "ok"
                    and rows.get("last.pt", {}).get("epoch") == e
                )

            daemon.wait_until(indexed, 120, f"epoch {epoch} indexed")
            passes = daemon.log.count("event=retention ")
            # Two passes: the second surely began after the epoch was indexed.
            daemon.wait_until(
                lambda n=passes: daemon.log.count("event=retention ") >= n + 2, 60, "retention"
            )
            newest = {f"ckpt_epoch{e:03d}.pt" for e in range(max(0, epoch - 1), epoch + 1)}
            assert newest | {"last.pt", "best.pt"} <= folder(run), (epoch, folder(run))
            (gate / f"go-{epoch}").touch()
        assert trainer.wait(timeout=120) == 0
    daemon.stop()
    why = ws.run("prune", "--dry-run").stdout + ws.run("log").stdout + ws.run("list").stdout
    # The best epoch's own file stays beside best.pt: best.pt is a file its trainer rewrites,
    # and a resumed trainer may rewrite it with a worse model (keras#17012).
    assert folder(run) == {
        "ckpt_epoch001.pt",
        "ckpt_epoch002.pt",
        "ckpt_epoch003.pt",
        "last.pt",
        "best.pt",
        "metrics.csv",
    }, why
    # Each generation of last.pt and best.pt is an epoch file's content: nothing is copied,
    # and "our copies stay under two checkpoints' size" holds with room to spare.
    assert copies_bytes(ws) < 2 * (run / "last.pt").stat().st_size
    # `best` answers the stable file of the best moment (issue 41 item 6), not a copy of ours.
    assert Path(ws.run("best", "--metric", "val_loss", "--run", "loop").stdout.strip()) == (
        run / "ckpt_epoch001.pt"
    )


def test_hf_keeps_its_last_resumable_checkpoint_beside_a_final_save(
    tmp_path: Path, hf_runs: Path
) -> None:
    """The final `trainer.save_model()` (out/model.safetensors, no epoch nor step) was ranked
    newest and "last #1", so `keep_last: 1` trashed checkpoint-6 and `latest --resumable` fell
    back to checkpoint-4. Train loss is the kept metric so that checkpoint-4 is the best."""
    ws = Workspace(tmp_path)
    ws.config.write_text(
        ws.config.read_text() + "retention:\n  keep_last: 1\n  keep_best: {metric: loss, n: 1}\n"
    )
    out = ws.root / "hf" / "out"
    shutil.copytree(hf_runs / "trainer" / "out", out)
    for name in ("model.safetensors", "config.json"):  # trainer.save_model(), after training
        shutil.copy(out / "checkpoint-6" / name, out / name)
    ws.run("scan")
    plan = ws.json("prune", "--dry-run")
    reasons = {Path(d["path"]).name: d["reasons"] for r in plan["runs"] for d in r["decisions"]}
    assert "last #1" in reasons["checkpoint-6"], reasons
    ws.run("prune")
    assert (out / "checkpoint-6").is_dir()
    latest = ws.run("latest", "--run", "hf/out", "--resumable").stdout.strip()
    assert Path(latest) == out / "checkpoint-6"


def test_kept_copies_are_never_answers_nor_training_moments(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    """`best.keras` rewritten in place (keras#17012) beside numbered epoch files: its earlier
    generations are kept as copies, the best of them (val_loss 0.4) in `.ckpt-versions`."""
    ws = zip_run(Workspace(tmp_path), keras_checkpoints)
    best = rewritten_best(ws, keras_checkpoints)
    copies = [r for r in ws.json("list", "--versions") if r["version_of"]]
    assert copies, "the rewritten best.keras has kept generations"
    # `best` answers the trainers' own checkpoints; a copy only with --versions.
    plain = ws.run("best", "--metric", "val_loss", "--run", "job")
    assert plain.stdout.strip() == str(best), plain.stdout
    assert "a kept copy is better: " in plain.stderr  # said, never answered
    answer = ws.run("best", "--metric", "val_loss").stdout.strip()
    assert ".ckpt-versions" not in answer, answer
    with_copies = ws.run("best", "--metric", "val_loss", "--versions").stdout.strip()
    assert ".ckpt-versions" in with_copies
    # `runs` counts the trainer's files (3 epoch files + best.keras), not our copies.
    counted = {r["name"]: r["checkpoints"] for r in ws.json("runs")}
    assert counted["job"] == 1 and counted[ZIP_RUN] == len(ZIP_FILES), counted
    assert ".ckpt-versions" not in ws.run("latest", "--run", "job").stdout
    # Prune ranks training moments only: no copy is newest nor last #N.
    plan = ws.json("prune", "--keep-last", "1", "--dry-run")
    for r in plan["runs"]:
        for d in r["decisions"]:
            if ".ckpt-versions" in d["path"]:
                assert not any(x.startswith(("newest", "last #")) for x in d["reasons"]), d
    job = next(r for r in plan["runs"] if r["run"] == "job")
    newest = [d for d in job["decisions"] if "newest" in d["reasons"]]
    assert [Path(d["path"]) for d in newest] == [best]
