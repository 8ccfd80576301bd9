"""Real DeepSpeed ZeRO checkpoints, written by deepspeed itself on the CPU (2 ranks on gloo under
torchrun), with the truth of each taken on the writer's side and DeepSpeed's own consolidation.

Usage (always in a child process: the pytest process never imports torch or deepspeed)::

    python3 tests/support/deepspeed_runs.py OUT

writes::

    OUT/zero2/{latest, zero_to_fp32.py, global_step{1,2,3}/}   ZeRO-2, two param groups
    OUT/zero3/{latest, zero_to_fp32.py, global_step{1,2,3}/}   ZeRO-3 (placeholders in module)
    OUT/hf-zero{2,3}/out/checkpoint-{2,4}/   the HF Trainer with a DeepSpeed config (max_steps 4,
                                    2 epochs, save_steps 2): `latest` + `global_stepN/` in each
                                    checkpoint folder, no optimizer.pt; ZeRO-3 saves no weights
                                    file (no 16-bit gathering)
    OUT/zero2-bf16/{latest, global_step{1,2,3}/}   ZeRO-2 trained in bf16 (`bf16_zero_pp_rank_*`)
    OUT/reference/zero{2,3,2-bf16}-global_stepN.safetensors   DeepSpeed's consolidation
                                    (`get_fp32_state_dict_from_zero_checkpoint`, in the
                                    trained dtype as `to_torch_tensor(dtype=...)` casts it)
    OUT/ds-truth.json                                   shapes, stages, world size, steps

The model has a BatchNorm (buffers, an int64 among them), a frozen Linear (no optimizer
partition: `frozen_param_fragments`) and parameters whose sizes are odd, so ZeRO-2's alignment
padding and ZeRO-3's per-parameter padding are both exercised. DeepSpeed
JIT-builds a shared-memory comm op on its first CPU start (~80 s); it is an optimisation of
all-reduce only, so the ranks here run without it (gloo does the collectives).

Generated once per content of this file (`session_deepspeed_runs`: a cache folder keyed by its
hash), like tests/support/hf_runs.py.
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

DS_TRUTH = "ds-truth.json"
STAGES = (2, 3)
HF_STAGES = (2, 3)
SAVES = 3
WORLD_SIZE = 2
GENERATE_TIMEOUT_S = 600
CACHE_ENV = "CKPT_DS_FIXTURES"  # a folder holding one generated set per content hash


def _model(hidden: int = 16) -> Any:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, hidden),
        torch.nn.BatchNorm1d(hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 7),
        torch.nn.Linear(7, 5),
    )
    model[3].requires_grad_(False)  # frozen, as a fine-tune's base: no optimizer partition
    return model


def _groups(model: Any) -> list[dict[str, Any]]:
    """Two param groups (weights decayed, biases and norms not), as most recipes build them."""
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decay = [p for n, p in trained if n.endswith("weight") and p.dim() > 1]
    rest = [p for n, p in trained if not (n.endswith("weight") and p.dim() > 1)]
    return [{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}]


def config(stage: int, bf16: bool = False) -> dict[str, Any]:
    return {
        "train_batch_size": 8,
        "zero_optimization": {"stage": stage},
        "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "torch_adam": True}},
        **({"bf16": {"enabled": True}} if bf16 else {}),
    }


def _bf16_model() -> Any:
    """Without BatchNorm (DeepSpeed's bf16 engine casts its buffers: the CPU kernel refuses)."""
    import torch

    torch.manual_seed(0)
    layers = [
        torch.nn.Linear(8, 16),
        torch.nn.ReLU(),
        torch.nn.Linear(16, 7),
        torch.nn.Linear(7, 5),
    ]
    return torch.nn.Sequential(*layers)


def _no_shm_op() -> None:
    """Skip DeepSpeed's JIT-built shared-memory all-reduce (~80 s of C++ on a first start)."""
    import deepspeed.comm.torch as ds_comm

    ds_comm.build_shm_op = lambda: None  # type: ignore[attr-defined]


def train_and_save(
    out: Path, stage: int, saves: int, model: Any, bf16: bool = False
) -> dict[str, Any]:
    """One engine of `stage`, `saves` steps, a `save_checkpoint` after each (every rank)."""
    import deepspeed
    import torch

    engine, *_ = deepspeed.initialize(
        model=model, model_parameters=_groups(model), config=config(stage, bf16)
    )
    rank = torch.distributed.get_rank()
    gen = torch.Generator().manual_seed(rank)
    folder = out / (f"zero{stage}-bf16" if bf16 else f"zero{stage}")
    for step in range(1, saves + 1):
        x = torch.randn(4, 8, generator=gen).to(torch.bfloat16 if bf16 else torch.float32)
        engine.backward(engine(x).pow(2).mean())
        engine.step()
        engine.save_checkpoint(str(folder), tag=f"global_step{step}")
    return {"folder": folder.name, "tags": [f"global_step{s}" for s in range(1, saves + 1)]}


def reference(folder: Path, tag: str, target: Path, dtype: Any = None) -> dict[str, Any]:
    """DeepSpeed's own consolidation of one tag (in `dtype`, as `convert_zero_checkpoint_to_
    state_dict(dtype=...)` casts), saved as safetensors (its own `save_file`)."""
    from deepspeed.utils.zero_to_fp32 import (
        get_fp32_state_dict_from_zero_checkpoint,
        to_torch_tensor,
    )
    from safetensors.torch import save_file

    lazy = get_fp32_state_dict_from_zero_checkpoint(str(folder), tag=tag, lazy_mode=True)
    state = to_torch_tensor(lazy, dtype=dtype)
    save_file({k: v.contiguous() for k, v in state.items()}, str(target))
    return {
        k: {"shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch.")}
        for k, v in state.items()
    }


