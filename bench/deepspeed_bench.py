"""DeepSpeed ZeRO checkpoints: consolidation memory flat in model size, indexing cost flat too.

Two ZeRO-2 checkpoints of the same topology (Linear(w, w, bias=False) x 4, Adam, one step, 2 CPU
ranks on gloo under torchrun), written once by the real DeepSpeed into bench/out/deepspeed/:
a ~100 MB model (w=2500) and a ~1 GB model (w=7906; `--quick`: ~400 MB, w=5000). Each is
measured in fresh children, interleaved:

- `ckpt split`'s consolidation (`transforms.deepspeed_consolidate.split`): wall time and peak RSS
  (ru_maxrss), asserted torch-free; against the baseline of the same run, DeepSpeed's own
  `zero_to_fp32.py --safe_serialization` on the same tag (its peak RSS grows with the model);
- indexing (`formats.detect.read_checkpoint` of the tag folder): wall time, RSS increase.

    python3 bench/deepspeed_bench.py [--quick] [--repeats N]

Targets: the consolidation's peak RSS for the big model < 1.5x the small one's and < 200 MB;
indexing the big one < 2x the small one's time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    CHILD_ENV,
    OUT,
    PYTHON,
    Check,
    Timing,
    median,
    report,
    table,
)

ROOT = OUT / "deepspeed"
# The children import the package the caller runs (a worktree's shim on PYTHONPATH) or the repo's.
ENV = {**CHILD_ENV, "PYTHONPATH": os.environ.get("PYTHONPATH") or CHILD_ENV["PYTHONPATH"]}
SMALL, BIG, QUICK_BIG = 2500, 7906, 5000  # 4 x w^2 x 4 B: ~100 MB, ~1 GB, ~400 MB
MB = 1e6

# A rank of torchrun: one Adam step of the model, one save_checkpoint (tag global_step1).
MAKE = r"""
import os, sys, torch, deepspeed
import deepspeed.comm.torch as ds_comm
ds_comm.build_shm_op = lambda: None  # its JIT-built shm all-reduce: ~80 s of C++, not needed
deepspeed.init_distributed(dist_backend="gloo")
w = int(sys.argv[2])
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(w, w, bias=False) for _ in range(4)])
cfg = {"train_batch_size": 2, "zero_optimization": {"stage": 2},
       "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}}}
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
engine.backward(engine(torch.randn(1, w)).sum())
engine.step()
engine.save_checkpoint(sys.argv[1], tag="global_step1")
"""

CONSOLIDATE = r"""
import json, os, resource, sys, time
from pathlib import Path
from ckpt_daemon.transforms.deepspeed_consolidate import split
root, tag = Path(sys.argv[1]), Path(sys.argv[2])
start = time.perf_counter()
result = split(root, tag, out=Path(sys.argv[3]))
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
heavy = sorted({"torch", "safetensors", "deepspeed"} & set(sys.modules))
assert not heavy, heavy
os.unlink(result.path)
print(json.dumps({"seconds": seconds, "peak_rss": peak, "bytes": result.bytes}))
"""

INDEX = r"""
import json, os, resource, sys, time
from pathlib import Path
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
import ckpt_daemon.formats.detect as detect
base = rss()
start = time.perf_counter()
info = detect.read_checkpoint(Path(sys.argv[1]), root=Path(sys.argv[2]))
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
assert "torch" not in sys.modules and "deepspeed" not in sys.modules
print(json.dumps({"seconds": seconds, "rss_increase": peak - base, "n_params": info.n_params,
                  "format": str(info.format)}))
"""


def make(width: int) -> Path:
    """`bench/out/deepspeed/w<width>/global_step1`, written by DeepSpeed (2 ranks)."""
    run = ROOT / f"w{width}"
    tag = run / "global_step1"
    if (run / "latest").is_file():
        return tag
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    print(f"generating {run.name} (DeepSpeed ZeRO-2, 2 ranks, one step) ...", flush=True)
    script = run / "make.py"
    script.write_text(MAKE)
    cmd = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    env = {**CHILD_ENV, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [*cmd, str(script), str(run), str(width)], env=env, capture_output=True, text=True
    )
    if done.returncode != 0 or not (run / "latest").is_file():
        raise SystemExit(f"generating {run} failed:\n{done.stderr[-3000:]}")
    print(f"  done: {_size(tag) / MB:.0f} MB", flush=True)
    return tag


def child_json(code: str, *args: str) -> dict[str, Any]:
    """`python -c code args` in a fresh interpreter; its last stdout line is JSON."""
    done = subprocess.run([PYTHON, "-c", code, *args], capture_output=True, text=True, env=ENV)
    if done.returncode != 0:
        raise SystemExit(f"child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_cmd(cmd: list[str], timing: Timing) -> None:
    """`cmd` once; its wall time and peak RSS (from wait4) added to `timing`."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    _pid, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed")
    timing.add(time.perf_counter() - start, usage.ru_utime + usage.ru_stime)
    timing.peak_rss.append(usage.ru_maxrss * 1024.0)


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir())


