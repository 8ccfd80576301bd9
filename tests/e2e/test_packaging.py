"""A real, non-editable install, made as the README's "Run as a service" steps make it: a
clean venv under a (temporary) `/opt/ckpt`, `pip install` of the source folder (no system
site-packages, no test extra; dependencies from PyPI), `ckpt` linked into a `/usr/local/bin`.
It works from an empty folder and through the link alone, its wheel holds the package, and it
installs beside PyPI's `python-daemon` (import name `daemon`) without breaking it.

The wheel and the venv are made once per test session (about a minute with a warm pip cache).
They need PyPI: without it the test fails and says so, it is never skipped."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
# What the wheel is built from (a copy: building in the repository would leave build/ there).
SOURCES = ("pyproject.toml", "README.md", "config.yaml", "daemon", "migrations")
NETWORK_TROUBLE = re.compile(
    r"NewConnectionError|Temporary failure in name resolution|Name or service not known|"
    r"ConnectTimeout|ReadTimeout|Network is unreachable|No matching distribution found|"
    r"Could not find a version that satisfies"
)
PIP_NETWORK = ("--timeout", "60", "--retries", "2")


def run(cmd: list[str], what: str, *, env: dict[str, str] | None = None) -> str:
    """Run a setup step; fail (never skip) with its output, and say when PyPI was the trouble."""
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if done.returncode != 0:
        output = f"{done.stdout}\n{done.stderr}"
        hint = (
            "PyPI looks unreachable: this test needs the network (setuptools to build the "
            "wheel, the wheel's dependencies and python-daemon come from PyPI)"
            if NETWORK_TROUBLE.search(output)
            else "see its output"
        )
        pytest.fail(f"{what} failed (exit {done.returncode}); {hint}\n{output[-4000:]}", False)
    return str(done.stdout)


@dataclass
class Install:
    wheel: Path
    venv: Path
    home: Path
    seconds: float

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    @property
    def link(self) -> Path:
        """The README's `ln -s /opt/ckpt/bin/ckpt /usr/local/bin/ckpt`, under the test's
        folder."""
        return self.venv.parent.parent / "usr" / "local" / "bin" / "ckpt"

    def env(self) -> dict[str, str]:
        """A user's shell with only this venv: no PYTHONPATH, no CKPT_* or config of ours."""
        keep = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TMPDIR", "TZ")}
        return {**keep, "PATH": f"{self.bin}:/usr/bin:/bin", "HOME": str(self.home)}

    def ckpt(self, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / "ckpt"), *args],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=cwd,
            env=self.env(),
        )

    def python(self, code: str, *, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / "python"), "-c", code],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=cwd,
            env=self.env(),
        )

    def pip(self, *args: str, what: str) -> str:
        # The caller's pip settings (cache, index, proxy, certificates) hold; nothing of ours.
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("CKPT_")
        }
        env["PATH"] = f"{self.bin}:{env.get('PATH', '/usr/bin:/bin')}"
        return run([str(self.bin / "python"), "-m", "pip", *args], what, env=env)


@pytest.fixture(scope="module")
def install(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Install]:
    base = tmp_path_factory.mktemp("packaging")
    started = time.monotonic()
    source = base / "source"
    source.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            # symlinks kept: the packaged default config is a link to the reference one
            shutil.copytree(REPO / name, source / name, symlinks=True)
        else:
            shutil.copy2(REPO / name, source / name)
    # The README's steps: python3 -m venv /opt/ckpt; /opt/ckpt/bin/pip install .; ln -s.
    venv = base / "opt" / "ckpt"
    run([sys.executable, "-m", "venv", str(venv)], "python -m venv")
    found = Install(wheel=base, venv=venv, home=base / "home", seconds=0.0)
    found.home.mkdir()
    found.pip("install", *PIP_NETWORK, str(source), what="pip install of the source folder")
    found.link.parent.mkdir(parents=True)
    found.link.symlink_to(found.bin / "ckpt")
    wheels = base / "wheels"
    found.pip("wheel", *PIP_NETWORK, "--no-deps", "-w", str(wheels), str(source), what="wheel")
    (found.wheel,) = wheels.glob("ckpt_daemon-*.whl")
    found.seconds = time.monotonic() - started
    print(f"\ninstalled into a clean venv and wheel built in {found.seconds:.1f} s")
    yield found


