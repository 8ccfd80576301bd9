"""The load child's sandbox (issue 40, item 2): no network, no write outside its temp folder, and
no dependence on who can read the interpreter's files.

- A probe started the way every load probe is (`children.unprivileged.run_probe`, through the
  `children.sandbox` launcher) that tries to write a marker in a world-writable folder outside
  its temp folder, and to connect to a TCP listener on loopback and to a Unix socket by path
  (both of the test's, listening), is refused each, and nothing reaches the listeners.
- The honest loads that dropping to `nobody` broke where Python lives in a private folder
  (this machine's pyenv under /root, made mode 0700 in a private mount namespace: nothing
  outside the test sees it): `split --layout json+h5` of a tf-keras `.h5` and `verify --load`
  of a DCP folder written by `dcp.save`.
- Where the kernel gives no user namespace (user.max_user_namespaces 0, in a user namespace of
  the test's own): `load_sandbox: require` refuses `verify --load` (exit 3, naming the missing
  layer); `warn` loads and says NOT SANDBOXED.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt_daemon.children import unprivileged
from ckpt_daemon.children.sandbox import CONFINED
from tests.support import forked_python
from tests.support.workspace import Workspace

CKPT = Path(sys.executable).with_name("ckpt")  # the console script a user runs
CHILD_ENV = {
    **{k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"},
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "CUDA_VISIBLE_DEVICES": "",
}
TFK_H5 = "tfk/run_h5/weights.01-1.69.hdf5"

# What a hostile load would try: argv marker, TCP port, Unix socket path. One JSON line.
ESCAPES = r"""
import json, os, socket, sys
marker, port, unix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
tried = {}
def attempt(name, act):
    try:
        act()
        tried[name] = "done"
    except OSError as exc:
        tried[name] = type(exc).__name__
def write():
    with open(marker, "w") as f:
        f.write("escaped")
def tcp():
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
def unix_socket():
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(unix)
def staging():
    with open(os.path.join(os.environ["CKPT_LOAD_STAGING"], "mine"), "w") as f:
        f.write("ok")
for name, act in [("write", write), ("tcp", tcp), ("unix", unix_socket), ("staging", staging)]:
    attempt(name, act)
tried["sandbox"] = os.environ.get("CKPT_LOAD_SANDBOX")
print(json.dumps(tried))
"""


@pytest.fixture
def outside() -> Iterator[Path]:
    """A world-writable folder outside any temp folder of the child's."""
    folder = Path(tempfile.mkdtemp(prefix="ckpt-sandbox-outside-"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_load_child_can_neither_write_outside_its_temp_nor_connect(outside: Path) -> None:
    marker = outside / "escaped"
    with (
        socket.socket() as tcp,
        socket.socket(socket.AF_UNIX) as unix,
    ):
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(4)
        unix.bind(str(outside / "listener.sock"))
        unix.listen(4)
        cmd = [sys.executable, "-c", ESCAPES, str(marker), str(tcp.getsockname()[1])]
        result = unprivileged.run_probe([*cmd, str(outside / "listener.sock")], [], 120)
        tcp.setblocking(False)
        unix.setblocking(False)
        for listener in (tcp, unix):
            with pytest.raises(BlockingIOError):  # nothing ever connected
                listener.accept()[0].close()
    assert result == {
        "write": "PermissionError",
        "tcp": "PermissionError",
        "unix": "PermissionError",
        "staging": "done",  # its own temp folder stays writable
        "sandbox": CONFINED,
    }, result
    assert not marker.exists()


def in_private_python(cmd: list[str], keep: Path) -> list[str]:
    """`cmd` in a private mount namespace where the folder at the top of the interpreter's
    prefix (/root for pyenv's) is mode 0700 and holds nothing but the interpreter: only root
    gets in, as on a machine whose Python lives in a private home."""
    prefix = Path(sys.prefix).resolve()
    top = Path(*prefix.parts[:2])
    script = (
        'set -e; keep=$1; top=$2; prefix=$3; shift 3; mount --bind "$prefix" "$keep"; '
        'mount -t tmpfs -o mode=0700,size=64m private "$top"; mkdir -p "$prefix"; '
        'mount --bind "$keep" "$prefix"; exec "$@"'
    )
    mounts = [str(keep), str(top), str(prefix)]
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *mounts, *cmd]


@pytest.fixture
def private_python(tmp_path: Path) -> Iterator[Path]:
    prefix = Path(sys.prefix).resolve()
    if os.geteuid() != 0 or prefix.parts[1] in ("usr", "bin", "lib", "lib64"):
        pytest.skip(
            "makes the interpreter's folder private in a mount namespace: "
            "needs root and an interpreter outside /usr"
        )
    keep = tmp_path / "keep"
    keep.mkdir()
    yield keep


def test_honest_loads_work_where_the_interpreter_is_private(
    workspace: Workspace, keras_checkpoints: Path, async_saves: Path, private_python: Path
) -> None:
    ws = workspace
    source = ws.root / "run" / "weights.01-1.69.hdf5"
    source.parent.mkdir()
    shutil.copy2(keras_checkpoints / TFK_H5, source)
    dcp = shutil.copytree(async_saves / "dcp" / "step-7", ws.root / "dcp" / "step-7")
    ws.run("scan")

    def ckpt(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = in_private_python([str(CKPT), "--config", str(ws.config), *args], private_python)
        return subprocess.run(
            cmd, capture_output=True, text=True, env=CHILD_ENV, cwd=ws.base, timeout=900
        )

    done = ckpt("split", "--layout", "json+h5", "--json", str(source))
    assert done.returncode == 0, done.stdout + done.stderr
    assert Path(json.loads(done.stdout)["config"]).is_file()
    done = ckpt("verify", "--load", "--json", str(dcp))
    assert done.returncode == 0, done.stdout + done.stderr
    (load,) = [v for v in json.loads(done.stdout) if v["detail"].startswith("load")]
    assert load["ok"] and load["detail"].startswith(f"loads with torch (16 arrays, {CONFINED})")


def test_without_user_namespaces_require_refuses_and_warn_says_so(
    workspace: Workspace, tmp_path: Path
) -> None:
    ws = workspace
    pt = ws.root / "run" / "model.pt"
    pt.parent.mkdir()
    made = forked_python.run(
        [sys.executable, "-c", f"import torch; torch.save({{'w': torch.ones(3)}}, {str(pt)!r})"],
        env=CHILD_ENV,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr
    ws.run("scan")
    base = ws.config.read_text()

    def verify_load(mode: str) -> subprocess.CompletedProcess[str]:
        config = tmp_path / f"{mode}.yaml"
        config.write_text(base + f"load_sandbox: {mode}\n")
        command = [str(CKPT), "--config", str(config), "verify", "--load", str(pt)]
        limit = 'echo 0 > /proc/sys/user/max_user_namespaces; exec "$@"'
        return subprocess.run(
            [*["unshare", "--user", "--map-root-user", "sh", "-c", limit, "sh"], *command],
            capture_output=True,
            text=True,
            env=CHILD_ENV,
            cwd=ws.base,
            timeout=600,
        )

    refused = verify_load("require")
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert "not loaded: this kernel cannot sandbox the load child" in refused.stdout
    assert "user.max_user_namespaces" in refused.stdout, refused.stdout
    warned = verify_load("warn")
    assert warned.returncode == 0, warned.stdout + warned.stderr
    assert "loads with torch, weights_only (1 tensors, NOT SANDBOXED (no user and network" in (
        warned.stdout
    ), warned.stdout
    assert "load_unsandboxed" in warned.stderr, warned.stderr  # and a logged warning each time
