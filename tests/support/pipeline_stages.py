"""Real programs for the pipeline's tests and bench: a plain PyTorch training loop, a Hugging
Face Trainer run (a tiny BERT built from a config, never downloaded), each able to plant a NaN
in its weights for one save (`nan_epoch`, `nan_step`), and an evaluation stage that loads each
checkpoint in its own process (torch `weights_only` for a `.pt`, transformers'
`from_pretrained` for an HF folder) and computes a held-out loss, as a user's `eval.py` would;
and stages that misbehave (hang, flood, fail). Each is a script file written into the test's
folder and run with this interpreter."""

from __future__ import annotations

import sys
from pathlib import Path

TRAIN = r"""
import csv, sys, time, torch
run, epochs, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
nan_epoch = int(sys.argv[4]) if len(sys.argv) > 4 else -1  # that epoch's saves hold a NaN
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
    if epoch == nan_epoch:  # a diverged step: one weight NaN in this epoch's saves
        with torch.no_grad():
            model.weight[0, 3] = float("nan")
    state = {"epoch": epoch, "model": model.state_dict(), "optimizer": opt.state_dict()}
    state["val_loss"] = val
    torch.save(state, f"{run}/ckpt_epoch{epoch:03d}.pt")
    torch.save(state, f"{run}/last.pt")
    if val < best:
        best = val; torch.save(state, f"{run}/best.pt")
    time.sleep(pause)
"""

# The held-out loss of the checkpoint it is given, on data of its own (seed 1 for the plain
# loop's, seed 2 for the Trainer's): loaded never trusting the file (torch's weights_only,
# transformers' safetensors), printed as the stage's result line.
EVAL = r"""
import json, os, sys, torch
doc = json.load(sys.stdin)
if os.environ.get("CKPT_FORMAT") == "hf-folder":
    from transformers import BertForSequenceClassification
    model = BertForSequenceClassification.from_pretrained(sys.argv[1], local_files_only=True)
    g = torch.Generator().manual_seed(2)
    x = torch.randint(1, 64, (32, 8), generator=g); y = (x[:, 0] > 32).long()
    with torch.no_grad():
        loss = float(model(input_ids=x, labels=y).loss)
    note = f"step {doc['step']}"
else:
    state = torch.load(sys.argv[1], weights_only=True)
    torch.manual_seed(1)
    x = torch.randn(128, 8); y = x[:, :1] * 3
    model = torch.nn.Linear(8, 1); model.load_state_dict(state["model"])
    with torch.no_grad():
        loss = float(torch.nn.functional.mse_loss(model(x), y))
    note = f"epoch {state['epoch']}"
log = sys.argv[2] if len(sys.argv) > 2 else None
if log:
    with open(log, "a") as f:
        f.write(f"{doc['id']} {doc['path']} {loss!r}\n")
print("evaluated", doc["path"], file=sys.stderr)
print(json.dumps({"metrics": {"heldout_loss": loss}, "note": note}))
"""

# A Trainer run into RUN/out: max_steps 4, a save every 2 steps, all kept; at step NAN_STEP a
# callback writes NaN into rows of the position embeddings the 8-token inputs never reach (the
# held-out loss stays finite: only a scan of the weights sees it), for that save alone.
HF_TRAIN = r"""
import os, sys, torch
from transformers import (BertConfig, BertForSequenceClassification, Trainer,
                          TrainerCallback, TrainingArguments)
run, nan_step = sys.argv[1], int(sys.argv[2])
os.makedirs(run, exist_ok=True); os.chdir(run)
torch.manual_seed(0)
config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=16, num_labels=2)
model = BertForSequenceClassification(config)

class Pairs(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randint(1, 64, (32, 8), generator=g); self.y = (self.x[:, 0] > 32).long()
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.y[i]}

class PlantNaN(TrainerCallback):
    def __init__(self):
        self.kept = None
    def on_step_end(self, args, state, control, model=None, **_):
        rows = model.bert.embeddings.position_embeddings.weight
        with torch.no_grad():
            if state.global_step == nan_step:
                self.kept = rows[12:].clone(); rows[12:] = float("nan")
            elif self.kept is not None:
                rows[12:] = self.kept; self.kept = None

args = TrainingArguments(output_dir="out", max_steps=4, save_steps=2, logging_steps=2,
                         per_device_train_batch_size=8, learning_rate=5e-3, use_cpu=True,
                         report_to="none", dataloader_num_workers=0, seed=0)
Trainer(model=model, args=args, train_dataset=Pairs(), callbacks=[PlantNaN()]).train()
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
    scripts["hf_train"] = HF_TRAIN
    paths = {}
    for name, text in scripts.items():
        paths[name] = folder / f"{name}.py"
        paths[name].write_text(text)
    return paths


def argv(script: Path, *args: str) -> list[str]:
    return [sys.executable, str(script), *args]
