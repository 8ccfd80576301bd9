"""The `ckpt` command on a real PostgreSQL catalog (`--db postgresql+psycopg://...`): the daily
commands end to end, and `ckpt db copy` from PostgreSQL to SQLite through the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import ZIP_FILES, ZIP_RUN, Workspace, zip_run
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.slow


def listed(ws: Workspace, url: str) -> dict[str, dict[str, Any]]:
    doc = json.loads(ws.run("--db", url, "list", "--all", "--json").stdout)
    return {Path(r["path"]).name: r for r in doc}


def test_daily_commands_and_a_copy_back_to_sqlite(
    workspace: Workspace, keras_checkpoints: Path, postgres: PostgresServer, tmp_path: Path
) -> None:
    ws = zip_run(workspace, keras_checkpoints)
    url = postgres.fresh_url()  # at head (the migrations on PostgreSQL: test_catalog)
    try:
        ws.run("--db", url, "scan")
        rows = listed(ws, url)
        assert set(rows) == set(ZIP_FILES) and all(r["status"] == "ok" for r in rows.values())
        best = ws.run("--db", url, "best", "--metric", "val_loss").stdout
        assert ZIP_FILES[2] in best  # val_loss 1.643
        plan = json.loads(
            ws.run(
                "--db", url, "prune", "--run", ZIP_RUN, "--keep-last", "1", "--dry-run", "--json"
            ).stdout
        )
        (run,) = plan["runs"]
        assert sorted(d["action"] for d in run["decisions"]) == ["keep", "trash", "trash"]
        ws.run("--db", url, "prune", "--run", ZIP_RUN, "--keep-last", "1")
        assert not (ws.root / ZIP_RUN / ZIP_FILES[0]).exists()
        ws.run("--db", url, "trash", "restore", str(ws.root / ZIP_RUN / ZIP_FILES[0]))
        assert (ws.root / ZIP_RUN / ZIP_FILES[0]).exists()
        shown = json.loads(
            ws.run("--db", url, "show", str(rows[ZIP_FILES[0]]["id"]), "--json").stdout
        )
        assert shown["path"].endswith(ZIP_FILES[0]) and shown["status"] == "ok"
        latest = ws.run("--db", url, "latest", "--run", ZIP_RUN).stdout
        assert ZIP_FILES[2] in latest

        copy = f"sqlite:///{tmp_path / 'copied.db'}"
        out = ws.run("--db", url, "db", "copy", "--to", copy).stdout
        assert out.strip().endswith("verified") and "checkpoints: 3 rows" in out
        copied = listed(ws, copy)  # the same catalog, read from SQLite now
        assert {n: r["status"] for n, r in copied.items()} == {
            ZIP_FILES[0]: "ok",
            ZIP_FILES[1]: "trashed",
            ZIP_FILES[2]: "ok",
        }
        assert {n: r["id"] for n, r in copied.items()} == {n: r["id"] for n, r in rows.items()}
        again = ws.run("--db", url, "db", "copy", "--to", copy, check=False)
        assert again.returncode == 2 and "not empty" in again.stderr, again.stderr
    finally:
        postgres.drop(url)