def rank_main(out: Path) -> None:
    import deepspeed
    import torch

    _no_shm_op()
    deepspeed.init_distributed(dist_backend="gloo")
    rank = torch.distributed.get_rank()
    truth: dict[str, Any] = {"world_size": torch.distributed.get_world_size(), "stages": {}}
    for stage in STAGES:
        model = _model()
        shapes = {n: list(p.shape) for n, p in model.named_parameters()}
        buffers = {n: list(b.shape) for n, b in model.named_buffers()}
        run = train_and_save(out, stage, SAVES, model)
        truth["stages"][str(stage)] = {
            **run,
            "zero_stage": stage,
            "param_shapes": shapes,
            "buffers": buffers,
            "n_params": sum(int(torch.tensor(s).prod()) for s in shapes.values()),
        }
    model = _bf16_model()
    run = train_and_save(out, 2, SAVES, model, bf16=True)
    truth["stages"]["2-bf16"] = {**run, "zero_stage": 2, "dtype": "bfloat16", "param_shapes": {
        n: list(p.shape) for n, p in model.named_parameters()}, "buffers": {}}  # fmt: skip
    torch.distributed.barrier()
    if rank == 0:
        (out / "reference").mkdir(exist_ok=True)
        for stage, entry in truth["stages"].items():
            entry["consolidated"] = {}
            dtype = torch.bfloat16 if entry.get("dtype") == "bfloat16" else None
            for tag in entry["tags"]:
                target = out / "reference" / f"zero{stage}-{tag}.safetensors"
                found = reference(out / entry["folder"], tag, target, dtype)
                entry["consolidated"][tag] = found
        truth["ds_version"] = deepspeed.__version__
        (out / DS_TRUTH).write_text(json.dumps(truth, indent=1))
    torch.distributed.barrier()


def hf_trainer(run: Path, stage: int) -> None:
    """The tiny BERT of tests/support/hf_runs.py trained by the HF Trainer under DeepSpeed."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from transformers import Trainer, TrainingArguments

    from tests.support.hf_runs import _dataset, _tiny_model

    _no_shm_op()
    run.mkdir(parents=True, exist_ok=True)
    os.chdir(run)
    auto = "auto"  # the Trainer fills these in (a number it disagrees with is refused)
    ds = {
        "train_micro_batch_size_per_gpu": auto,
        "train_batch_size": auto,
        "gradient_accumulation_steps": auto,
        "zero_optimization": {"stage": stage},
        "optimizer": {"type": "AdamW", "params": {"lr": auto, "torch_adam": True}},
    }
    args = TrainingArguments(
        output_dir="out", max_steps=4, save_steps=2, logging_steps=1,
        per_device_train_batch_size=8, report_to="none", dataloader_num_workers=0, seed=0,
        deepspeed=ds, ddp_backend="gloo", use_cpu=True,
    )  # fmt: skip
    Trainer(model=_tiny_model(), args=args, train_dataset=_dataset()).train()


def content_key() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def child_env() -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")


def torchrun(script: Path, *args: str, nproc: int = WORLD_SIZE) -> list[str]:
    """The command that runs `script` on `nproc` CPU ranks (gloo), as a user's launcher would."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={nproc}", str(script), *args]  # fmt: skip


