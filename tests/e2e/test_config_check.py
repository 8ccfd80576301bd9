"""`ckpt config check` as users run it: a bad value exits 2 naming its key, the reference file
passes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_config_check_exits_2_with_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("roots: [{path: /a, observer: sometimes}]\n")
    result = subprocess.run(
        [sys.executable, "-m", "ckpt_daemon", "config", "check", str(bad)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "ckpt: error: config: roots[0].observer: 'sometimes' is not one of auto, inotify, polling"
    ]
    good = subprocess.run(
        [sys.executable, "-m", "ckpt_daemon", "config", "check", str(REPO / "config.yaml")],
        capture_output=True,
        text=True,
    )
    assert good.returncode == 0 and good.stdout.startswith("ok: ")
