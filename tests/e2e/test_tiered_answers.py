"""A checkpoint in the object store is still a checkpoint (issue 41, item 4): after `ckpt tier`
of a run's best, plain `ckpt list` lists it with its location, `ckpt best` and `ckpt latest`
answer it (its `s3://` URL; `--fetch`: brought back, its local path) and `ckpt runs` names it
the run's best, never a worse local one. Against a real S3 API server on loopback."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.s3_server import CREDENTIALS, S3Server
from tests.support.workspace import ZIP_FILES, ZIP_RUN, Workspace


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    server = S3Server()
    yield server
    server.stop()


def test_a_tiered_best_is_listed_and_answered(
    tmp_path: Path, s3: S3Server, keras_checkpoints: Path
) -> None:
    s3.bucket("ckpt-tiered")
    ws = Workspace(tmp_path)
    ws.config.write_text(
        ws.config.read_text()
        + f"remote:\n  url: s3://ckpt-tiered/team\n  endpoint_url: {s3.url}\n"
        + "  region: us-east-1\n"
    )
    shutil.copytree(keras_checkpoints / ZIP_RUN, ws.root / ZIP_RUN)
    ws.run("scan")
    # val_loss falls: e03 is the best and the newest; e01 the worst.
    best, worse = (str(ws.root / ZIP_RUN / name) for name in (ZIP_FILES[2], ZIP_FILES[1]))
    assert ws.run("best", "--metric", "val_loss").stdout.strip() == best
    url = ws.json("tier", best)["items"][0]["remote_url"]
    assert url.startswith("s3://ckpt-tiered/team/") and not Path(best).exists()

    # Plain `ckpt list`: still there, with where its bytes are (text and JSON).
    rows = {r["path"]: r for r in ws.json("list")}
    assert set(rows) == {str(ws.root / ZIP_RUN / n) for n in ZIP_FILES}
    assert (rows[best]["location"], rows[best]["remote_url"]) == ("remote", url)
    assert rows[worse]["location"] == "local"
    text = ws.run("list").stdout.splitlines()
    assert "LOCATION" in text[0]
    (line,) = [t for t in text if ZIP_FILES[2] in t]
    assert "remote" in line.split()
    assert not [t for t in text if ZIP_FILES[1] in t and "remote" in t.split()]
    # Its row stays out of what plain list leaves out otherwise: --status still selects.
    assert [r["path"] for r in ws.json("list", "--status", "ok")] == [
        str(ws.root / ZIP_RUN / n) for n in ZIP_FILES[:2]
    ]

    # best and latest answer it, never the worse local one.
    assert ws.run("best", "--metric", "val_loss").stdout.strip() == url
    answer = ws.json("best", "--metric", "val_loss", "--run", ZIP_RUN)
    assert (answer["path"], answer["location"], answer["remote_url"]) == (best, "remote", url)
    assert ws.run("latest", "--run", ZIP_RUN).stdout.strip() == url
    (run,) = ws.json("runs")
    assert run["best"]["val_loss"] == best and run["newest"] == best
    assert ZIP_FILES[2] in ws.run("runs").stdout

    # --fetch brings it back (verified) and answers its local path.
    assert ws.run("best", "--metric", "val_loss", "--fetch").stdout.strip() == best
    assert Path(best).is_file()
    assert ws.run("best", "--metric", "val_loss").stdout.strip() == best
