"""Real asynchronous-save checkpoints: Orbax step folders and torch.distributed.checkpoint (DCP)
folders, written by the real libraries in child processes, with the writer's truth beside them.

Usage (always in a child: the pytest process never imports jax, orbax, keras or torch)::

    python3 tests/support/async_saves.py --keras-orbax OUT   # Keras 3 OrbaxCheckpoint in fit()
    python3 tests/support/async_saves.py --orbax OUT         # CheckpointManager, sync and async
    python3 tests/support/async_saves.py --dcp OUT           # dcp.save and dcp.async_save
    python3 tests/support/async_saves.py --orbax-killed OUT  # SIGKILLs itself mid async save

The set is generated once per content (this file's bytes are the cache key): in
`$CKPT_ASYNC_FIXTURES/<key>` when that variable is set (reused by later sessions), else in the
session's temp folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

TRUTH = "truth.json"
GENERATE_TIMEOUT_S = 600
KERAS_EPOCHS = 3


def _leaves(tree: Any, prefix: tuple[str, ...] = ()) -> dict[str, list[int]]:
    """Every array leaf of a nested dict as {dotted name: shape}."""
    out: dict[str, list[int]] = {}
    for key, value in tree.items():
        path = (*prefix, str(key))
        if isinstance(value, dict):
            out |= _leaves(value, path)
        elif hasattr(value, "shape"):
            out[".".join(path)] = [int(d) for d in value.shape]
    return out


def write_keras_orbax(out: Path) -> None:
    """Keras 3's OrbaxCheckpoint callback in a real fit() (KERAS_BACKEND=jax, set by the parent)."""
    import keras
    import numpy as np

    run = out / "keras-orbax"
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, name="fc1"), keras.layers.Dense(1, name="out")],
        name="tiny",
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    callback = keras.callbacks.OrbaxCheckpoint(str(run), max_to_keep=2, monitor="loss")
    history = model.fit(x, y, epochs=KERAS_EPOCHS, batch_size=8, verbose=0, callbacks=[callback])
    callback.checkpointer.close() if hasattr(callback.checkpointer, "close") else None
    weights = {w.path: list(w.shape) for w in model.weights}
    truth = {
        "steps": sorted(int(p.name) for p in run.iterdir() if p.name.isdigit()),
        "weights": weights,
        "loss": [float(v) for v in history.history["loss"]],
        "n_params": int(model.count_params()),
    }
    (run / TRUTH).write_text(json.dumps(truth, indent=1))


def write_orbax(out: Path) -> None:
    """orbax.checkpoint's CheckpointManager, synchronous and asynchronous, with best_fn metrics."""
    import jax.numpy as jnp
    import numpy as np
    import orbax.checkpoint as ocp

    rng = np.random.default_rng(0)
    state = {
        "params": {
            "dense": {"kernel": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32)},
            "out": {"bias": jnp.zeros((3,), jnp.bfloat16)},
        },
        "opt_state": {"mu": {"dense": {"kernel": jnp.zeros((4, 3), jnp.float32)}}},
        "step": 0,
    }
    losses = {1: 0.5, 2: 0.3, 3: 0.4}
    for mode, use_async in (("orbax-sync", False), ("orbax-async", True)):
        run = out / mode
        options = ocp.CheckpointManagerOptions(
            max_to_keep=2,
            best_fn=lambda m: m["loss"],
            best_mode="min",
            keep_checkpoints_without_metrics=False,
            enable_async_checkpointing=use_async,
        )
        with ocp.CheckpointManager(run.resolve(), options=options) as manager:
            for step, loss in losses.items():
                state["step"] = step
                manager.save(step, args=ocp.args.StandardSave(state), metrics={"loss": loss})
            manager.wait_until_finished()
            best = manager.best_step()
        truth = {
            "steps": sorted(int(p.name) for p in run.iterdir() if p.name.isdigit()),
            "best_step": best,
            "losses": {str(k): v for k, v in losses.items()},
            "leaves": _leaves(state),
            "bytes": {"params.dense.kernel": 48, "params.out.bias": 6},
        }
        (run / TRUTH).write_text(json.dumps(truth, indent=1))


