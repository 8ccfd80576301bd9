"""Issue 20 item 11: messages are written, not concatenated: `ckpt split` of a trashed
checkpoint says "only ok checkpoints are split" (not "splited") and how to put it back;
`compress` says "compressed"; `--keep-every 1` keeps "every epoch" (not "every 1 epochs").

Real Keras 3 checkpoints (the k3/run_zip fixture run, three epochs), driven through the CLI.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import ZIP_RUN, Workspace, zip_run


def trashed(ws: Workspace) -> dict:
    ws.run("prune", "--keep-last", "1")
    rows = ws.json("list", "--status", "trashed")
    assert rows, ws.run("list").stdout
    return rows[0]


def test_split_and_compress_of_a_trashed_checkpoint_say_what_they_need(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    ws = zip_run(Workspace(tmp_path), keras_checkpoints)
    row = trashed(ws)
    for command, done in (("split", "split"), ("compress", "compressed")):
        result = ws.run(command, str(row["id"]), check=False)
        assert result.returncode == 2, result.stderr
        said = result.stderr.strip()
        assert "splited" not in said and "compresseded" not in said, said
        assert f"is trashed: only ok checkpoints are {done} " in said, said
        assert f"ckpt trash restore {row['id']}" in said, said
        assert "\n" not in said, said


def test_keep_every_one_keeps_every_epoch(tmp_path: Path, keras_checkpoints: Path) -> None:
    ws = zip_run(Workspace(tmp_path), keras_checkpoints)
    plan = json.loads(
        ws.run("prune", "--run", ZIP_RUN, "--keep-every", "1", "--dry-run", "--json").stdout
    )
    reasons = [r for d in plan["runs"][0]["decisions"] for r in d["reasons"]]
    assert "every epoch" in reasons and not [r for r in reasons if "every 1" in r], reasons