def generate(out: Path) -> Path:
    """The three launches at once (each mostly waits on its imports and collectives)."""
    out.mkdir(parents=True, exist_ok=True)
    script = Path(__file__).resolve()
    env = child_env() | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmds = [torchrun(script, "--hf", str(s), str(out / f"hf-zero{s}")) for s in HF_STAGES]
    cmds.append(torchrun(script, "--rank", str(out)))
    logs = [tempfile.TemporaryFile() for _ in cmds]  # noqa: SIM115 (closed below)
    procs = [
        subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=out)
        for cmd, log in zip(cmds, logs, strict=True)
    ]
    codes = [p.wait(timeout=GENERATE_TIMEOUT_S) for p in procs]
    for code, log in zip(codes, logs, strict=True):
        log.seek(0)
        text = log.read()[-6000:].decode(errors="replace")
        log.close()
        if code != 0:
            raise RuntimeError(f"deepspeed_runs failed:\n{text}")
    if not (out / DS_TRUTH).is_file():
        raise RuntimeError("deepspeed_runs wrote no truth")
    return out


def session_deepspeed_runs() -> Path:
    """The generated set for this content of the script: from the cache if there, else written
    into a temp folder beside it and renamed into place, under a lock of the cache (both xdist
    workers ask at once: one generates, the other waits and reads)."""
    from tests.support.shared_fixtures import exclusive

    cache = Path(os.environ.get(CACHE_ENV) or Path(tempfile.gettempdir()) / "ckpt-ds-fixtures")
    final = cache / content_key()
    if (final / DS_TRUTH).is_file():
        return final
    cache.mkdir(parents=True, exist_ok=True)
    with exclusive(cache / f"{final.name}.lock"):
        if (final / DS_TRUTH).is_file():  # the other worker made it meanwhile
            return final
        fresh = Path(tempfile.mkdtemp(prefix="gen-", dir=cache))
        try:
            generate(fresh / "set")
            shutil.rmtree(final, ignore_errors=True)  # a broken set (no truth) of an old run
            os.rename(fresh / "set", final)
        finally:
            shutil.rmtree(fresh, ignore_errors=True)
    return final


def compare(ours: Path, reference: Path) -> dict[str, Any]:
    """Our consolidation (a safetensors file, or a folder of shards with its index) loaded by
    safetensors' torch loader, against DeepSpeed's: every tensor's dtype, shape and bits."""
    import torch
    from safetensors.torch import load_file

    if ours.is_dir():
        index = json.loads((ours / "model.safetensors.index.json").read_text())
        mine: dict[str, Any] = {}
        for shard in sorted(set(index["weight_map"].values())):
            mine |= load_file(str(ours / shard))
        placed = {k: index["weight_map"][k] for k in mine}
    else:
        mine, placed = load_file(str(ours)), {}
    theirs = load_file(str(reference))

    def bits(t: Any) -> Any:
        return t.contiguous().view(-1).view(torch.uint8)

    differ = [
        k
        for k in theirs
        if k not in mine
        or mine[k].dtype != theirs[k].dtype
        or mine[k].shape != theirs[k].shape
        or not torch.equal(bits(mine[k]), bits(theirs[k]))
    ]
    return {"tensors": len(mine), "reference": len(theirs), "differ": differ, "shards": placed}


def compare_in_child(*pairs: tuple[Path, Path]) -> list[dict[str, Any]]:
    """`compare` of each (ours, reference) pair, in one child process (the test process never
    imports torch; one torch start-up for them all)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--compare"]
    cmd += [str(p) for pair in pairs for p in pair]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=child_env())
    if result.returncode != 0:
        raise RuntimeError(f"deepspeed_runs --compare failed:\n{result.stderr[-4000:]}")
    return list(json.loads(result.stdout.splitlines()[-1]))


def load_truth(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / DS_TRUTH).read_text()))


if __name__ == "__main__":
    if sys.argv[1] == "--rank":
        rank_main(Path(sys.argv[2]))
    elif sys.argv[1] == "--hf":
        hf_trainer(Path(sys.argv[3]), int(sys.argv[2]))
    elif sys.argv[1] == "--compare":
        paths = [Path(a) for a in sys.argv[2:]]
        print(json.dumps([compare(a, b) for a, b in zip(paths[::2], paths[1::2], strict=True)]))
    else:
        generate(Path(sys.argv[1]))
