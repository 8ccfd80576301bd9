"""Real Hugging Face folders written by real transformers (a tiny BERT built from a config, never
downloaded), with the truth of each taken on the writer's side.

Usage (always in a child process: the pytest process never imports torch or transformers)::

    python3 tests/support/hf_runs.py OUT

writes::

    OUT/trainer/out/checkpoint-N/   a real `Trainer` run (max_steps 6, save_steps 2,
                                    save_total_limit 2, metric_for_best_model eval_loss)
    OUT/pretrained/tiny/            `save_pretrained`, one model.safetensors
    OUT/sharded/tiny/               `save_pretrained(max_shard_size="10KB")`: shards + index
    OUT/sharded-bin/tiny/           `pytorch_model-0000k-of-0000n.bin` shards + index, config.json
                                    (`huggingface_hub.save_torch_state_dict`, not safetensors)
    OUT/hf-truth.json

The set is generated once per content of this file (`session_hf_runs`: a cache folder keyed by its
hash), so a test session pays for transformers' start-up once, and only when this script changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HF_TRUTH = "hf-truth.json"
GENERATE_TIMEOUT_S = 900
MAX_STEPS, SAVE_STEPS, SAVE_TOTAL_LIMIT = 6, 2, 2
CACHE_ENV = "CKPT_HF_FIXTURES"  # a folder holding one generated set per content hash


def _tensors(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "n_params": sum(v.numel() for v in state.values()),
        "bytes": sum(v.numel() * v.element_size() for v in state.values()),
        "n_tensors": len(state),
    }


def _tiny_model() -> Any:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=2,
    )
    return BertForSequenceClassification(config)


def _dataset() -> Any:
    import torch

    class Pairs(torch.utils.data.Dataset[dict[str, Any]]):
        def __init__(self) -> None:
            g = torch.Generator().manual_seed(1)
            self.x = torch.randint(1, 64, (32, 8), generator=g)
            self.y = (self.x[:, 0] > 32).long()

        def __len__(self) -> int:
            return len(self.x)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"input_ids": self.x[i], "labels": self.y[i]}

    return Pairs()


def write_trainer(run: Path) -> dict[str, Any]:
    import numpy as np
    from safetensors.torch import load_file
    from transformers import Trainer, TrainingArguments

    def accuracy(pred: Any) -> dict[str, float]:
        return {"accuracy": float((np.argmax(pred.predictions, -1) == pred.label_ids).mean())}

    run.mkdir(parents=True, exist_ok=True)
    os.chdir(run)  # output_dir as users give it: relative (best_model_checkpoint is too)
    out = run / "out"
    args = TrainingArguments(
        output_dir="out",
        max_steps=MAX_STEPS,
        save_steps=SAVE_STEPS,
        eval_strategy="steps",
        eval_steps=SAVE_STEPS,
        logging_steps=1,
        save_total_limit=SAVE_TOTAL_LIMIT,
        metric_for_best_model="eval_loss",
        per_device_train_batch_size=8,
        use_cpu=True,
        report_to="none",
        dataloader_num_workers=0,
        seed=0,
    )
    data = _dataset()
    trainer = Trainer(
        model=_tiny_model(), args=args, train_dataset=data, eval_dataset=data,
        compute_metrics=accuracy,
    )  # fmt: skip
    trainer.train()
    folders: dict[str, Any] = {}
    for folder in sorted(out.glob("checkpoint-*")):
        state = json.loads((folder / "trainer_state.json").read_text())
        step = state["global_step"]
        at_step = {}
        for entry in state["log_history"]:
            if entry.get("step") == step:
                at_step.update({k: v for k, v in entry.items() if k in _METRIC_KEYS})
        folders[folder.name] = {
            "global_step": step,
            "epoch": state["epoch"],
            "metrics": at_step,
            "best_metric": state["best_metric"],
            "best_model_checkpoint": state["best_model_checkpoint"],
            "files": sorted(p.name for p in folder.iterdir()),
            "resumable": True,
            **_tensors(load_file(folder / "model.safetensors")),
        }
    saved = [f"checkpoint-{s}" for s in range(SAVE_STEPS, MAX_STEPS + 1, SAVE_STEPS)]
    return {
        "output_dir": "out",
        "folders": folders,
        "rotated": [name for name in saved if name not in folders],
    }


_METRIC_KEYS = ("eval_loss", "eval_accuracy", "loss", "learning_rate")


def write_pretrained(out: Path) -> dict[str, Any]:
    import torch
    from huggingface_hub import save_torch_state_dict

    model = _tiny_model()
    sd = model.state_dict()
    truth: dict[str, Any] = {"config": {"architectures": ["BertForSequenceClassification"]}}
    model.save_pretrained(out / "pretrained" / "tiny")
    model.save_pretrained(out / "sharded" / "tiny", max_shard_size="10KB")
    bin_dir = out / "sharded-bin" / "tiny"
    bin_dir.mkdir(parents=True)
    contiguous = {k: v.contiguous().clone() for k, v in sd.items()}
    save_torch_state_dict(contiguous, bin_dir, safe_serialization=False, max_shard_size="10KB")
    shutil.copy2(out / "pretrained" / "tiny" / "config.json", bin_dir / "config.json")
    for name in ("pretrained", "sharded", "sharded-bin"):
        folder = out / name / "tiny"
        index = next(folder.glob("*.index.json"), None)
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index else []
        truth[name] = {
            "files": sorted(p.name for p in folder.iterdir()),
            "shards": shards,
            "model_type": json.loads((folder / "config.json").read_text())["model_type"],
            **_tensors(sd),
        }
    with torch.no_grad():
        truth["probe_input"] = [[1, 5, 9, 33, 2, 7, 40, 3]]
        truth["probe_logits"] = model.eval()(torch.tensor(truth["probe_input"])).logits.tolist()
    return truth


def write_all(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    truth = {"trainer": write_trainer(out / "trainer"), **write_pretrained(out)}
    (out / HF_TRUTH).write_text(json.dumps(truth, indent=1, default=str))


def content_key() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def generate(out: Path) -> Path:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", HF_HUB_OFFLINE="1")
    env |= {"TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, str(Path(__file__).resolve()), str(out)]
    result = subprocess.run(
        cmd, capture_output=True, text=True, timeout=GENERATE_TIMEOUT_S, env=env, cwd=out.parent
    )
    if result.returncode != 0:
        raise RuntimeError(f"hf_runs failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return out


def session_hf_runs() -> Path:
    """The generated set for this content of the script: from the cache if there, else written
    into a temp folder beside it and renamed into place (a concurrent session's set wins)."""
    cache = Path(os.environ.get(CACHE_ENV) or Path(tempfile.gettempdir()) / "ckpt-hf-fixtures")
    final = cache / content_key()
    if (final / HF_TRUTH).is_file():
        return final
    cache.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix="gen-", dir=cache))
    generate(fresh / "set")
    try:
        os.rename(fresh / "set", final)
    except OSError:  # another session renamed its set first: use that one
        shutil.rmtree(fresh / "set", ignore_errors=True)
    shutil.rmtree(fresh, ignore_errors=True)
    return final


def load_truth(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / HF_TRUTH).read_text()))


if __name__ == "__main__":
    write_all(Path(sys.argv[1]))
