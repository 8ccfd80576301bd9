"""`ckpt config check` as users run it: a bad value exits 2 naming its key, the reference file
passes."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.support.forked_cli import ckpt_process

REPO = Path(__file__).resolve().parents[2]


def test_config_check_exits_2_with_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("roots: [{path: /a, observer: sometimes}]\n")
    result = ckpt_process(["config", "check", str(bad)], timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "ckpt: error: config: roots[0].observer: 'sometimes' is not one of auto, inotify, polling"
    ]
    reference = tmp_path / "reference" / "config.yaml"
    reference.parent.mkdir()
    shutil.copy2(REPO / "config.yaml", reference)
    (reference.parent / "runs").mkdir()  # its root, ./runs beside it
    good = ckpt_process(["config", "check", str(reference)], timeout=120)
    assert good.returncode == 0 and good.stdout.startswith("ok: "), good.stderr


def test_a_missing_root_is_one_clear_error_in_check_and_serve(tmp_path: Path) -> None:
    """The workstation steps' mistake: config.yaml copied unedited to ~/.config/ckpt/, so its
    root is ~/.config/ckpt/runs, which does not exist. `config check` and `serve` (the unit's
    ExecStart, and `--once`) refuse it alike, exit 2 naming the key and the path: the unit does
    not restart it (RestartPreventExitStatus=2), nothing is created, no misleading warning."""
    home = tmp_path / "home"
    folder = home / ".config" / "ckpt"
    folder.mkdir(parents=True)
    config = folder / "config.yaml"
    shutil.copy2(REPO / "config.yaml", config)
    env = {**os.environ, "HOME": str(home)}
    expected = (
        f"ckpt: error: config: roots[0].path: {folder / 'runs'} does not exist (in {config}): "
        "create it or fix it"
    )
    for args in (("config", "check"), ("serve",), ("serve", "--once")):
        done = ckpt_process(["--config", str(config), *args], timeout=120, env=env, cwd=home)
        assert (done.returncode, done.stderr.splitlines()) == (2, [expected]), args
    assert sorted(p.name for p in folder.iterdir()) == ["config.yaml"]  # no catalog made
    (folder / "runs").mkdir()
    for args in (("config", "check"), ("serve", "--once")):
        done = ckpt_process(["--config", str(config), *args], timeout=120, env=env, cwd=home)
        assert done.returncode == 0, (args, done.stderr)
