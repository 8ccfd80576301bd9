"""Real programs for the pipeline's tests and bench: a plain PyTorch training loop and an
evaluation stage that loads each checkpoint with torch in its own process (`weights_only`) and
computes a held-out loss, as a user's `eval.py` would; and stages that misbehave (hang, flood,
fail). Each is a script file written into the test's folder and run with this interpreter."""

from __future__ import annotations

import sys
from pathlib import Path

TRAIN = r"""
import csv, sys, time, torch
run, epochs, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
torch.manual_seed(0)
x = torch.randn(256, 8); y = x[:, :1] * 3 + 0.1 * torch.randn(256, 1)
model = torch.nn.Linear(8, 1); opt = torch.optim.Adam(model.parameters(), lr=0.05)
best = float("inf")
for epoch in range(epochs):
    for _ in range(20):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x[:192]), y[:192]).backward()
        opt.step()
    val = float(torch.nn.functional.mse_loss(model(x[192:]), y[192:]))
    state = {"epoch": epoch, "model": model.state_dict(), "optimizer": opt.state_dict()}
    state["val_loss"] = val
    torch.save(state, f"{run}/ckpt_epoch{epoch:03d}.pt")
    torch.save(state, f"{run}/last.pt")
    if val < best:
        best = val; torch.save(state, f"{run}/best.pt")
    time.sleep(pause)
"""

# The held-out loss of the checkpoint it is given, on data of its own (seed 1): loaded with
# torch, never trusting the file (weights_only), printed as the stage's result line.
EVAL = r"""
import json, sys, torch
doc = json.load(sys.stdin)
state = torch.load(sys.argv[1], weights_only=True)
torch.manual_seed(1)
x = torch.randn(128, 8); y = x[:, :1] * 3
model = torch.nn.Linear(8, 1); model.load_state_dict(state["model"])
with torch.no_grad():
    loss = float(torch.nn.functional.mse_loss(model(x), y))
log = sys.argv[2] if len(sys.argv) > 2 else None
if log:
    with open(log, "a") as f:
        f.write(f"{doc['id']} {doc['path']} {loss!r}\n")
print("evaluated", doc["path"], file=sys.stderr)
print(json.dumps({"metrics": {"heldout_loss": loss}, "note": f"epoch {state['epoch']}"}))
"""

HANG = "import time; time.sleep(3600)"
FLOOD = (
    "import json, sys\n"
    "chunk = 'x' * 65535 + '\\n'\n"
    "for _ in range(800): sys.stdout.write(chunk)\n"  # ~50 MB
    "print(json.dumps({'metrics': {'lines': 800}}))\n"
)
FAIL = "import sys; print('no GPU here', file=sys.stderr); sys.exit(3)"


def write(folder: Path) -> dict[str, Path]:
    """The scripts, as files in `folder`: {name: path}."""
    folder.mkdir(parents=True, exist_ok=True)
    scripts = {"train": TRAIN, "eval": EVAL, "hang": HANG, "flood": FLOOD, "fail": FAIL}
    paths = {}
    for name, text in scripts.items():
        paths[name] = folder / f"{name}.py"
        paths[name].write_text(text)
    return paths


def argv(script: Path, *args: str) -> list[str]:
    return [sys.executable, str(script), *args]
