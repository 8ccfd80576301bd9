"""Indexing a torch checkpoint must not cost more for a bigger one, and never imports torch.

Two pairs, each written by a real torch child and cached in bench/out/:
- two `torch.save` files with AdamW state and a scheduler, same topology, ~1 MB and ~1 GB;
- two Hugging Face Trainer `checkpoint-1/` folders (a real `Trainer`, one AdamW step, a BERT
  built from a config, never downloaded) of a ~1 MB and a ~500 MB model (`model.safetensors`,
  `optimizer.pt` at twice that, `scheduler.pt`, `rng_state.pth`, `trainer_state.json`, ...).
Each measurement runs `ckpt_daemon.formats.detect.read_checkpoint` once in a fresh interpreter:
wall time of the call, peak RSS above the RSS right after the import, the bytes read
(/proc/self/io rchar), and whether torch (or safetensors, transformers, Lightning) got
imported (`sys.modules`, asserted in every child).

    python3 bench/torch_index_cost.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path
from typing import Any

from _common import CHILD_ENV, OUT, PYTHON, Check, child_json, median, report, table

# Linear(w, w) x 4 with AdamW (exp_avg, exp_avg_sq): 3 x the weights.
SMALL = 144  # 4 x 144^2 x 4 B x 3 ~= 1.0 MB
BIG = 4730  # 4 x 4730^2 x 4 B x 3 ~= 1.07 GB
QUICK_BIG = 1500  # ~108 MB

MAKE = r"""
import os, sys, torch
w = int(sys.argv[2])
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(w, w, bias=False) for _ in range(4)])
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.StepLR(opt, 10)
model(torch.randn(2, w)).sum().backward()
opt.step(); sched.step()
tmp = sys.argv[1] + ".part"
torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(), "epoch": 1, "global_step": 1}, tmp)
os.replace(tmp, sys.argv[1])
"""

# Two BERTs of the same topology (2 layers: the same tensors), ~0.23M parameters (~0.9 MB) and
# ~133M (~530 MB): only their widths differ. One Trainer step each.
HF_SMALL = {"vocab_size": 2000, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
HF_SMALL["intermediate_size"] = 256
HF_BIG = {
    "vocab_size": 30522,
    "hidden_size": 1792,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
}
HF_BIG["intermediate_size"] = 7168
HF_QUICK_BIG = {**HF_BIG, "hidden_size": 512, "intermediate_size": 2048}  # ~80 MB

MAKE_HF = r"""
import json, os, sys, torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
os.environ["HF_HUB_OFFLINE"] = "1"
torch.manual_seed(0)
model = BertForSequenceClassification(BertConfig(num_labels=2, **json.loads(sys.argv[2])))
class Data(torch.utils.data.Dataset):
    def __len__(self): return 4
    def __getitem__(self, i):
        return {"input_ids": torch.arange(1, 9) + i, "labels": torch.tensor(i % 2)}
out = sys.argv[1] + ".part"
args = TrainingArguments(output_dir=out, max_steps=1, save_steps=1, per_device_train_batch_size=2,
                         use_cpu=True, report_to="none", dataloader_num_workers=0, seed=0)
Trainer(model=model, args=args, train_dataset=Data()).train()
os.replace(out, sys.argv[1])
"""

MEASURE = r"""
import json, os, resource, sys, time
from pathlib import Path

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def rchar():
    with open("/proc/self/io") as f:
        return int(next(l for l in f if l.startswith("rchar")).split()[1])

import ckpt_daemon.formats.detect as detect
base_rss = rss()
read0 = rchar()
start = time.perf_counter()
info = detect.read_checkpoint(Path(sys.argv[1]))
seconds = time.perf_counter() - start
read_bytes = rchar() - read0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
heavy = {"torch", "safetensors", "transformers", "lightning", "pytorch_lightning"}
heavy = sorted(set(sys.modules) & heavy)
assert not heavy, f"read_checkpoint imported {heavy}"
opt = info.optimizer
assert opt is not None and opt.state_bytes > 0, "no optimizer state in the file"
print(json.dumps({"seconds": seconds, "rss_increase": peak - base_rss, "base_rss": base_rss,
                  "read_bytes": read_bytes, "format": str(info.format), "n_params": info.n_params,
                  "optimizer_bytes": opt.state_bytes, "optimizer": opt.class_name,
                  "torch_imported": "torch" in sys.modules}))
