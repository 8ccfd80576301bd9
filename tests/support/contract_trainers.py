"""The trainers of the trainer's-contract harness (issue 39, item 4): four real training loops, as
users write them, each reporting every save to the harness and waiting for its word before it
trains on.

Usage (always a child process: the pytest process never imports torch or TensorFlow)::

    python3 tests/support/contract_trainers.py SPEC.json

SPEC names `trainer` (torch | hf | lightning | keras), `run` (the run folder), `record` (a JSONL
file outside the root), `epochs`, `size` (the model's hidden width: a checkpoint's bytes),
`seed`, `lockstep` (a folder: after save N the trainer waits for `ack-N` there, so the harness
checks a disk that stands still) and `resume` (a path `ckpt latest --resumable` answered, or
null).

Each save appends one line to the record, the trainer's own view of it::

    {"save": N, "phase": P, "moment": M, "epoch": E, "step": S, "metric": V,
     "wrote": [units written at this save], "holds": {unit: sha256}, "kept": [units the trainer
     itself keeps (rewrites or rotates around)], "resumable": [units it can resume from],
     "best": the unit the trainer names its best (its own bookkeeping), "last": its last}

A unit is a path relative to the root: a file, or a Hugging Face `checkpoint-N/` folder (its
digest covers each file's name and bytes). The learning rate jumps after `BEST_AT` epochs, so
each trainer's best metric is reached mid-run: keep-last rules and an oldest-first guard must
step over it.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

BEST_AT = 2  # epochs at the good learning rate; then it is far too high
ACK_TIMEOUT_S = 300.0
METRIC = {"torch": "val_loss", "hf": "eval_loss", "lightning": "val_loss", "keras": "val_loss"}
METRIC["hf-deepspeed"] = "eval_loss"


def digest(path: Path) -> str:
    """A file's sha256; a folder's over its files' names and sha256s (a torn or changed file in a
    checkpoint folder changes it)."""
    if path.is_dir():
        h = hashlib.sha256()
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            h.update(f"{f.relative_to(path)}\0{digest(f)}\n".encode())
        return h.hexdigest()
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Reporter:
    """Appends the record and waits for the harness's ack (lockstep)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.root = Path(spec["root"])
        self.record = Path(spec["record"])
        self.lockstep = Path(spec["lockstep"]) if spec.get("lockstep") else None
        self.phase = int(spec.get("phase", 1))
        lines = self.record.read_text().splitlines() if self.record.exists() else []
        self.n = len(lines)

    def rel(self, path: Path | str) -> str:
        return str(Path(path).resolve().relative_to(self.root.resolve()))

    def saved(self, **fields: Any) -> None:
        self.n += 1
        holds = {}
        for unit in fields.pop("holds"):
            p = self.root / unit
            if p.exists():
                holds[unit] = digest(p)
        line = {"save": self.n, "phase": self.phase, "time": time.time(), "holds": holds, **fields}
        with open(self.record, "a") as out:
            out.write(json.dumps(line) + "\n")
            out.flush()
            os.fsync(out.fileno())
        if self.lockstep is None:
            return
        ack = self.lockstep / f"ack-{self.n}"
        deadline = time.monotonic() + ACK_TIMEOUT_S
        while not ack.exists() and time.monotonic() < deadline:
            time.sleep(0.05)


