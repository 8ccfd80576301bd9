"""Indexing cost must not grow with checkpoint size, and never imports the library that wrote it.

One bench per family of checkpoints (`--family`, repeatable; default keras and torch, `all`
adds orbax), each a small and a big checkpoint of the same topology written by the real library
in a child process and cached in bench/out/:
- keras: two Keras 3 full-model legacy HDF5 files with Adam state, ~10 MB and ~1 GB;
- torch: two `torch.save` files with AdamW state and a scheduler, ~1 MB and ~1 GB; and two
  Hugging Face Trainer `checkpoint-1/` folders (a real `Trainer`, one AdamW step, a BERT built
  from a config, never downloaded) of a ~1 MB and a ~500 MB model;
- orbax: two 100-step runs of orbax.checkpoint's `CheckpointManager` (in a jax child), same
  tree, ~1 MB and ~100 MB of random float32 per step (written into bench/out/orbax-index/,
  ~10 GB, removed at the end unless --keep; --big-mb makes it smaller on a tight disk).

keras and torch: each measurement runs `ckpt_daemon.formats.detect.read_checkpoint` once in a
fresh interpreter: wall time of the call, peak RSS above the RSS right after the import, the
bytes read (/proc/self/io rchar), and whether the writer's library got imported (asserted in
every child). orbax: every step read as the indexer's reader child does
(`formats.folder_readers.read`, then the folder-save verdict of `usecases.save_checks`) in a
fresh interpreter, wall for the steps and bytes read; `ckpt scan` of each run is timed and
shown, not checked (it hashes every byte, linear by design). Hashing is bench/hash_throughput.py.

    python3 bench/index_cost.py [--family keras|torch|orbax|all]... [--quick] [--repeats N]
                                [--steps 100] [--big-mb 100] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from _common import CHILD_ENV, OUT, PYTHON, Check, child_json, median, report, table

FAMILIES = ("keras", "torch", "orbax")
DEFAULT_FAMILIES = ("keras", "torch")

# keras: Input -> Dense(h) -> Dense(h) -> Dense(out): 4 layers, 6 weights, Adam m+v per weight.
KERAS_SMALL = (128, 768, 128)  # ~0.79 M params -> ~9.5 MB with Adam state
KERAS_BIG = (1024, 8192, 1024)  # ~84 M params -> ~1.0 GB with Adam state
KERAS_QUICK_BIG = (1024, 2048, 1024)  # ~8.4 M params -> ~100 MB
# torch: Linear(w, w) x 4 with AdamW (exp_avg, exp_avg_sq): 3 x the weights.
TORCH_SMALL = 144  # 4 x 144^2 x 4 B x 3 ~= 1.0 MB
TORCH_BIG = 4730  # 4 x 4730^2 x 4 B x 3 ~= 1.07 GB
TORCH_QUICK_BIG = 1500  # ~108 MB
# hf: two BERTs of the same topology (2 layers: the same tensors), ~0.23M parameters (~0.9 MB)
# and ~133M (~530 MB): only their widths differ. One Trainer step each.
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

MAKE_KERAS = r"""
import json, os, resource, sys
import numpy as np
import keras
d_in, hidden, d_out = (int(a) for a in sys.argv[2:5])
model = keras.Sequential([
    keras.Input((d_in,)),
    keras.layers.Dense(hidden, activation="relu", name="hidden1"),
    keras.layers.Dense(hidden, activation="relu", name="hidden2"),
    keras.layers.Dense(d_out, name="out"),
], name="bench_mlp")
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
rng = np.random.default_rng(0)
x = rng.random((4, d_in), dtype=np.float32)
y = rng.random((4, d_out), dtype=np.float32)
model.fit(x, y, batch_size=4, epochs=1, verbose=0)  # one step: Adam m/v exist, iterations=1
tmp = sys.argv[1] + ".part.h5"
model.save(tmp)
os.replace(tmp, sys.argv[1])
print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

MAKE_TORCH = r"""
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

# argv: the checkpoint, the writer's modules that must stay unimported (JSON), and whether the
# optimizer's variables are counted (a Keras file) or its state's bytes (a torch file).
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
heavy = sorted(set(sys.modules) & set(json.loads(sys.argv[2])))
assert not heavy, f"read_checkpoint imported {heavy}"
opt = info.optimizer
found = opt is not None and (opt.n_variables if sys.argv[3] == "vars" else opt.state_bytes) > 0
assert found, "no optimizer state in the file"
print(json.dumps({"seconds": seconds, "rss_increase": peak - base_rss, "base_rss": base_rss,
                  "read_bytes": read_bytes, "format": str(info.format), "n_params": info.n_params,
                  "optimizer_bytes": opt.state_bytes, "optimizer_vars": opt.n_variables,
                  "optimizer": opt.class_name, "torch_imported": "torch" in sys.modules}))
"""
KERAS_MODULES = ["tensorflow", "keras"]
TORCH_MODULES = ["torch", "safetensors", "transformers", "lightning", "pytorch_lightning"]

