"""`ckpt plot` where matplotlib (an optional extra) is not installed: one line that says how to
get it, exit 2, no file, and nothing read first. The interpreter is the real one, with a
`matplotlib` on its path that fails to import, as a missing one does."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support import Workspace


def test_plot_without_matplotlib_says_how_to_get_it(workspace: Workspace, tmp_path: Path) -> None:
    shadow = tmp_path / "no-matplotlib" / "matplotlib"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    path = os.pathsep.join([str(shadow.parent), os.environ.get("PYTHONPATH", "")])
    done = workspace.run(
        "plot",
        "--run",
        "exp1",
        "--metric",
        "val_loss",
        "-o",
        "out.png",
        check=False,
        env={"PYTHONPATH": path},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "ckpt: error: ckpt plot needs matplotlib: pip install 'ckpt-daemon[plot]'"
    ], done.stderr
    assert done.stdout == "" and not (workspace.base / "out.png").exists()