def torch_loop(spec: dict[str, Any], rep: Reporter) -> None:
    """A plain PyTorch loop: `ckpt_epochNNN.pt`, then `last.pt`, then `best.pt` when val_loss
    improved, each a dict with model, optimizer, scheduler, epoch, step, val_loss and best_val;
    `metrics.csv` and TensorBoard events beside them. Resumes from the path it is given."""
    # As on a machine without TensorFlow: TensorBoard's writer then uses its own stub (with
    # TensorFlow installed it imports it: ~10 s of a trainer's start-up).
    sys.modules.setdefault("tensorflow", None)  # type: ignore[arg-type]
    import torch
    from torch.utils.tensorboard import SummaryWriter

    run = Path(spec["run"])
    run.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(spec["seed"])
    h = spec["size"]
    model = torch.nn.Sequential(torch.nn.Linear(16, h), torch.nn.ReLU(), torch.nn.Linear(h, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 1.0 if e < BEST_AT else 30.0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 16, generator=g)
    y = x[:, :1] * 2 + 0.1 * torch.randn(256, 1, generator=g)
    start, step, best_val = 0, 0, float("inf")
    if spec.get("resume"):
        ck = torch.load(spec["resume"], weights_only=False)  # the user's own file: trusted
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        sched.load_state_dict(ck["scheduler"])
        start, step, best_val = ck["epoch"], ck["step"], ck["best_val"]
    tb = SummaryWriter(str(run / "tb"))
    new_csv = not (run / "metrics.csv").exists()
    with open(run / "metrics.csv", "a", newline="") as log:
        writer = csv.writer(log)
        if new_csv:
            writer.writerow(["epoch", "step", "train_loss", "val_loss"])
        for epoch in range(start + 1, spec["epochs"] + 1):
            for i in range(0, 192, 32):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x[i : i + 32]), y[i : i + 32])
                loss.backward()
                opt.step()
                step += 1
            sched.step()
            with torch.no_grad():
                val = float(torch.nn.functional.mse_loss(model(x[192:]), y[192:]))
            writer.writerow([epoch, step, float(loss), val])
            log.flush()
            tb.add_scalar("val_loss", val, epoch)
            tb.flush()
            improved = val < best_val
            best_val = min(best_val, val)
            state = {
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(),
                "epoch": epoch,
                "step": step,
                "val_loss": val,
                "best_val": best_val,
            }
            wrote = [f"ckpt_epoch{epoch:03d}.pt", "last.pt"] + (["best.pt"] if improved else [])
            for name in wrote:
                torch.save(state, run / name)
            names = [f"ckpt_epoch{e:03d}.pt" for e in range(1, epoch + 1)] + ["last.pt", "best.pt"]
            rel = rep.rel(run)
            rep.saved(
                moment=epoch,
                epoch=epoch,
                step=step,
                metric=val,
                wrote=[f"{rel}/{n}" for n in wrote],
                holds=[f"{rel}/{n}" for n in names],
                kept=[f"{rel}/last.pt", f"{rel}/best.pt"],
                resumable=[f"{rel}/{n}" for n in wrote],
                best=f"{rel}/best.pt",
                last=f"{rel}/last.pt",
            )
    tb.close()


def hf_deepspeed(spec: dict[str, Any], rep: Reporter) -> None:
    """The same Trainer under DeepSpeed ZeRO-2 (one CPU rank on gloo, as `deepspeed --num_gpus
    0` or `torchrun` would set it up): each `checkpoint-N/` holds `latest` and `global_stepN/`
    (the optimizer partition) instead of optimizer.pt; resumed by DeepSpeed's load_checkpoint."""
    import socket

    with socket.socket() as free:  # the rendezvous of a one-rank world
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import deepspeed.comm.torch as ds_comm

    ds_comm.build_shm_op = lambda: None  # its JIT-built shm all-reduce: ~80 s, not needed
    auto = "auto"
    config = {
        "train_micro_batch_size_per_gpu": auto,
        "train_batch_size": auto,
        "gradient_accumulation_steps": auto,
        "zero_optimization": {"stage": 2},
        "optimizer": {"type": "AdamW", "params": {"lr": auto, "torch_adam": True}},
    }
    hf_trainer(spec, rep, deepspeed=config)