MAKE_ORBAX = r"""
import sys
import numpy as np
import jax.numpy as jnp
import orbax.checkpoint as ocp
out, steps, mb = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
n = max(1, int(mb * 2**20 / 4 / 2))  # float32: half in params.w, half in opt_state.mu
rng = np.random.default_rng(0)
w = jnp.asarray(rng.random(n, dtype=np.float32))
state = {"params": {"w": w, "b": jnp.zeros((16,), jnp.float32)}, "opt_state": {"mu": w * 0.5}}
options = ocp.CheckpointManagerOptions(max_to_keep=None, enable_async_checkpointing=False)
with ocp.CheckpointManager(out, options=options) as manager:
    for step in range(1, steps + 1):
        manager.save(step, args=ocp.args.StandardSave(state))
    manager.wait_until_finished()
"""

MEASURE_ORBAX = r"""
import json, os, sys, time
from pathlib import Path

def rchar():
    with open("/proc/self/io") as f:
        return int(next(l for l in f if l.startswith("rchar")).split()[1])

from ckpt_daemon.formats import folder_readers
from ckpt_daemon.settings import config as config_module
from ckpt_daemon.usecases import save_checks

run = Path(sys.argv[1])
steps = sorted((p for p in run.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
config = config_module.load(sys.argv[2])  # the scan's config: the completion defaults
read0 = rchar()
start = time.perf_counter()
tensors = 0
for step in steps:
    info = folder_readers.read(step, run)
    assert save_checks.read_whole(step, info, config, time.time_ns()) is None, step
    tensors += sum(len(layer.weights) for layer in info.layers)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "read_bytes": rchar() - read0, "steps": len(steps),
                  "tensors": tensors, "modules": sorted(m for m in ("jax", "orbax", "torch",
                  "tensorstore") if m in sys.modules)}))
"""


def _generate(path: Path, what: str, code: str, *args: str, env: dict[str, str]) -> str:
    OUT.mkdir(parents=True, exist_ok=True)
    print(f"generating {path.name} ({what}) ...", flush=True)
    done = subprocess.run(
        [PYTHON, "-c", code, str(path), *args], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"generating {path} failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip()


def make_keras(shape: tuple[int, int, int]) -> Path:
    path = OUT / f"keras_mlp_{shape[0]}x{shape[1]}x{shape[2]}.h5"
    if not path.exists():
        env = {**CHILD_ENV, "KERAS_BACKEND": "tensorflow"}
        said = _generate(
            path, "Keras 3 child, one fit step, model.save", MAKE_KERAS, *map(str, shape), env=env
        )
        print(f"  done: {path.stat().st_size / 1e6:.1f} MB, generator child {said}")
    return path


def make_torch(width: int) -> Path:
    path = OUT / f"torch_mlp_{width}.pt"
    if not path.exists():
        _generate(
            path, "torch child, one AdamW step, torch.save", MAKE_TORCH, str(width), env=CHILD_ENV
        )
        print(f"  done: {path.stat().st_size / 1e6:.1f} MB")
    return path


def make_hf_folder(name: str, config: dict[str, int]) -> Path:
    """`bench/out/<name>/checkpoint-1/`, the folder a real Trainer wrote."""
    path = OUT / name
    folder = path / "checkpoint-1"
    if not folder.is_dir():
        env = {**CHILD_ENV, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "2"}
        _generate(
            path, "transformers Trainer child, one step", MAKE_HF, json.dumps(config), env=env
        )
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


def measured(
    files: dict[str, Path], repeats: int, modules: list[str], count: str
) -> dict[str, dict[str, Any]]:
    """Medians of `repeats` fresh interpreters per file, interleaved so that load spikes hit
    every file alike; the file facts (the same in every run) from the first."""
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in files}
    for _ in range(repeats):
        for label, path in files.items():
            warm(path)  # again: on a busy machine the other files evict its pages meanwhile
            runs[label].append(child_json(MEASURE, str(path), json.dumps(modules), count))
    results = {}
    for label, found in runs.items():
        results[label] = dict(found[0])
        for key in ("seconds", "rss_increase", "base_rss", "read_bytes"):
            results[label][key] = median([float(r[key]) for r in found])
    return results