"""


def make_checkpoint(width: int) -> Path:
    path = OUT / f"torch_mlp_{width}.pt"
    if path.exists():
        return path
    OUT.mkdir(parents=True, exist_ok=True)
    print(f"generating {path.name} (torch child, one AdamW step, torch.save) ...", flush=True)
    done = subprocess.run(
        [PYTHON, "-c", MAKE, str(path), str(width)], env=CHILD_ENV, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"generating {path} failed:\n{done.stderr[-3000:]}")
    print(f"  done: {path.stat().st_size / 1e6:.1f} MB")
    return path


def make_hf_folder(name: str, config: dict[str, int]) -> Path:
    """`bench/out/<name>/checkpoint-1/`, the folder a real Trainer wrote."""
    import json

    path = OUT / name
    folder = path / "checkpoint-1"
    if folder.is_dir():
        return folder
    OUT.mkdir(parents=True, exist_ok=True)
    print(f"generating {name} (transformers Trainer child, one step) ...", flush=True)
    env = {**CHILD_ENV, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "2"}
    done = subprocess.run(
        [PYTHON, "-c", MAKE_HF, str(path), json.dumps(config)],
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"generating {path} failed:\n{done.stderr[-3000:]}")
    print(f"  done: {_size(folder) / 1e6:.1f} MB")
    return folder


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir()) if path.is_dir() else path.stat().st_size


def warm(path: Path) -> None:
    """Every file is measured with a warm page cache (the daemon reads files just written)."""
    for file in sorted(path.iterdir()) if path.is_dir() else [path]:
        with open(file, "rb", buffering=0) as f:
            while f.read(16 << 20):
                pass


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = dict(runs[0])
    for key in ("seconds", "rss_increase", "base_rss", "read_bytes"):
        out[key] = median([float(r[key]) for r in runs])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="~100 MB / ~40 MB, 2 repeats")
    parser.add_argument("--repeats", type=int, help="fresh children per file (default 5)")
    args = parser.parse_args()
    repeats = args.repeats or (2 if args.quick else 5)
    pairs = {
        "pt": (make_checkpoint(SMALL), make_checkpoint(QUICK_BIG if args.quick else BIG)),
        "hf": (
            make_hf_folder("hf_small", HF_SMALL),
            make_hf_folder(
                "hf_quick" if args.quick else "hf_big_2layers",
                HF_QUICK_BIG if args.quick else HF_BIG,
            ),
        ),
    }
    files = {
        f"{kind} {size}": p
        for kind, pair in pairs.items()
        for size, p in zip(("small", "big"), pair, strict=True)
    }
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in files}
    for _ in range(repeats):  # interleaved, so that load spikes hit every file alike
        for label, path in files.items():
            warm(path)  # again: on a busy machine the other files evict its pages meanwhile
            runs[label].append(child_json(MEASURE, str(path)))
    results = {label: summarize(found) for label, found in runs.items()}
    mb = 1e6
    rows = [
        [
            label,
            _size(p) / mb,
            r["n_params"],
            float(r["optimizer_bytes"]) / mb,
            float(r["seconds"]) * 1000,
            float(r["read_bytes"]) / 1024,
            float(r["base_rss"]) / mb,
            float(r["rss_increase"]) / mb,
        ]
        for (label, p), r in zip(files.items(), results.values(), strict=True)
    ]
    print(f"\nread_checkpoint, medians of {repeats} fresh interpreters (page cache warm)")
    table(
        [
            "checkpoint",
            "MB",
            "params",
            "optimizer MB",
            "ms",
            "KiB read",
            "RSS@import MB",
            "RSS incr MB",
        ],
        rows,
    )
    imported = any(bool(r["torch_imported"]) for found in runs.values() for r in found)
    checks = []
    for kind in pairs:
        small, big = results[f"{kind} small"], results[f"{kind} big"]
        time_ratio = float(big["seconds"]) / float(small["seconds"])
        rss_delta = (float(big["rss_increase"]) - float(small["rss_increase"])) / mb
        size_ratio = _size(files[f"{kind} big"]) / _size(files[f"{kind} small"])
        print(f"\n{kind}: size ratio big/small      {size_ratio:8.1f}x")
        print(f"{kind}: time ratio big/small      {time_ratio:8.2f}x")
        print(f"{kind}: RSS increase big - small  {rss_delta:8.2f} MB")
        checks += [
            Check(
                f"{kind}: read_checkpoint time big/small", time_ratio, "< 2", "x", time_ratio < 2
            ),
            Check(f"{kind}: RSS increase big vs small", rss_delta, "< 50", "MB", rss_delta < 50),
        ]
    said = "YES" if imported else "no"
    print(f"torch imported by read_checkpoint: {said} (asserted in every child)")
    checks.append(Check("torch imported", float(imported), "= 0", "", not imported))
    return report("torch_index_cost", checks, {"repeats": repeats, "rows": rows})


if __name__ == "__main__":
    raise SystemExit(main())
