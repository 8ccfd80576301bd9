"""Issue 41, a PyTorch user's own training loop, as the tutorials write it (real torch, CPU).

Each epoch (0-based, `for epoch in range(EPOCHS)`): train, validate, then
- `torch.save({"epoch": epoch, "model": ..., "optimizer": ..., "scheduler": ...,
  "val_loss": ...}, f"ckpt_epoch{epoch:03d}.pt")` and, when the validation loss improved,
  the same dict to `best.pt` (rewritten in place, as users do);
- a row of `metrics.csv` with the same 0-based `epoch` (written with `csv.writer`);
- `torch.utils.tensorboard.SummaryWriter` scalars `Loss/train`, `Loss/val`, `Accuracy/val` and
  `LearningRate` at step `epoch` (the PyTorch tutorial's tags) into `tb/`.

The learning rate halves every two epochs (StepLR), so a row matched to the wrong epoch shows.

Usage (a child process: the pytest process never imports torch)::

    python3 tests/support/plain_torch_loop.py TRUTH_DIR RUN_DIR[:csv,tb] ...

Each RUN_DIR is one run (one torch start-up for all); after the colon, the logs it writes
(default both). TRUTH_DIR/<run folder name>-truth.json (outside the root) gets, per 0-based
epoch, the values logged and the checkpoint written.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

EPOCHS = 5
LR = 0.02
# Validation losses chosen per epoch (a real model's order is seed-dependent): the best is
# epoch 2, the second best epoch 4, so a metric read one epoch late picks another file.
VAL_LOSS = [0.9, 0.7, 0.3, 0.8, 0.5]


def train(run: Path, logs: set[str], truth_dir: Path) -> None:
    # As on most PyTorch users' machines, without TensorFlow: tensorboard then writes its
    # events with its own stub instead of importing TensorFlow (~10 CPU s here).
    sys.modules.setdefault("tensorflow", None)  # type: ignore[arg-type]
    import torch
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(0)
    run.mkdir(parents=True, exist_ok=True)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    opt = torch.optim.Adam(model.parameters(), lr=LR)  # its state counts the steps
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    x, y = torch.randn(32, 4), torch.randint(0, 3, (32,))
    writer = SummaryWriter(str(run / "tb")) if "tb" in logs else None
    truth: dict[str, Any] = {"epochs": {}}
    best = float("inf")
    csv_file = (run / "metrics.csv").open("w", newline="") if "csv" in logs else None
    rows = csv.writer(csv_file) if csv_file else None
    if rows:
        rows.writerow(["epoch", "train_loss", "val_loss", "val_acc", "lr"])
    for epoch in range(EPOCHS):
        lr = opt.param_groups[0]["lr"]
        for i in range(0, 32, 8):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[i : i + 8]), y[i : i + 8])
            loss.backward()
            opt.step()
        sched.step()
        train_loss = round(float(loss.detach()), 4)
        val_loss = VAL_LOSS[epoch]
        val_acc = round(1.0 - val_loss / 2, 4)
        state = {
            "epoch": epoch,
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(),
            "val_loss": val_loss,
        }
        name = f"ckpt_epoch{epoch:03d}.pt"
        torch.save(state, run / name)
        if val_loss < best:
            best = val_loss
            torch.save(state, run / "best.pt")
        if rows and csv_file:
            rows.writerow([epoch, train_loss, val_loss, val_acc, lr])
            csv_file.flush()
        if writer:
            writer.add_scalar("Loss/train", train_loss, epoch)
            writer.add_scalar("Loss/val", val_loss, epoch)
            writer.add_scalar("Accuracy/val", val_acc, epoch)
            writer.add_scalar("LearningRate", lr, epoch)
            writer.flush()
        truth["epochs"][str(epoch)] = {
            "file": name,
            "train_loss": train_loss,
            "val_loss": val_loss,
            "val_acc": val_acc,
            "lr": lr,
        }
    if csv_file:
        csv_file.close()
    if writer:
        writer.close()
    truth_dir.mkdir(parents=True, exist_ok=True)
    (truth_dir / f"{run.name}-truth.json").write_text(json.dumps(truth, indent=1))


if __name__ == "__main__":
    for arg in sys.argv[2:]:
        folder, _, wanted = arg.partition(":")
        train(Path(folder), set((wanted or "csv,tb").split(",")), Path(sys.argv[1]))