def checkpoint(path: Path) -> Path:
    """A small Keras 3 `.weights.h5` (one Dense layer), written with h5py."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        variables = f.create_group("layers/dense/vars")
        variables.create_dataset("0", data=np.ones((4, 2), "float32"))
        variables.create_dataset("1", data=np.zeros(2, "float32"))
        f.create_group("vars")
    return path


def test_the_wheel_holds_the_package_under_its_own_name(install: Install) -> None:
    with zipfile.ZipFile(install.wheel) as wheel:
        names = wheel.namelist()
        default = wheel.read("ckpt_daemon/settings/default_config.yaml").decode()
        top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        tops = wheel.read(top_level).decode().split()
    assert default == (REPO / "config.yaml").read_text()  # the content, not a dangling link
    assert tops == ["ckpt_daemon"]
    assert {n.split("/")[0] for n in names} == {"ckpt_daemon", Path(top_level).parts[0]}
    assert "ckpt_daemon/migrations/script.py.mako" in names
    assert "ckpt_daemon/migrations/env.py" in names
    versions = {Path(n).name for n in names if n.startswith("ckpt_daemon/migrations/versions/")}
    assert versions == {p.name for p in (REPO / "migrations" / "versions").glob("*.py")}
    shipped = {n for n in names if n.startswith("ckpt_daemon/") and n.endswith(".py")}
    expected = {
        "ckpt_daemon/" + str(p.relative_to(REPO / "daemon"))
        for p in (REPO / "daemon").rglob("*.py")
    }
    assert expected <= shipped  # every module of the package folder is in the wheel


def test_the_venv_is_clean(install: Install, tmp_path: Path) -> None:
    cfg = (install.venv / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in cfg
    probe = install.python(
        "import importlib.util as u, ckpt_daemon, sys; "
        "print(ckpt_daemon.__file__); "
        "print([m for m in ('pytest', 'tensorflow', 'hypothesis', 'daemon', 'migrations') "
        "if u.find_spec(m)])",
        cwd=tmp_path,
    )
    assert probe.returncode == 0, probe.stderr
    where, missing = probe.stdout.splitlines()
    assert Path(where).is_relative_to(install.venv)  # the installed copy, not this repository
    assert missing == "[]"  # no test extra, no system packages, no top-level daemon/migrations


def test_a_wheel_install_works_from_an_empty_folder(install: Install, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    version = install.ckpt("--version", cwd=empty)
    assert (version.returncode, version.stdout) == (0, "ckpt, version 0.1.0\n"), version.stderr
    refused = install.ckpt("config", "check", cwd=empty)  # serve would refuse it here too
    assert (refused.returncode, refused.stderr) == (
        2,
        f"ckpt: error: config: roots[0].path: {empty / 'runs'} does not exist: create it or "
        "fix it\n",
    )
    (empty / "runs").mkdir()
    check = install.ckpt("config", "check", cwd=empty)
    assert check.returncode == 0, check.stderr
    assert check.stdout.splitlines()[:2] == [
        "ok: <built-in default>",
        f"  database: sqlite:///{empty / '.ckpt' / 'catalog.db'}",
    ]
    assert list(empty.iterdir()) == [empty / "runs"]  # checking a config writes nothing
    listed = install.ckpt("list", "--json", cwd=empty)  # a read creates no catalog
    assert listed.returncode == 2 and "no catalog at" in listed.stderr, listed.stderr
    assert list(empty.iterdir()) == [empty / "runs"]

    weights = checkpoint(empty / "runs" / "exp1" / "w.03.weights.h5")
    scan = install.ckpt("scan", "--json", cwd=empty)
    assert scan.returncode == 0, scan.stderr
    assert json.loads(scan.stdout)["indexed"] == [str(weights)]
    rows = json.loads(install.ckpt("list", "--json", cwd=empty).stdout)
    assert [(r["path"], r["run"], r["status"]) for r in rows] == [(str(weights), "exp1", "ok")]
    current = install.ckpt("db", "current", cwd=empty)
    assert current.returncode == 0, current.stderr
    assert current.stdout.endswith("(head)\n")


def test_the_service_install_steps_work_through_the_link(install: Install, tmp_path: Path) -> None:
    """The README's system-wide steps after the install: the reference config copied to
    /etc/ckpt and edited (roots, state_dir), checked, and served once, by `ckpt` through the
    /usr/local/bin link alone (the unit's ExecStart=), with no venv on PATH."""
    etc = tmp_path / "etc" / "ckpt" / "config.yaml"
    etc.parent.mkdir(parents=True)
    training, state = tmp_path / "srv" / "training", tmp_path / "var" / "lib" / "ckpt"
    text = (REPO / "config.yaml").read_text()
    assert "\n  - path: ./runs\n" in text and "\nstate_dir: ./.ckpt\n" in text
    etc.write_text(
        text.replace("\n  - path: ./runs\n", f"\n  - path: {training}\n").replace(
            "\nstate_dir: ./.ckpt\n", f"\nstate_dir: {state}\n"
        )
    )
    weights = checkpoint(training / "exp1" / "w.02.weights.h5")
    state.mkdir(parents=True)  # systemd's StateDirectory=
    env = {**install.env(), "PATH": f"{install.link.parent}:/usr/bin:/bin"}

    def ckpt(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(install.link), "--config", str(etc), *args],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env=env,
        )

    assert "serve" in ckpt("--help").stdout
    check = ckpt("config", "check")
    assert (check.returncode, check.stdout.splitlines()[0]) == (0, f"ok: {etc}"), check.stderr
    served = ckpt("serve", "--once")
    assert served.returncode == 0, served.stderr
    rows = json.loads(ckpt("list", "--json").stdout)
    assert [r["path"] for r in rows] == [str(weights)]
    assert (state / "catalog.db").is_file()