def hf_trainer(spec: dict[str, Any], rep: Reporter, deepspeed: Any = None) -> None:
    """The Hugging Face Trainer: eval and save every `save_steps`, `save_total_limit 2`,
    `load_best_model_at_end` on eval_loss; resumes with `resume_from_checkpoint`."""
    import torch
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    run = Path(spec["run"])
    run.mkdir(parents=True, exist_ok=True)
    os.chdir(run)
    torch.manual_seed(spec["seed"])
    config = BertConfig(
        vocab_size=64,
        hidden_size=spec["size"],
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=2,
    )
    g = torch.Generator().manual_seed(1)
    xs = torch.randint(1, 64, (32, 8), generator=g)
    ys = (xs[:, 0] > 32).long()
    data = [{"input_ids": xs[i], "labels": ys[i]} for i in range(32)]
    per_epoch = 4  # 32 rows, batch 8
    save_steps = per_epoch

    class Report(TrainerCallback):  # type: ignore[misc]
        def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            out = run / "out"
            step = state.global_step
            metric = next(
                (
                    e["eval_loss"]
                    for e in reversed(state.log_history)
                    if e.get("step") == step and "eval_loss" in e
                ),
                None,
            )
            held = sorted(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
            rel = rep.rel(out)
            best = state.best_model_checkpoint
            best_unit = f"{rel}/{Path(best).name}" if best else None
            newest = f"{rel}/checkpoint-{step}"
            rep.saved(
                moment=step,
                epoch=step // per_epoch,
                step=step,
                metric=metric,
                wrote=[newest],
                holds=[f"{rel}/{p.name}" for p in held],
                kept=[u for u in (best_unit, newest) if u],
                resumable=[newest],
                best=best_unit,
                last=newest,
            )

    class Harder(TrainerCallback):  # type: ignore[misc]
        """The learning rate far too high after BEST_AT epochs (eval_loss rises)."""

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step >= BEST_AT * per_epoch:
                for group in kw["optimizer"].param_groups:
                    group["lr"] = 0.5

    args = TrainingArguments(
        output_dir="out",
        num_train_epochs=spec["epochs"],
        save_steps=save_steps,
        eval_strategy="steps",
        eval_steps=save_steps,
        logging_steps=save_steps,
        save_total_limit=2,
        load_best_model_at_end=True,
        metric_for_best_model="eval_loss",
        per_device_train_batch_size=8,
        learning_rate=0.01,
        lr_scheduler_type="constant",
        use_cpu=True,
        report_to="none",
        dataloader_num_workers=0,
        seed=spec["seed"],
        **({"deepspeed": deepspeed, "ddp_backend": "gloo"} if deepspeed else {}),
    )
    trainer = Trainer(
        model=BertForSequenceClassification(config),
        args=args,
        train_dataset=data,
        eval_dataset=data[:16],
        callbacks=[Harder(), Report()],
    )
    trainer.train(resume_from_checkpoint=spec.get("resume"))


def lightning_loop(spec: dict[str, Any], rep: Reporter) -> None:
    """Lightning: `ModelCheckpoint(save_top_k=2, save_last=True, monitor="val_loss")` and a
    CSVLogger; resumes with `fit(ckpt_path=...)`."""
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger

    run = Path(spec["run"])
    run.mkdir(parents=True, exist_ok=True)
    h = spec["size"]

    class Net(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(16, h), torch.nn.ReLU(), torch.nn.Linear(h, 1)
            )

        def training_step(self, batch: Any, _i: int) -> Any:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch: Any, _i: int) -> None:
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

        def configure_optimizers(self) -> Any:
            # One epoch at a far too high rate: Lightning 2.6 saves (a top-k file, and last.ckpt
            # with it) only when the epoch is among the top k, so the others must recover.
            opt = torch.optim.Adam(self.parameters(), lr=0.01)
            lam = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 5.0 if e == BEST_AT else 1.0)
            return [opt], [lam]

    class Reporting(ModelCheckpoint):
        def on_validation_end(self, trainer: Any, module: Any) -> None:
            super().on_validation_end(trainer, module)
            self.report(trainer)

        def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
            super().on_train_epoch_end(trainer, module)
            self.report(trainer)

        def report(self, trainer: Any) -> None:
            """Once per save, right after Lightning's own (at the end of validation or of the
            epoch, by version and settings): when `last.ckpt` was just written."""
            if trainer.sanity_checking or not self.last_model_path:
                return
            try:
                mtime = os.stat(self.last_model_path).st_mtime_ns
            except FileNotFoundError:  # gone since its save (not by Lightning): no new save
                return
            if reported and reported[-1] == mtime:
                return
            reported.append(mtime)
            held = [*self.best_k_models, self.last_model_path]
            rel = [rep.rel(p) for p in held if p]
            newest = rep.rel(self.last_model_path)
            tag = f"epoch={trainer.current_epoch}-step={trainer.global_step}-"
            wrote = [newest, *(rep.rel(p) for p in self.best_k_models if tag in Path(p).name)]
            rep.saved(
                moment=trainer.global_step,
                epoch=trainer.current_epoch + 1,
                step=trainer.global_step,
                metric=float(trainer.callback_metrics["val_loss"]),
                wrote=wrote,
                holds=rel,
                kept=[u for u in (newest, rep.rel(self.best_model_path)) if u],
                resumable=[newest],
                best=rep.rel(self.best_model_path) if self.best_model_path else None,
                last=newest,
            )

    last = run / "ckpts" / "last.ckpt"  # resumed: its generation before this process
    reported: list[int] = [last.stat().st_mtime_ns] if last.exists() else []
    torch.manual_seed(spec["seed"])
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 16, generator=g)
    y = x[:, :1] * 2 + 0.1 * torch.randn(256, 1, generator=g)
    data = torch.utils.data.TensorDataset(x[:192], y[:192])
    val = torch.utils.data.TensorDataset(x[192:], y[192:])
    checkpoint = Reporting(
        dirpath=run / "ckpts",
        filename="{epoch}-{step}-{val_loss:.3f}",
        monitor="val_loss",
        save_top_k=2,
        save_last=True,
    )
    trainer = pl.Trainer(
        max_epochs=spec["epochs"],
        accelerator="cpu",
        devices=1,
        callbacks=[checkpoint],
        logger=CSVLogger(run, name="logs"),
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        num_sanity_val_steps=0,
    )
    loader = torch.utils.data.DataLoader
    trainer.fit(
        Net(), loader(data, batch_size=32), loader(val, batch_size=64), ckpt_path=spec.get("resume")
    )


