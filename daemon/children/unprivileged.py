"""What every child that loads a model does before it loads anything.

1. The parent makes a private staging folder (in /dev/shm when it has room, so the copies take
   RAM, never the disk a trainer writes to) and starts the child through the sandbox launcher
   (`children.sandbox`: no network, no write outside that folder; `run_probe`).
2. The child, its libraries imported, copies each file it will load into that folder (`stage`:
   opened without following a symlink), so what it checks is what it loads: a file rewritten
   meanwhile in the root changes nothing.
3. It reads each staged config and refuses what would run the file's code
   (`load_precheck.staged_refusals`).

`confinement` names what the child runs under, for its answer ("sandboxed: ...", or, where
`load_sandbox: warn` let it run without a layer the kernel lacks, "NOT SANDBOXED (...)": the
use cases log a `load_unsandboxed` warning for each such load).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

from .. import python_module
from ..core.errors import Refused, UsageError
from . import protocol, sandbox

STAGING_ENV = "CKPT_LOAD_STAGING"
_SHM = Path("/dev/shm")
_TMP_MARGIN = 1 << 30  # left free on a temp folder that is a disk


def run_probe(
    cmd: list[str],
    paths: list[Path],
    timeout: float,
    settings: Callable[[dict[str, str]], None] | None = None,
    *,
    mode: str = "require",
) -> dict[str, Any]:
    """The parent's side of a load probe: `cmd` run through the sandbox launcher (`mode`:
    `load_sandbox`) with a fresh staging folder for `paths` (its home and temp folder too: the
    only place it can write; removed after), its environment adjusted by `settings`, no stdin,
    killed after `timeout` seconds. The child's last JSON line, or {"error": ...} when it gave
    none (died, timed out, printed no JSON). Refused (not run) when the kernel lacks a layer
    of the sandbox and `mode` is `require`."""
    base = _staging_base(sum(_bytes(p) for p in paths))
    with tempfile.TemporaryDirectory(prefix="ckpt-load-", dir=base) as folder:
        os.chmod(folder, 0o700)
        env = {**os.environ, STAGING_ENV: folder, "HOME": folder, "TMPDIR": folder}
        env["TF_CPP_MIN_LOG_LEVEL"] = "3"
        if settings is not None:
            settings(env)
        try:
            done = subprocess.run(
                [*python_module("children.sandbox"), mode, folder, "--", *cmd],
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
                timeout=timeout,
                env=env,
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:g} s"}
    result = protocol.last_reply(done.stdout)
    if result is None:
        return {"error": done.stderr.strip()[-300:] or f"exit {done.returncode}"}
    if "unsandboxed" in result:
        raise Refused(
            f"not loaded: this kernel cannot sandbox the load child ({result['unsandboxed']});"
            " `load_sandbox: warn` in the config loads without the missing layer"
        )
    return result


def confinement() -> str:
    """The child's side: what it runs under, as the launcher said."""
    return os.environ.get(sandbox.DESCRIPTION_ENV) or f"{sandbox.UNSANDBOXED} (not started by ckpt)"


def torch_weights_only(env: MutableMapping[str, str]) -> None:
    """A torch child's environment (the parent's side sets it, and the child's again on
    `os.environ`): `torch.load` weights-only whatever the caller's environment said (a user's
    TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD would let a pickle run code), one thread."""
    env.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    env.update(TORCH_FORCE_WEIGHTS_ONLY_LOAD="1", OMP_NUM_THREADS="1")


def _bytes(path: Path) -> int:
    """A file's size, or a folder checkpoint's: its regular files, no symlink followed."""
    if not path.is_dir():
        return path.stat().st_size
    total = 0
    for dirpath, _dirs, files in os.walk(path, followlinks=False):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            total += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return total


def _staging_base(need: int) -> str:
    if _SHM.is_dir() and shutil.disk_usage(_SHM).free > need * 2:
        return str(_SHM)
    tmp = tempfile.gettempdir()
    if shutil.disk_usage(tmp).free > need + _TMP_MARGIN:
        return tmp
    raise UsageError(
        f"not loaded: a private copy of {need} bytes fits neither in {_SHM} nor in {tmp}"
    )


def stage(paths: list[str]) -> list[str]:
    """The child's side: a private copy of each file (its suffix kept: Keras dispatches on
    it)."""
    folder = os.environ[STAGING_ENV]
    staged = []
    for i, path in enumerate(paths):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        copy = os.path.join(folder, f"{i}-{os.path.basename(path)}")
        with os.fdopen(fd, "rb") as src, open(copy, "xb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.chmod(copy, 0o400)
        staged.append(copy)
    return staged


def stage_folder(path: str, index: int = 0) -> str:
    """The child's side: a private copy of a folder checkpoint (Orbax step, DCP, an HF folder
    and its inference folder: `index` keeps two apart), its tree kept: regular files and
    folders only, none followed through a symlink."""
    folder = os.environ[STAGING_ENV]
    copy = os.path.join(folder, f"{index}-" + os.path.basename(path.rstrip("/")))
    for dirpath, dirs, files in os.walk(path, followlinks=False):
        target = os.path.normpath(os.path.join(copy, os.path.relpath(dirpath, path)))
        os.mkdir(target, 0o700)
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(dirpath, d))]
        for name in files:
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                fd = os.open(os.path.join(dirpath, name), flags)
            except OSError:  # a symlink (ELOOP) or a file gone meanwhile: not copied
                continue
            with os.fdopen(fd, "rb") as src:
                if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
                    continue
                with open(os.path.join(target, name), "xb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
    return copy