def test_it_installs_beside_python_daemon(install: Install, tmp_path: Path) -> None:
    install.pip("install", *PIP_NETWORK, "python-daemon", what="installing python-daemon")
    # ckpt-daemon installed (again) after python-daemon: once the way it broke python-daemon.
    install.pip(
        "install", "--force-reinstall", "--no-deps", str(install.wheel), what="reinstall wheel"
    )
    folder = tmp_path / "work"
    weights = checkpoint(folder / "runs" / "exp1" / "w.05.weights.h5")
    assert install.ckpt("scan", cwd=folder).returncode == 0
    both = install.python(
        "import json, daemon, daemon.daemon, ckpt_daemon\n"
        "from ckpt_daemon.api import open_catalog\n"
        "from importlib.metadata import files\n"
        "context = daemon.DaemonContext(detach_process=False)\n"
        "with open_catalog() as cat:\n"
        "    paths = [c.path for c in cat.list()]\n"
        "owned = {str(f) for f in files('python-daemon')}\n"
        "print(json.dumps({'daemon': daemon.__file__, 'context': type(context).__name__,\n"
        "    'is_open': context.is_open, 'paths': paths,\n"
        "    'owned': 'daemon/__init__.py' in owned}))",
        cwd=folder,
    )
    assert both.returncode == 0, both.stderr
    doc = json.loads(both.stdout)
    assert doc == {
        "daemon": doc["daemon"],
        "context": "DaemonContext",
        "is_open": False,
        "paths": [str(weights)],
        "owned": True,
    }
    assert Path(doc["daemon"]).is_relative_to(install.venv)

    install.pip("uninstall", "-y", "ckpt-daemon", what="uninstalling ckpt-daemon")
    try:
        after = install.python(
            "import importlib.util, daemon, daemon.daemon\n"
            "from importlib.metadata import files\n"
            "context = daemon.DaemonContext(detach_process=False)\n"
            "gone = [str(f) for f in files('python-daemon') if not f.locate().exists()]\n"
            "print(type(context).__name__, importlib.util.find_spec('ckpt_daemon'), gone)",
            cwd=folder,
        )
        assert after.returncode == 0, after.stderr
        assert after.stdout.split(maxsplit=1) == ["DaemonContext", "None []\n"]
        assert not (install.bin / "ckpt").exists()
    finally:  # the venv as the fixture made it, for whatever runs after
        install.pip("install", "--no-deps", str(install.wheel), what="reinstalling the wheel")