def keras_fit(spec: dict[str, Any], rep: Reporter) -> None:
    """Keras 3 `fit()`: `ModelCheckpoint("epoch_{epoch:02d}.keras")`, `best.keras` with
    `save_best_only`, `CSVLogger(append=True)` and `BackupAndRestore` (which resumes it, as users
    do; after a resume ModelCheckpoint has forgotten its best: keras#17012)."""
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras
    import numpy as np

    run = Path(spec["run"])
    run.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 16)).astype("float32")
    y = (x[:, :1] * 2 + rng.normal(size=(256, 1)) * 0.1).astype("float32")
    keras.utils.set_random_seed(spec["seed"])
    h = spec["size"]
    model = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(h, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    rel = rep.rel(run)
    best_ck = keras.callbacks.ModelCheckpoint(
        str(run / "best.keras"), monitor="val_loss", save_best_only=True
    )

    class Report(keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            e = epoch + 1
            val = float((logs or {})["val_loss"])
            wrote = [f"{rel}/epoch_{e:02d}.keras"]
            if best_ck.best == val:
                wrote.append(f"{rel}/best.keras")
            held = [*sorted(p.name for p in run.glob("epoch_*.keras")), "best.keras"]
            rep.saved(
                moment=e,
                epoch=e,
                step=e,
                metric=val,
                wrote=wrote,
                holds=[f"{rel}/{n}" for n in held],
                kept=[f"{rel}/best.keras"],
                resumable=[f"{rel}/epoch_{e:02d}.keras"],
                best=f"{rel}/best.keras",
                last=f"{rel}/epoch_{e:02d}.keras",
            )

    model.fit(
        x[:192],
        y[:192],
        validation_data=(x[192:], y[192:]),
        epochs=spec["epochs"],
        batch_size=32,
        verbose=0,
        callbacks=[
            keras.callbacks.ModelCheckpoint(str(run / "epoch_{epoch:02d}.keras")),
            best_ck,
            keras.callbacks.CSVLogger(str(run / "history.csv"), append=True),
            keras.callbacks.LearningRateScheduler(lambda e, lr: 0.01 if e < BEST_AT else 0.5),
            keras.callbacks.BackupAndRestore(str(run / "backup")),
            Report(),
        ],
    )


TRAINERS = {"torch": torch_loop, "hf": hf_trainer, "lightning": lightning_loop, "keras": keras_fit}
TRAINERS["hf-deepspeed"] = hf_deepspeed


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    TRAINERS[spec["trainer"]](spec, Reporter(spec))
    print("finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