def write_dcp(out: Path) -> None:
    """torch.distributed.checkpoint: save, and async_save where this torch has it."""
    import torch
    import torch.distributed.checkpoint as dcp

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": 7}
    dcp.save(state, checkpoint_id=str(out / "dcp" / "step-7"))
    if hasattr(dcp, "async_save"):
        state["step"] = 8
        dcp.async_save(state, checkpoint_id=str(out / "dcp-async" / "step-8")).result()
    tensors = {f"model.{k}": [list(v.shape), str(v.dtype)] for k, v in model.state_dict().items()}
    truth = {
        "model": tensors,
        "model_bytes": sum(v.numel() * v.element_size() for v in model.state_dict().values()),
        "async": hasattr(dcp, "async_save"),
    }
    (out / "dcp" / TRUTH).write_text(json.dumps(truth, indent=1))


def write_orbax_killed(out: Path) -> None:
    """An async Orbax save of a few MB, and SIGKILL the moment `save()` hands it to the
    background: the step folder is left as its `.orbax-checkpoint-tmp` form."""
    import jax.numpy as jnp
    import orbax.checkpoint as ocp

    state = {"params": {"w": jnp.ones((1024, 1024), jnp.float32)}}
    options = ocp.CheckpointManagerOptions(enable_async_checkpointing=True)
    manager = ocp.CheckpointManager(out.resolve(), options=options)
    manager.save(1, args=ocp.args.StandardSave(state))
    manager.wait_until_finished()
    state["params"]["w"] = state["params"]["w"] * 2
    manager.save(2, args=ocp.args.StandardSave(state))
    # The background thread makes the tmp folder, then writes into it: a kill before its first
    # file leaves nothing to see (seen on a fresh, quiet machine) or an empty folder (once in a
    # CI run; test_async_saves covers that case with a folder of its own), so wait for a file in
    # it, then kill mid-write.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(
        p.is_file() for tmp in out.glob("2.orbax-checkpoint-tmp*") for p in tmp.rglob("*")
    ):
        time.sleep(0.0005)
    os.kill(os.getpid(), signal.SIGKILL)


def cache_key() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def generate(kind: str, out: Path, backend: str | None = None) -> Path:
    """Run this script in a child (`--keras-orbax`, `--orbax`, `--dcp`) writing into `out`."""
    from tests.support import forked_python  # here: this file also runs as a script

    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env |= {"JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3"}
    if backend:
        env["KERAS_BACKEND"] = backend
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), f"--{kind}", str(out)]
    result = forked_python.run(cmd, text=True, timeout=GENERATE_TIMEOUT_S, env=env)
    if result.returncode != 0 and kind != "orbax-killed":
        raise RuntimeError(f"async_saves --{kind} failed:\n{result.stdout}\n{result.stderr}")
    return out


def session_async_saves(tmp_path_factory: Any) -> Path:
    """The generated set: `$CKPT_ASYNC_FIXTURES/<key>` if complete, else written now once for
    every xdist worker of the session (about a minute: jax, orbax, keras and torch start in
    children) and copied there."""
    from tests.support.shared_fixtures import generated_once

    key = cache_key()
    cached = os.environ.get("CKPT_ASYNC_FIXTURES")
    folder = Path(cached) / key if cached else None
    if folder is not None and (folder / "done").is_file():
        return folder
    return generated_once(tmp_path_factory, f"async-saves-{key}", lambda out: _write(out, folder))


def _write(fresh: Path, folder: Path | None) -> None:
    key = cache_key()
    generate("keras-orbax", fresh, backend="jax")
    generate("orbax", fresh)
    generate("dcp", fresh)
    generate("orbax-killed", fresh / "killed")
    (fresh / "done").write_text(key)
    if folder is not None and not folder.exists():
        tmp = folder.with_name(f"{key}.tmp-{os.getpid()}")
        shutil.copytree(fresh, tmp, copy_function=shutil.copy2, symlinks=True)
        os.replace(tmp, folder)


if __name__ == "__main__":
    what, target = sys.argv[1], Path(sys.argv[2])
    writers = {
        "--keras-orbax": write_keras_orbax,
        "--orbax": write_orbax,
        "--dcp": write_dcp,
        "--orbax-killed": write_orbax_killed,
    }
    if what not in writers:
        raise SystemExit(f"unknown option {what}")
    writers[what](target)
