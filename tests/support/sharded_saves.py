"""Real sharded checkpoints of large-model stacks, written by torch itself in child processes:
FSDP2 (`fully_shard`, 2 ranks on gloo) saved through DCP and as verl's per-rank torch files, a
Megatron-Core-style `torch_dist` iteration folder (DCP plus `common.pt` and `metadata.json`, the
tracker file in the parent) and a legacy Megatron `iter_N/mp_rank_00/model_optim_rng.pt`; with
the real consolidation (`dcp_to_torch_save`) and a truth JSON beside them.

Usage (in a child: the pytest process never imports torch)::

    python3 tests/support/sharded_saves.py --all OUT     # spawns the 2 ranks itself

Layout of OUT::

    fsdp/step-3/{__0_0.distcp,__1_0.distcp,.metadata}        dcp.save(get_state_dict(...))
    references/fsdp-step-3.pt                                dcp_to_torch_save of it
    verl/global_step_3/actor/{model,optim,extra_state}_world_size_2_rank_{0,1}.pt, fsdp_config.json
    verl/latest_checkpointed_iteration.txt                   "3" (verl's tracker)
    megatron/iter_0000010/{__0_0.distcp,__1_0.distcp,.metadata,common.pt,metadata.json}
    references/megatron-iter_0000010.pt
    megatron/latest_checkpointed_iteration.txt               "10"
    megatron-legacy/iter_0000010/mp_rank_00/model_optim_rng.pt + its tracker
    truth.json

Generated once per content (this file's bytes are the cache key), shared by the xdist workers.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

TRUTH = "truth.json"
WORLD = 2
GENERATE_TIMEOUT_S = 300
FSDP_STEP = 3
MEGATRON_ITER = 10


def _model() -> Any:
    import torch

    class Tiny(torch.nn.Module):
        """Float32 layers and a bfloat16 head: the consolidation keeps each tensor's dtype.
        Odd first dimensions (5, 7) shard unevenly over 2 ranks."""

        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(7, 16)
            self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU())
            self.head = torch.nn.Linear(32, 5).to(torch.bfloat16)

        def forward(self, x: Any) -> Any:
            return self.head(self.body(self.embed(x)).to(torch.bfloat16)).float()

    torch.manual_seed(0)
    return Tiny()


def _rank(rank: int, port: int, out: Path) -> None:
    import argparse

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.fsdp import fully_shard

    os.environ |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    model = _model()
    fully_shard(model.body)
    fully_shard(model.head)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    torch.manual_seed(1)
    for _ in range(FSDP_STEP):
        model(torch.randint(0, 7, (4,))).sum().backward()
        opt.step()
        opt.zero_grad()
    msd, osd = get_state_dict(model, opt)
    # FSDP2 through DCP
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(out / "fsdp" / f"step-{FSDP_STEP}"))
    # verl's FSDP checkpoint manager: one torch.save per rank of the DTensor state dicts
    actor = out / "verl" / f"global_step_{FSDP_STEP}" / "actor"
    actor.mkdir(parents=True, exist_ok=True)
    tag = f"world_size_{WORLD}_rank_{rank}"
    torch.save(model.state_dict(), actor / f"model_{tag}.pt")
    torch.save(opt.state_dict(), actor / f"optim_{tag}.pt")
    extra = {"lr_scheduler": None, "rng": {"cpu": torch.get_rng_state()}}
    torch.save(extra, actor / f"extra_state_{tag}.pt")
    if rank == 0:  # verl's checkpoint manager writes this beside the rank files
        config = {"FSDP_version": 2, "world_size": WORLD}
        (actor / "fsdp_config.json").write_text(json.dumps(config))
    # Megatron-Core torch_dist: DCP of the sharded state dict, common.pt, metadata.json
    iteration = out / "megatron" / f"iter_{MEGATRON_ITER:07d}"
    names = {"embed.weight": "embedding.word_embeddings.weight"}
    names |= {"body.0.weight": "decoder.layers.0.mlp.linear_fc1.weight"}
    names |= {"body.0.bias": "decoder.layers.0.mlp.linear_fc1.bias"}
    names |= {"head.weight": "output_layer.weight", "head.bias": "output_layer.bias"}
    sharded = {names[k]: v for k, v in model.state_dict().items()}
    sharded |= {f"optimizer.state.exp_avg.{names[k]}": v for k, v in _moments(msd, osd).items()}
    # Megatron-Core's order (dist_checkpointing.serialization.save): common.pt by rank 0, the
    # sharded tensors through DCP, metadata.json last, then the tracker
    args = argparse.Namespace(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
    args.world_size, args.ckpt_format, args.iteration = WORLD, "torch_dist", MEGATRON_ITER
    if rank == 0:
        iteration.mkdir(parents=True)
        common = {"args": args, "checkpoint_version": 3.0, "iteration": MEGATRON_ITER}
        common["num_floating_point_operations_so_far"] = 0
        torch.save(common, iteration / "common.pt")
    dist.barrier()
    dcp.save(sharded, checkpoint_id=str(iteration))
    dist.barrier()
    if rank == 0:
        config = {"sharded_backend": "torch_dist", "sharded_backend_version": 1}
        config |= {"common_backend": "torch", "common_backend_version": 1}
        (iteration / "metadata.json").write_text(json.dumps(config))
        (out / "megatron" / "latest_checkpointed_iteration.txt").write_text(str(MEGATRON_ITER))
        (out / "verl" / "latest_checkpointed_iteration.txt").write_text(str(FSDP_STEP))
    full = {k: v.full_tensor() for k, v in model.state_dict().items()}
    if rank == 0:
        _legacy(out, full, args)
        _truth(out, full, names)
    dist.destroy_process_group()


def _moments(msd: dict[str, Any], osd: dict[str, Any]) -> dict[str, Any]:
    return {k: osd["state"][k]["exp_avg"] for k in msd if k in osd["state"]}


def _legacy(out: Path, full: dict[str, Any], args: Any) -> None:
    import torch

    folder = out / "megatron-legacy" / f"iter_{MEGATRON_ITER:07d}" / "mp_rank_00"
    folder.mkdir(parents=True)
    state = {"args": args, "checkpoint_version": 3.0, "iteration": MEGATRON_ITER}
    state["model"] = {"language_model": {k: v.clone() for k, v in full.items()}}
    state["optimizer"] = {"optimizer": {"state": {}, "param_groups": [{"lr": 0.01, "params": []}]}}
    state["rng_state"] = [{"random_rng_state": None, "torch_rng_state": torch.get_rng_state()}]
    torch.save(state, folder / "model_optim_rng.pt")
    tracker = out / "megatron-legacy" / "latest_checkpointed_iteration.txt"
    tracker.write_text(str(MEGATRON_ITER))


def _truth(out: Path, full: dict[str, Any], names: dict[str, str]) -> None:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    step = out / "fsdp" / f"step-{FSDP_STEP}"
    iteration = out / "megatron" / f"iter_{MEGATRON_ITER:07d}"
    truth = {
        "world_size": WORLD,
        "model": {k: [list(v.shape), str(v.dtype).removeprefix("torch.")] for k, v in full.items()},
        "megatron_names": names,
        "model_bytes": sum(v.numel() * v.element_size() for v in full.values()),
        "fsdp_step": FSDP_STEP,
        "megatron_iteration": MEGATRON_ITER,
        "references": {"fsdp": f"references/fsdp-step-{FSDP_STEP}.pt"},
    }
    truth["references"]["megatron"] = f"references/megatron-{iteration.name}.pt"
    (out / "references").mkdir()
    (out / TRUTH).write_text(json.dumps(truth, indent=1))
    # after the ranks are done writing (rank 0 alone, once the barrier passed)
    dcp_to_torch_save(str(step), str(out / truth["references"]["fsdp"]))
    dcp_to_torch_save(str(iteration), str(out / truth["references"]["megatron"]))


def write_all(out: Path) -> None:
    import torch  # imported once, before the fork
    import torch.distributed.checkpoint  # noqa: F401
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # forked: the ranks inherit the imported torch (spawn would import it twice more)
    mp.start_processes(_rank, args=(port, out), nprocs=WORLD, join=True, start_method="fork")


def cache_key() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def generate(out: Path) -> Path:
    """Run this script in a child writing into `out` (about 15 s: torch starts three times)."""
    import subprocess

    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", CUDA_VISIBLE_DEVICES="")
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--all", str(out)]
    result = subprocess.run(
        cmd, capture_output=True, text=True, timeout=GENERATE_TIMEOUT_S, env=env
    )
    if result.returncode != 0:
        raise RuntimeError(f"sharded_saves failed:\n{result.stdout}\n{result.stderr}")
    return out


def session_sharded_saves(tmp_path_factory: Any) -> Path:
    """The generated set, made once per session for every xdist worker (read-only for tests)."""
    from tests.support.shared_fixtures import generated_once

    return generated_once(tmp_path_factory, f"sharded-saves-{cache_key()}", generate)


if __name__ == "__main__":
    what, target = sys.argv[1], Path(sys.argv[2])
    if what != "--all":
        raise SystemExit(f"unknown option {what}")
    write_all(target)