def pair_checks(
    kind: str, files: dict[str, Path], results: dict[str, dict[str, Any]]
) -> list[Check]:
    """Big vs small of one pair (`<kind> small`, `<kind> big`): ratios printed, two checks."""
    small, big = results[f"{kind} small"], results[f"{kind} big"]
    time_ratio = float(big["seconds"]) / float(small["seconds"])
    rss_delta = (float(big["rss_increase"]) - float(small["rss_increase"])) / 1e6
    size_ratio = _size(files[f"{kind} big"]) / _size(files[f"{kind} small"])
    read_ratio = float(big["read_bytes"]) / float(small["read_bytes"])
    print(f"\n{kind}: size ratio big/small        {size_ratio:8.1f}x")
    print(f"{kind}: time ratio big/small        {time_ratio:8.2f}x")
    print(f"{kind}: bytes-read ratio big/small  {read_ratio:8.2f}x")
    print(f"{kind}: RSS increase big - small    {rss_delta:8.2f} MB")
    return [
        Check(f"{kind}: read_checkpoint time big/small", time_ratio, "< 2", "x", time_ratio < 2),
        Check(f"{kind}: RSS increase big vs small", rss_delta, "< 50", "MB", rss_delta < 50),
    ]


def rows_of(
    files: dict[str, Path], results: dict[str, dict[str, Any]], vars_column: bool
) -> list[list[Any]]:
    return [
        [
            label,
            _size(p) / 1e6,
            r["n_params"],
            float(r["optimizer_bytes"]) / 1e6,
            *([r["optimizer_vars"]] if vars_column else []),
            float(r["seconds"]) * 1000,
            float(r["read_bytes"]) / 1024,
            float(r["base_rss"]) / 1e6,
            float(r["rss_increase"]) / 1e6,
        ]
        for (label, p), r in zip(files.items(), results.values(), strict=True)
    ]


def keras_family(args: argparse.Namespace) -> tuple[list[Check], dict[str, Any]]:
    repeats = args.repeats or (2 if args.quick else 5)
    big = make_keras(KERAS_QUICK_BIG if args.quick else KERAS_BIG)
    files = {"keras small": make_keras(KERAS_SMALL), "keras big": big}
    results = measured(files, repeats, KERAS_MODULES, "vars")
    print(
        f"\nread_checkpoint, medians of {repeats} fresh interpreters (format "
        f"{results['keras big']['format']}, page cache warm)"
    )
    headers = [
        "file",
        "MB",
        "params",
        "Adam MB",
        "opt vars",
        "ms",
        "KiB read",
        "RSS@import MB",
        "RSS incr MB",
    ]
    rows = rows_of(files, results, vars_column=True)
    table(headers, rows)
    checks = pair_checks("keras", files, results)
    print("tensorflow/keras imported by read_checkpoint: no (asserted in every child)")
    return checks, {"repeats": repeats, "rows": rows}


