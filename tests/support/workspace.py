"""The CLI as users run it: a subprocess, a config file, a real SQLite catalog."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from .forked_cli import ckpt_process

TEMPLATES = [
    "e{epoch:02d}-vl{val_loss:.3f}.keras",
    "w.{epoch:02d}.weights.h5",
    "weights.{epoch:02d}-{val_loss:.2f}.hdf5",
    "ckpt-{step}",
    "model.{epoch:02d}-{val_loss:.2f}.keras",  # examples/train_keras.py
]


class Workspace:
    """A root folder, a config file naming it, and a catalog in a state folder beside them."""

    def __init__(self, base: Path, settle_seconds: float = 0) -> None:
        self.base = base
        self.root = base / "runs"
        self.root.mkdir(parents=True, exist_ok=True)
        self.config = base / "config.yaml"
        templates = "".join(f"\n      - {json.dumps(t)}" for t in TEMPLATES)
        self.config.write_text(
            f"state_dir: {base / 'state'}\n"
            f"roots:\n  - path: {self.root}\n    filename_template:{templates}\n"
            f"completion:\n  settle_seconds: {settle_seconds}\n"
        )

    def run(
        self,
        *args: str,
        check: bool = True,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """`ckpt --config CONFIG ARGS` in the workspace's folder (or `cwd`), a process of its
        own (forked from the tests' pre-imported CLI: support/forked_cli.py)."""
        result = ckpt_process(
            ["--config", str(self.config), *args],
            timeout=300,
            env={**os.environ, **(env or {})},
            cwd=cwd or self.base,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
            )
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "--json").stdout)


GENERATED_PARTS = ("k3", "tfk")  # the Keras 3 and the tf-keras halves of the generated set


def copy_generated(ws: Workspace, fixtures: Path) -> Workspace:
    """Every generated Keras/TF checkpoint copied into the workspace's root."""
    for part in GENERATED_PARTS:
        shutil.copytree(fixtures / part, ws.root / part)
    return ws


ZIP_RUN = "k3/run_zip"
ZIP_FILES = ["e01-vl1.683.keras", "e02-vl1.663.keras", "e03-vl1.643.keras"]


def zip_run(ws: Workspace, fixtures: Path, *extra: tuple[str, str]) -> Workspace:
    """The three real epoch checkpoints of k3/run_zip (val_loss falling) copied into the root,
    plus (fixture path, name in the run) `extra` files; scanned."""
    run = ws.root / ZIP_RUN
    run.mkdir(parents=True)
    for name in ZIP_FILES:
        shutil.copy2(fixtures / ZIP_RUN / name, run / name)
    for source, name in extra:
        shutil.copy2(fixtures / source, run / name)
    ws.run("scan")
    return ws


VALUES_OF_BEST = [0.9, 0.4, 0.7]  # val_loss of the generations of `rewritten_best`: 2 is best


def rewritten_best(ws: Workspace, fixtures: Path, generations: int = 3) -> Path:
    """`job/best.keras` rewritten in place `generations` times as Keras's ModelCheckpoint does
    (the same inode, truncated; real Keras 3 `.keras` bytes, each generation distinct), with a
    sidecar of its epoch and val_loss, scanned after each save: the catalog keeps a version of
    each earlier generation (`.ckpt-versions/job/best.vN.keras`)."""
    best = ws.root / "job" / "best.keras"
    best.parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, generations + 1):
        data = (fixtures / ZIP_RUN / ZIP_FILES[(n - 1) % 3]).read_bytes()
        with open(best, "r+b" if best.exists() else "wb") as out:
            out.truncate(0)
            out.write(data + bytes(n))  # zip readers skip the tail
        sidecar = {"epoch": n, "val_loss": VALUES_OF_BEST[(n - 1) % 3]}
        (best.parent / "best.keras.json").write_text(json.dumps(sidecar))
        ws.run("scan")
    return best
