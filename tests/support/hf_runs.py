"""Real Hugging Face folders written by real transformers (a tiny BERT built from a config, never
downloaded), with the truth of each taken on the writer's side.

Usage (always in a child process: the pytest process never imports torch or transformers)::

    python3 tests/support/hf_runs.py OUT

writes::

    OUT/trainer/out/checkpoint-N/   a real `Trainer` run (max_steps 6, save_steps 2,
                                    save_total_limit 2, metric_for_best_model eval_accuracy)
    OUT/trainer-sharded/out/checkpoint-N/  a second run (max_steps 4) whose model saves in
                                    shards (`save_pretrained(max_shard_size="10KB")`, as a big
                                    model's does) with its tokenizer (`processing_class`)
    OUT/trainer-tb/out/             the same Trainer run with `report_to="tensorboard"` (its
                                    events in `out/runs/`), as most users run it
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


def _tokenizer(folder: Path) -> Any:
    """A real fast tokenizer over the tiny model's 64 ids, from a local vocab (never a
    download)."""
    from transformers import BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"w{i}" for i in range(59))]
    (folder / "vocab.txt").write_text("\n".join(words) + "\n")
    return BertTokenizerFast(vocab_file=str(folder / "vocab.txt"))


def write_sharded_trainer(run: Path) -> dict[str, Any]:
    """A Trainer whose model's own `save_pretrained` shards (the Trainer calls
    `self.model.save_pretrained(output_dir, state_dict=...)`; big models shard by default)."""
    import functools

    from transformers import Trainer, TrainingArguments

    run.mkdir(parents=True, exist_ok=True)
    os.chdir(run)
    model = _tiny_model()
    model.save_pretrained = functools.partial(  # type: ignore[method-assign]
        type(model).save_pretrained, model, max_shard_size="10KB"
    )
    args = TrainingArguments(
        output_dir="out",
        max_steps=4,
        save_steps=SAVE_STEPS,
        logging_steps=1,
        per_device_train_batch_size=16,  # 2 steps an epoch: each save at a whole epoch
        use_cpu=True,
        report_to="none",
        dataloader_num_workers=0,
        seed=0,
    )
    trainer = Trainer(
        model=model, args=args, train_dataset=_dataset(),
        processing_class=_tokenizer(run / "vocab"),
    )  # fmt: skip
    trainer.train()
    folders = {}
    for folder in sorted((run / "out").glob("checkpoint-*")):
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        folders[folder.name] = {
            "files": sorted(p.name for p in folder.iterdir()),
            "shards": sorted(set(index["weight_map"].values())),
        }
    return {"output_dir": "out", "folders": folders}


def write_trainer(run: Path, report_to: str = "none") -> dict[str, Any]:
    """A Trainer run; `report_to="tensorboard"`: as most users run it, with the TensorBoard
    events HF writes by default (`out/runs/<date>_<host>/`: `train/loss`, `eval/runtime`, ...)."""
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
        metric_for_best_model="eval_accuracy",  # flat here: the best stays checkpoint-2
        per_device_train_batch_size=8,
        use_cpu=True,
        report_to=report_to,
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
    truth["trainer-sharded"] = write_sharded_trainer(out / "trainer-sharded")
    # tensorboard writes with its own stub, as without TensorFlow (not ~10 CPU s importing it).
    sys.modules.setdefault("tensorflow", None)  # type: ignore[arg-type]
    truth["trainer-tb"] = write_trainer(out / "trainer-tb", report_to="tensorboard")
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


def live_trainer(run: Path) -> dict[str, Any]:
    """A Trainer run into `run/out` (max_steps 6, save_steps 2, save_total_limit 2) that after
    each save waits (up to 120 s) for the daemon's scheduled split of that checkpoint to finish,
    `out/inference-<step>/` and then its card `out/inference-<step>.md` (written after the
    folder's rename: waiting for the folder alone left the last card unwritten when the run
    listed `out/`), before it trains on: the rotation at the third save then runs with
    inference folders beside its checkpoints, seconds apart by mtime (rotation by mtime)."""
    import time

    from transformers import Trainer, TrainerCallback, TrainingArguments

    class WaitForTheSplit(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.waited: dict[int, float] = {}

        def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            # The card is the split's last file (written once the folder is renamed in place).
            target = Path(args.output_dir) / f"inference-{state.global_step}.md"
            start = time.monotonic()
            while not target.exists() and time.monotonic() - start < 120:
                time.sleep(0.2)
            self.waited[state.global_step] = time.monotonic() - start if target.exists() else -1

    run.mkdir(parents=True, exist_ok=True)
    os.chdir(run)
    args = TrainingArguments(
        output_dir="out",
        max_steps=MAX_STEPS,
        save_steps=SAVE_STEPS,
        save_total_limit=SAVE_TOTAL_LIMIT,
        logging_steps=1,
        per_device_train_batch_size=8,
        use_cpu=True,
        report_to="none",
        dataloader_num_workers=0,
        seed=0,
    )
    waiting = WaitForTheSplit()
    trainer = Trainer(
        model=_tiny_model(), args=args, train_dataset=_dataset(), callbacks=[waiting]
    )  # fmt: skip
    trainer.train()
    return {"waited": waiting.waited, "left": sorted(p.name for p in (run / "out").iterdir())}


def compare_inference(pairs: list[tuple[Path, Path]]) -> dict[str, Any]:
    """Each (checkpoint folder, inference folder) pair through transformers itself: both built
    with `from_pretrained` of the class config.json names, asked the same question (their
    logits compared exactly), the tokenizer (if any) loaded from the inference folder, and what
    the Trainer's own rotation would list in the checkpoint's output_dir."""
    import torch
    import transformers
    from transformers.trainer_utils import get_last_checkpoint, sort_checkpoints

    ids = torch.tensor([[2, 5, 9, 33, 17, 7, 40, 3]])
    found: dict[str, Any] = {}
    for checkpoint, inference in pairs:
        arch = json.loads((inference / "config.json").read_text())["architectures"][0]
        cls = getattr(transformers, arch)
        logits = []
        for folder in (checkpoint, inference):
            model = cls.from_pretrained(folder, local_files_only=True).eval()
            with torch.no_grad():
                logits.append(model(input_ids=ids).logits)
        tokenizer = None
        if (inference / "tokenizer.json").exists():
            tok = transformers.AutoTokenizer.from_pretrained(inference, local_files_only=True)
            tokenizer = tok("w1 w2 w3")["input_ids"]
        found[str(inference)] = {
            "class": arch,
            "identical": bool(torch.equal(logits[0], logits[1])),
            "logits": logits[1].tolist(),
            "tokenized": tokenizer,
            "rotation_sees": sorted(Path(p).name for p in sort_checkpoints(str(checkpoint.parent))),
            "last_checkpoint": Path(get_last_checkpoint(str(checkpoint.parent))).name,
        }
    return found


def inference_check(pairs: list[tuple[Path, Path]]) -> dict[str, Any]:
    """`compare_inference` run in a child (the test process never imports torch)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", HF_HUB_OFFLINE="1")
    env |= {"TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--compare-inference"]
    cmd += [str(p) for pair in pairs for p in pair]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"hf_runs --compare-inference failed:\n{result.stderr[-4000:]}")
    return dict(json.loads(result.stdout.splitlines()[-1]))


def load_truth(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / HF_TRUTH).read_text()))


if __name__ == "__main__":
    if sys.argv[1] == "--live-trainer":
        print(json.dumps(live_trainer(Path(sys.argv[2]))))
    elif sys.argv[1] == "--compare-inference":
        paths = [Path(a) for a in sys.argv[2:]]
        print(json.dumps(compare_inference(list(zip(paths[::2], paths[1::2], strict=True)))))
    else:
        write_all(Path(sys.argv[1]))
