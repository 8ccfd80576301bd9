"""Real torch-family files written by real torch (CPU), safetensors and Lightning, with the truth
of each taken on the writer's side.

Usage (always in a child process: the pytest process never imports torch)::

    python3 tests/support/torch_runs.py --files OUT       # OUT/plain/..., OUT/plain-truth.json
    python3 tests/support/torch_runs.py --lightning RUN   # RUN/ckpts/*.ckpt, RUN/logs/, RUN/tb/

The set also holds `loop/` (a PyTorch user's own loop, tests/support/plain_torch_loop.py:
`loop/plain` with a 0-based `metrics.csv` and TensorBoard tags, `loop/tbonly` with TensorBoard
alone; their truth in `loop-truth/`).

The truth is what the frameworks report: the state dicts and optimizers as the writer holds
them, and each Lightning checkpoint loaded back with `torch.load` in this (trusted) process,
plus the monitored value Lightning logged at each epoch (`trainer.callback_metrics`).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

VERSION = 7
PLAIN_TRUTH = "plain-truth.json"
LIGHTNING_TRUTH = "lightning-truth.json"
GENERATE_TIMEOUT_S = 900
EPOCHS, STEPS_PER_EPOCH = 3, 4


def tensors_truth(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "tensors": {
            k: [str(v.dtype).removeprefix("torch."), list(v.shape)] for k, v in state.items()
        },
        "n_params": sum(v.numel() for v in state.values()),
        "bytes": sum(v.numel() * v.element_size() for v in state.values()),
    }


def optimizer_truth(sd: dict[str, Any], class_name: str) -> dict[str, Any]:
    import torch

    state = [t for per in sd["state"].values() for t in per.values() if torch.is_tensor(t)]
    steps = [float(per["step"]) for per in sd["state"].values() if "step" in per]
    groups = [{k: v for k, v in g.items() if k != "params"} for g in sd["param_groups"]]
    return {
        "class": class_name,
        "param_groups": json.loads(json.dumps(groups, default=str)),
        "state_bytes": sum(t.numel() * t.element_size() for t in state),
        "n_state_tensors": len(state),
        "step": int(steps[0]) if steps else None,
    }


def _model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3), torch.nn.BatchNorm1d(3)
    )


def write_files(out: Path) -> None:
    import torch
    from safetensors.torch import save_file

    run = out / "plain"
    run.mkdir(parents=True, exist_ok=True)
    truth: dict[str, Any] = {}
    model = _model()
    sd = model.state_dict()
    torch.save(sd, run / "sd.pt")
    truth["sd.pt"] = {"format": "torch-zip", "resumable": False, **tensors_truth(sd)}

    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.05)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    x = torch.randn(16, 4)
    for _ in range(5):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        sched.step()
    sd = model.state_dict()
    full = {
        "model": sd,
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "epoch": 7,
        "global_step": 5,
        "loss": float(loss),
        "val_loss": torch.tensor(0.375),
    }
    torch.save(full, run / "full.pt")
    truth["full.pt"] = {
        "format": "torch-zip",
        "resumable": True,
        **tensors_truth(sd),
        "optimizer": optimizer_truth(opt.state_dict(), "AdamW"),
        "scheduler": {
            "type": "StepLR",
            **{k: sched.state_dict()[k] for k in ("step_size", "gamma", "last_epoch")},
        },
        "epoch": 7,
        "step": 5,
        "metrics": {"loss": float(loss), "val_loss": 0.375},
    }
    torch.save({"model": sd, "optimizer": opt.state_dict()}, run / "no_trainer_state.pt")
    truth["no_trainer_state.pt"] = {
        "format": "torch-zip",
        "resumable": False,
        **tensors_truth(sd),
        "optimizer": optimizer_truth(opt.state_dict(), "AdamW"),
    }

    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    model(x).sum().backward()
    sgd.step()
    torch.save(sgd.state_dict(), run / "optimizer.pt")
    truth["optimizer.pt"] = {
        "format": "torch-zip",
        "resumable": False,
        "optimizer": optimizer_truth(sgd.state_dict(), "SGD"),
        "n_params": 0,
        "bytes": 0,
        "tensors": {},
    }

    base = torch.arange(12.0)
    views = {
        "view": base[2:8].view(2, 3),
        "base": base,
        "t": base.view(3, 4).t(),
        "bf": torch.ones(5, dtype=torch.bfloat16),
        "f8": torch.zeros(3, 2, dtype=torch.float8_e4m3fn),
        "u16": torch.zeros(4, dtype=torch.uint16),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
    }
    torch.save(views, run / "views.pt")
    truth["views.pt"] = {"format": "torch-zip", "resumable": False, **tensors_truth(views)}
    # The same views beside an optimizer: what a split must copy in each view's own order (a
    # slice at an offset, a transpose, a broadcast, a permuted slice, bf16 and float8 bytes).
    odd = {
        **views,
        "bf_t": torch.arange(10).to(torch.bfloat16).view(2, 5).t(),
        "f8_t": torch.randn(3, 2).to(torch.float8_e4m3fn).t(),
        "expanded": torch.randn(1, 3).expand(4, 3),
        "permuted": torch.randn(2, 3, 4).permute(2, 0, 1)[1:],
        "empty": torch.zeros(0, 3),
    }
    torch.save({"model": odd, "optimizer": sgd.state_dict()}, run / "views_full.pt")
    truth["views_full.pt"] = {
        "format": "torch-zip",
        "resumable": False,
        **tensors_truth(odd),
        "optimizer": optimizer_truth(sgd.state_dict(), "SGD"),
    }

    torch.save(sd, run / "original.pt")  # its zip prefix stays `original/`
    os.rename(run / "original.pt", run / "renamed.bin")
    truth["renamed.bin"] = {"format": "torch-zip", "resumable": False, **tensors_truth(sd)}

    torch.save(sd, run / "legacy.pth", _use_new_zipfile_serialization=False)
    truth["legacy.pth"] = {"format": "torch-legacy", "resumable": False, **tensors_truth(sd)}

    contiguous = {k: v.contiguous() for k, v in sd.items()}
    save_file(contiguous, run / "model.safetensors", metadata={"format": "pt", "note": "hi"})
    truth["model.safetensors"] = {
        "format": "safetensors",
        "resumable": False,
        "metadata": {"format": "pt", "note": "hi"},
        **tensors_truth(contiguous),
    }
    (out / PLAIN_TRUTH).write_text(json.dumps(truth, indent=1, default=str))


def write_lightning(run: Path) -> None:
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.callbacks import Callback, ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    class Net(pl.LightningModule):
        def __init__(self, lr: float = 0.01, hidden: int = 8) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
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
            opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)]

    logged: dict[int, float] = {}

    class Logged(Callback):
        def on_validation_epoch_end(self, trainer: Any, _module: Any) -> None:
            if not trainer.sanity_checking:
                logged[trainer.current_epoch] = float(trainer.callback_metrics["val_loss"])

    torch.manual_seed(0)
    x = torch.randn(64, 4)
    y = x.sum(dim=1, keepdim=True)
    data = torch.utils.data.TensorDataset(x, y)
    train = torch.utils.data.DataLoader(data, batch_size=64 // STEPS_PER_EPOCH)
    val = torch.utils.data.DataLoader(data, batch_size=32)
    checkpoint = ModelCheckpoint(
        dirpath=run / "ckpts",
        filename="{epoch}-{step}-{val_loss:.3f}",
        monitor="val_loss",
        save_top_k=2,
        save_last=True,
    )
    trainer = pl.Trainer(
        max_epochs=EPOCHS,
        accelerator="cpu",
        devices=1,
        callbacks=[Logged(), checkpoint],
        # Both of Lightning's file loggers: logs/version_0/metrics.csv, tb/version_0/events...
        logger=[CSVLogger(run, name="logs"), TensorBoardLogger(run, name="tb")],
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        num_sanity_val_steps=0,
    )
    trainer.fit(Net(), train, val)
    truth: dict[str, Any] = {"logged_val_loss": logged, "files": {}}
    for path in sorted((run / "ckpts").glob("*.ckpt")):
        ck = torch.load(path, weights_only=False)  # ours, just written: trusted
        state = next(v for k, v in ck["callbacks"].items() if k.startswith("ModelCheckpoint"))
        truth["files"][path.name] = {
            "format": "lightning-ckpt",
            "resumable": True,
            "epoch": ck["epoch"],
            "step": ck["global_step"],
            "lightning_version": ck["pytorch-lightning_version"],
            "monitor": state["monitor"],
            "current_score": float(state["current_score"]),
            "best_model_score": float(state["best_model_score"]),
            "hyper_parameters": dict(ck["hyper_parameters"]),
            "optimizer": optimizer_truth(ck["optimizer_states"][0], "Adam"),
            "scheduler": {"type": "StepLR", "last_epoch": ck["lr_schedulers"][0]["last_epoch"]},
            **tensors_truth(ck["state_dict"]),
        }
    (run / LIGHTNING_TRUTH).write_text(json.dumps(truth, indent=1, default=str))


def generate(kind: str, out: Path) -> Path:
    """Run this script in a child (`--files` or `--lightning`) into `out`; returns `out`."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    cmd = [sys.executable, str(Path(__file__).resolve()), f"--{kind}", str(out)]
    result = subprocess.run(
        cmd, capture_output=True, text=True, timeout=GENERATE_TIMEOUT_S, env=env
    )
    if result.returncode != 0:
        raise RuntimeError(f"torch_runs --{kind} failed:\n{result.stdout}\n{result.stderr}")
    return out


