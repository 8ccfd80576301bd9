"""A plain PyTorch training loop as users write one (issue 39): each epoch saves
`ckpt_epochNNN.pt`, then `last.pt`, then `best.pt` when val_loss improved, each a dict with the
model, the optimizer, `epoch` and `val_loss`, and appends the epoch to `metrics.csv`.

Usage (a child process: the pytest process never imports torch)::

    python3 tests/support/torch_loop.py RUN EPOCHS [--gate DIR]

`--gate DIR`: after each epoch's saves the loop writes `DIR/saved-E` and waits for the test to
create `DIR/go-E` (the test lets the service index and retain first): the next save comes
after a known state, never after a fixed sleep.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

# val_loss per epoch: the best is epoch 1, so `best.pt` is rewritten only at epochs 0 and 1.
VAL_LOSS = [1.0, 0.6, 0.8, 0.7, 0.75, 0.9, 0.85, 0.95]
GATE_TIMEOUT_S = 300


def wait_for(path: Path) -> None:
    deadline = time.monotonic() + GATE_TIMEOUT_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"no {path} after {GATE_TIMEOUT_S} s")
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run", type=Path)
    parser.add_argument("epochs", type=int)
    parser.add_argument("--gate", type=Path)
    args = parser.parse_args()
    import torch

    run: Path = args.run
    run.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    optimizer = torch.optim.Adam(model.parameters())
    best = None
    (run / "metrics.csv").write_text("epoch,val_loss\n")
    for epoch in range(args.epochs):
        loss = model(torch.randn(16, 64)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        val_loss = VAL_LOSS[epoch % len(VAL_LOSS)]
        state = {
            "epoch": epoch,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "val_loss": val_loss,
        }
        with open(run / "metrics.csv", "a") as log:
            log.write(f"{epoch},{val_loss}\n")
        torch.save(state, run / f"ckpt_epoch{epoch:03d}.pt")
        torch.save(state, run / "last.pt")
        if best is None or val_loss < best:
            best = val_loss
            torch.save(state, run / "best.pt")
        if args.gate is not None:
            (args.gate / f"saved-{epoch}").touch()
            wait_for(args.gate / f"go-{epoch}")


if __name__ == "__main__":
    main()