def _warm(folder: Path) -> None:
    for file in sorted(folder.iterdir()):
        with open(file, "rb", buffering=0) as f:
            while f.read(16 << 20):
                pass


def zero_to_fp32(tag: Path, timing: Timing) -> None:
    """DeepSpeed's own consolidation of the same tag (the baseline): its script, in a child."""
    with tempfile.TemporaryDirectory(dir=ROOT) as out:
        script = tag.parent / "zero_to_fp32.py"
        cmd = [PYTHON, str(script), str(tag.parent), out, "--safe_serialization", "-t", tag.name]
        run_cmd(cmd, timing)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="~100 MB / ~400 MB, 2 repeats")
    parser.add_argument("--repeats", type=int, help="fresh children per size (default 3)")
    args = parser.parse_args()
    repeats = args.repeats or (2 if args.quick else 3)
    tags = {"small": make(SMALL), "big": make(QUICK_BIG if args.quick else BIG)}
    found: dict[str, dict[str, list[dict[str, Any]]]] = {
        k: {"split": [], "index": []} for k in tags
    }
    baseline = {k: Timing() for k in tags}
    scratch = Path(tempfile.mkdtemp(dir=ROOT, prefix="out-"))
    try:
        for _ in range(repeats):
            for label, tag in tags.items():
                _warm(tag)
                found[label]["index"].append(child_json(INDEX, str(tag), str(ROOT)))
                found[label]["split"].append(
                    child_json(CONSOLIDATE, str(ROOT), str(tag), str(scratch))
                )
                zero_to_fp32(tag, baseline[label])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    def med(label: str, part: str, key: str) -> float:
        return median([float(r[key]) for r in found[label][part]])

    rows = []
    for label, tag in tags.items():
        rows.append([
            label, _size(tag) / MB, found[label]["index"][0]["n_params"],
            med(label, "index", "seconds") * 1000, med(label, "index", "rss_increase") / MB,
            med(label, "split", "seconds"), med(label, "split", "peak_rss") / MB,
            median(baseline[label].wall), median(baseline[label].peak_rss) / MB,
        ])  # fmt: skip
    table(
        ["model", "tag MB", "params", "index ms", "index +RSS MB", "split s", "split peak MB",
         "zero_to_fp32 s", "zero_to_fp32 peak MB"],
        rows,
    )  # fmt: skip
    split_ratio = med("big", "split", "peak_rss") / med("small", "split", "peak_rss")
    index_ratio = med("big", "index", "seconds") / med("small", "index", "seconds")
    base_ratio = median(baseline["big"].peak_rss) / median(baseline["small"].peak_rss)
    checks = [
        Check("split peak RSS big/small", split_ratio, "< 1.5", "x", split_ratio < 1.5),
        Check(
            "split peak RSS big",
            med("big", "split", "peak_rss") / MB,
            "< 200",
            "MB",
            med("big", "split", "peak_rss") < 200 * MB,
        ),
        Check("index time big/small", index_ratio, "< 2", "x", index_ratio < 2),
    ]
    facts = {
        "sizes_mb": {k: _size(t) / MB for k, t in tags.items()},
        "zero_to_fp32_peak_rss_ratio": base_ratio,
        "rows": rows,
        "argv": sys.argv[1:],
        "pid": os.getpid(),
    }
    return report("deepspeed", checks, facts)


if __name__ == "__main__":
    raise SystemExit(main())
