"""Writes the seeds of tests/fuzz_corpus/ with the libraries that write such files for real
(torch, DCP, FSDP2's DTensors, safetensors, TensorBoard, Orbax, TensorFlow). Run by hand when a
reader's input changes; the output is committed (a few KB a file) so CI needs none of the libraries.

    python3 tests/support/fuzz_seeds.py tests/fuzz_corpus
"""

from __future__ import annotations

import io
import json
import sys
import tempfile
import zipfile
from pathlib import Path


def _put(out: Path, target: str, name: str, data: bytes) -> None:
    (out / target).mkdir(parents=True, exist_ok=True)
    (out / target / name).write_bytes(data)


def torch_seeds(out: Path) -> None:
    import torch
    import torch.distributed.checkpoint as dcp

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(1, 3)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    _put(out, "torch_file", "state.pt", buffer.getvalue())
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as archive:
        pickled = next(n for n in archive.namelist() if n.endswith("/data.pkl"))
        _put(out, "pickle", "state.pkl", archive.read(pickled))
    legacy = io.BytesIO()
    torch.save(model.state_dict(), legacy, _use_new_zipfile_serialization=False)
    _put(out, "torch_file", "legacy.pt", legacy.getvalue())
    with tempfile.TemporaryDirectory() as tmp:
        dcp.save(state, checkpoint_id=tmp)
        _put(out, "dcp_metadata", "metadata", Path(tmp, ".metadata").read_bytes())


def safetensors_seeds(out: Path) -> None:
    import numpy as np
    from safetensors.numpy import save

    weights = {"w": np.zeros((2, 3), np.float32), "b": np.ones(2, np.float16)}
    _put(out, "torch_file", "model.safetensors", save(weights, metadata={"format": "pt"}))
    index = {
        "metadata": {"total_size": 28},
        "weight_map": {"w": "a.safetensors", "b": "a.safetensors"},
    }
    _put(out, "safetensors_index", "index.json", json.dumps(index).encode())


def tensorboard_seeds(out: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    with tempfile.TemporaryDirectory() as tmp:
        writer = SummaryWriter(tmp)
        for step in range(3):
            writer.add_scalar("loss", 1.0 / (step + 1), step)
        writer.close()
        events = next(Path(tmp).glob("events.out.tfevents*"))
        _put(out, "tb_events", "events", events.read_bytes())


def json_seeds(out: Path) -> None:
    state = {"global_step": 4, "epoch": 1.0, "best_metric": 0.5, "log_history": [{"loss": 0.7}]}
    _put(out, "json_sidecar", "trainer_state.json", json.dumps(state).encode())
    _put(out, "json_sidecar", "sidecar.json", b'{"epoch": 2, "val_loss": 0.25}')


def orbax_seeds(out: Path) -> None:
    import jax.numpy as jnp
    import orbax.checkpoint as ocp

    with tempfile.TemporaryDirectory() as tmp:
        manager = ocp.CheckpointManager(Path(tmp).resolve())
        manager.save(1, args=ocp.args.StandardSave({"w": jnp.ones((2, 2))}))
        manager.wait_until_finished()
        step = Path(tmp) / "1"
        _put(
            out,
            "orbax_metadata",
            "checkpoint_metadata",
            (step / "_CHECKPOINT_METADATA").read_bytes(),
        )
        item = next(p for p in step.iterdir() if (p / "_METADATA").is_file())
        _put(out, "orbax_metadata", "item_metadata", (item / "_METADATA").read_bytes())


def tf_seeds(out: Path) -> None:
    import tensorflow as tf

    from ckpt_daemon.formats import tensor_bundle, tf_variables

    with tempfile.TemporaryDirectory() as tmp:
        module = tf.Module()
        module.v = tf.Variable([1.0, 2.0])
        prefix = tf.train.Checkpoint(model=module).write(str(Path(tmp, "ckpt")))
        bundle = tensor_bundle.read_bundle(Path(prefix))
        graph = tensor_bundle.string_scalar(bundle, tf_variables.GRAPH_KEY)
        _put(out, "tf_protos", "object_graph", graph)


def rank_file_seeds(out: Path) -> None:
    """One rank's `torch.save` of DTensors (Shard(0), Replicate()) and a plain tensor, as FSDP2
    and verl write per-rank files; a process group of one (gloo)."""
    import os
    import socket

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        torch.manual_seed(0)
        state = {
            "w": distribute_tensor(torch.randn(3, 4), mesh, [Shard(0)]),
            "b": distribute_tensor(torch.randn(4).to(torch.bfloat16), mesh, [Replicate()]),
            "plain": torch.arange(3),
        }
        buffer = io.BytesIO()
        torch.save(state, buffer)
        _put(out, "rank_file", "dtensors-world-1.pt", buffer.getvalue())
    finally:
        dist.destroy_process_group()


def main(out: Path) -> None:
    for writer in (json_seeds, safetensors_seeds, torch_seeds, tensorboard_seeds, orbax_seeds):
        writer(out)
    rank_file_seeds(out)
    tf_seeds(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