def session_torch_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generated set: `$CKPT_TORCH_FIXTURES` if it holds this VERSION's, else written now,
    once for every xdist worker of the session (about a minute: torch and Lightning start in
    children)."""
    cached = os.environ.get("CKPT_TORCH_FIXTURES")
    for folder in [Path(cached)] if cached else []:
        if (folder / "version").is_file() and (folder / "version").read_text() == str(VERSION):
            return folder
    from tests.support.shared_fixtures import generated_once  # not when run as a script

    return generated_once(tmp_path_factory, "torch", _write_all)


def _write_all(fresh: Path) -> Path:
    cached = os.environ.get("CKPT_TORCH_FIXTURES")
    generate("files", fresh)
    generate("lightning", fresh / "pl")
    loop = Path(__file__).with_name("plain_torch_loop.py")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", TF_CPP_MIN_LOG_LEVEL="3")
    runs = [str(fresh / "loop" / "plain"), f"{fresh / 'loop' / 'tbonly'}:tb"]
    cmd = [sys.executable, str(loop), str(fresh / "loop-truth"), *runs]
    result = subprocess.run(
        cmd, capture_output=True, text=True, timeout=GENERATE_TIMEOUT_S, env=env
    )
    if result.returncode != 0:
        raise RuntimeError(f"plain_torch_loop failed:\n{result.stdout}\n{result.stderr}")
    (fresh / "version").write_text(str(VERSION))
    if cached and not Path(cached).exists():  # fill the cache for the next session
        shutil.copytree(fresh, cached, copy_function=shutil.copy2)
    return fresh


def compare_splits(pairs: list[tuple[Path, Path]]) -> dict[str, Any]:
    """In this (trusted, torch) process: each inference `.safetensors` loaded with
    `safetensors.torch.load_file` against its original's model state dict loaded with
    `torch.load(weights_only=True)`: names, dtypes, shapes and bytes."""
    import torch
    from safetensors.torch import load_file

    def raw(t: Any) -> Any:
        return t.contiguous().reshape(-1).view(torch.uint8)

    out: dict[str, Any] = {}
    for original, artifact in pairs:
        ck = torch.load(original, weights_only=True)
        model = ck.get("state_dict", ck.get("model"))
        split = load_file(artifact)
        out[original.name] = {
            "names_equal": sorted(split) == sorted(model),
            "differs": [
                k
                for k, t in split.items()
                if k not in model
                or t.dtype != model[k].dtype
                or t.shape != model[k].shape
                or not torch.equal(raw(t), raw(model[k]))
            ],
            "n_tensors": len(split),
        }
    return out


def split_check(pairs: list[tuple[Path, Path]]) -> dict[str, Any]:
    """`compare_splits` run in a child (the test process never imports torch)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--compare-splits"]
    cmd += [str(p) for pair in pairs for p in pair]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"torch_runs --compare-splits failed:\n{result.stderr}")
    return dict(json.loads(result.stdout.splitlines()[-1]))


def load_truth(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def close(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7)


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, copy_function=shutil.copy2)
    return dst


if __name__ == "__main__":
    what, target = sys.argv[1], Path(sys.argv[2])
    if what == "--files":
        write_files(target)
    elif what == "--lightning":
        write_lightning(target)
    elif what == "--compare-splits":
        paths = [Path(a) for a in sys.argv[2:]]
        print(json.dumps(compare_splits(list(zip(paths[::2], paths[1::2], strict=True)))))
    else:
        raise SystemExit(f"unknown option {what}")