def torch_family(args: argparse.Namespace) -> tuple[list[Check], dict[str, Any]]:
    repeats = args.repeats or (2 if args.quick else 5)
    pairs = {
        "pt": (make_torch(TORCH_SMALL), make_torch(TORCH_QUICK_BIG if args.quick else TORCH_BIG)),
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
    results = measured(files, repeats, TORCH_MODULES, "bytes")
    print(f"\nread_checkpoint, medians of {repeats} fresh interpreters (page cache warm)")
    headers = [
        "checkpoint",
        "MB",
        "params",
        "optimizer MB",
        "ms",
        "KiB read",
        "RSS@import MB",
        "RSS incr MB",
    ]
    rows = rows_of(files, results, vars_column=False)
    table(headers, rows)
    checks = [check for kind in pairs for check in pair_checks(kind, files, results)]
    imported = any(bool(r["torch_imported"]) for r in results.values())
    said = "YES" if imported else "no"
    print(f"torch imported by read_checkpoint: {said} (asserted in every child)")
    checks.append(Check("torch imported", float(imported), "= 0", "", not imported))
    return checks, {"repeats": repeats, "rows": rows}


def make_orbax(run: Path, steps: int, mb: float) -> None:
    if (run / "done").is_file():
        return
    shutil.rmtree(run, ignore_errors=True)
    run.parent.mkdir(parents=True, exist_ok=True)
    env = {**CHILD_ENV, "JAX_PLATFORMS": "cpu", "OMP_NUM_THREADS": "1"}
    subprocess.run([PYTHON, "-c", MAKE_ORBAX, str(run), str(steps), str(mb)], check=True, env=env)
    (run / "done").write_text("")


def config_for(run: Path) -> Path:
    """A config whose one root is the run, its catalog in a fresh folder beside it."""
    base = run.parent / f"{run.name}-catalog"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    config = base / "config.yaml"
    config.write_text(f"state_dir: {base / 'state'}\nroots:\n  - path: {run}\n")
    return config


def scan_seconds(run: Path) -> float:
    """`ckpt scan` of the run into a fresh SQLite catalog (reader child, hashing, derivation)."""
    config = config_for(run)
    start = time.perf_counter()
    command = [PYTHON, "-m", "ckpt_daemon", "--config", str(config), "scan"]
    subprocess.run(command, check=True, capture_output=True, env=CHILD_ENV)
    seconds = time.perf_counter() - start
    shutil.rmtree(config.parent, ignore_errors=True)
    return seconds


def orbax_family(args: argparse.Namespace) -> tuple[list[Check], dict[str, Any]]:
    steps = args.steps or (10 if args.quick else 100)
    big_mb = args.big_mb or (10.0 if args.quick else 100.0)
    repeats = args.repeats or (2 if args.quick else 3)
    folder = OUT / "orbax-index"
    runs = {
        "small": folder / f"small-{steps}x{args.small_mb:g}MB",
        "big": folder / f"big-{steps}x{big_mb:g}MB",
    }
    results: dict[str, dict[str, Any]] = {}
    try:
        for name, mb in (("small", args.small_mb), ("big", big_mb)):
            started = time.perf_counter()
            make_orbax(runs[name], steps, mb)
            print(f"{name}: written in {time.perf_counter() - started:.0f}s", flush=True)
        for name, run in runs.items():
            # interleaving would not help: each is one child
            reads = [
                child_json(MEASURE_ORBAX, str(run), str(config_for(run))) for _ in range(repeats)
            ]
            results[name] = {
                "bytes": sum(p.stat().st_size for p in run.rglob("*") if p.is_file()),
                "seconds": median([r["seconds"] for r in reads]),
                "read_bytes": median([r["read_bytes"] for r in reads]),
                "steps": reads[0]["steps"],
                "tensors": reads[0]["tensors"],
                "modules": reads[0]["modules"],
                "scan_seconds": scan_seconds(run),
            }
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    rows = [
        [
            name,
            r["steps"],
            f"{r['bytes'] / 2**20:.0f} MiB",
            f"{r['seconds']:.3f}",
            f"{r['read_bytes'] / 2**10:.0f} KiB",
            f"{r['scan_seconds']:.1f}",
            ",".join(r["modules"]) or "none",
        ]
        for name, r in results.items()
    ]
    table(
        ["run", "steps", "on disk", "read all (s)", "bytes read", "ckpt scan (s)", "imports"], rows
    )
    small, big = results["small"], results["big"]
    time_ratio = big["seconds"] / small["seconds"]
    read_ratio = big["read_bytes"] / max(1, small["read_bytes"])
    checks = [
        Check("orbax: metadata read time, big / small", time_ratio, "< 2", "x", time_ratio < 2),
        Check("orbax: bytes read, big / small", read_ratio, "< 2", "x", read_ratio < 2),
        Check("orbax: steps read", big["steps"], f"== {steps}", "", big["steps"] == steps),
        Check("orbax: framework imports", len(big["modules"]), "== 0", "", not big["modules"]),
    ]
    return checks, {"results": results, "cpus": os.cpu_count()}


RUNNERS = {"keras": keras_family, "torch": torch_family, "orbax": orbax_family}


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    found.add_argument(
        "--family",
        action="append",
        choices=[*FAMILIES, "all"],
        help=f"which checkpoints (repeatable; default {' and '.join(DEFAULT_FAMILIES)})",
    )
    found.add_argument(
        "--quick", action="store_true", help="~100 MB big files, 10 orbax steps of 10 MB, 2 repeats"
    )
    found.add_argument("--repeats", type=int, help="fresh children per file (default 5; orbax 3)")
    found.add_argument("--steps", type=int, help="orbax: steps per run (default 100)")
    found.add_argument("--small-mb", type=float, default=1.0, help="orbax: MB per small step")
    found.add_argument("--big-mb", type=float, help="orbax: MB per big step (default 100)")
    found.add_argument("--keep", action="store_true", help="orbax: keep the runs in bench/out")
    return found


def families(args: argparse.Namespace) -> list[str]:
    asked = args.family or list(DEFAULT_FAMILIES)
    return list(FAMILIES) if "all" in asked else [f for f in FAMILIES if f in asked]


def main() -> int:
    args = parser().parse_args()
    checks: list[Check] = []
    facts: dict[str, Any] = {}
    for family in families(args):
        print(f"\n=== {family} ===", flush=True)
        found, facts[family] = RUNNERS[family](args)
        checks += found
    return report("index_cost", checks, facts)


if __name__ == "__main__":
    raise SystemExit(main())
