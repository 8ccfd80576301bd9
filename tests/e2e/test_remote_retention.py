"""Remote retention through the CLI and a live daemon, against a real S3 API server on loopback
(moto's server mode, started by the suite): the rules weigh a tiered checkpoint like a local one
(`keep_last 2` keeps two in all), and what they drop of it is its remote copy, moved under the
store's trash prefix by the remote trash's own act (undoable with `ckpt trash restore`, never
the copy of a pinned checkpoint)."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.test_object_storage import (  # the same server, credentials and layout
    RUN,
    _aws_chain,  # noqa: F401  (autouse: the AWS chain's environment)
    objects,
    read,
    remote_workspace,
    s3,  # noqa: F401  (the module's S3 server)
)
from tests.support.daemon import Daemon
from tests.support.s3_server import S3Server

NAMES = ("e01-vl1.683.keras", "e02-vl1.663.keras", "e03-vl1.643.keras")
POLICY = """    retention:
      {keep_last: 2, tier_after: 0s, keep_local: {last: 1}}
completion:"""
SCHEDULE = "service:\n  heartbeat: 1s\nschedule:\n  rescan: 0\n  retention: 1s\n"


def test_retention_gives_up_remote_copies_it_no_longer_keeps_and_the_trash_undoes_it(
    tmp_path: Path,
    s3: S3Server,  # noqa: F811 (the fixture imported above)
    keras_checkpoints: Path,
) -> None:
    ws, bucket, client = remote_workspace(tmp_path, s3, keras_checkpoints)
    ws.config.write_text(ws.config.read_text().replace("completion:", POLICY, 1))
    e01, e02, e03 = (ws.root / RUN / n for n in NAMES)
    original = e01.read_bytes()
    (tiered,) = ws.json("tier", str(e01))["items"]  # by hand: e01 is only in the store now
    key = tiered["remote_url"].removeprefix(f"s3://{bucket}/")
    ws.run("trash", "purge", "--older-than", "0s")  # its local copy gone for good

    # The rules count e01 among the run's checkpoints: e03 and e02 are the last two, so what
    # goes of e01 is its remote copy; e02 tiers (kept, older than tier_after, not kept local).
    (plan,) = ws.json("prune", "--dry-run", "--run", RUN)["runs"]
    decided = {d["path"]: d for d in plan["decisions"]}
    assert [decided[str(p)]["action"] for p in (e01, e02, e03)] == ["trash-remote", "tier", "keep"]
    assert decided[str(e01)]["reasons"] == [
        "matched no keep rule",
        "its remote copy to the store's trash",
    ]
    assert (plan["remote_trashed"], plan["tiered"], plan["trashed"]) == (1, 1, 1)
    text = ws.run("prune", "--dry-run", "--run", RUN).stdout
    assert "1 remote copy to the store's trash" in text and "trash-remote" in text

    # A pin keeps the remote copy, whatever the rules say.
    ws.run("pin", str(e01))
    (pinned,) = ws.json("prune", "--dry-run", "--run", RUN)["runs"]
    kept = {d["path"]: d for d in pinned["decisions"]}[str(e01)]
    assert kept["action"] == "keep" and "pinned" in kept["reasons"]
    assert "in the object store" in kept["reasons"]
    ws.run("unpin", str(e01))

    (done,) = ws.json("prune", "--run", RUN)["runs"]
    assert {d["path"]: d.get("done") for d in done["decisions"]}[str(e01)] is True
    assert done["remote_trashed"] == 1
    stored = objects(client, bucket)
    assert key not in stored
    (trash_key,) = [k for k in stored if k.startswith("team/.ckpt-trash/")]
    assert trash_key.endswith(key.removeprefix("team/"))
    assert {e["action"] for e in ws.json("log", "--run", RUN)} >= {"remote-trash", "tier"}
    given_up = [t for t in ws.json("trash", "list") if t.get("location") == "remote"]
    assert [t["path"] for t in given_up] == [str(e01)]

    # Undo: back at its key, verified, listed as only in the store again.
    ws.run("trash", "restore", str(given_up[0]["id"]))
    assert read(s3, bucket, key) == original and trash_key not in objects(client, bucket)
    remote = {r["path"]: r for r in ws.json("list", "--location", "remote")}
    assert remote[str(e01)]["remote_url"] == tiered["remote_url"] and not e01.exists()

    # A live daemon's retention job gives it up again by itself; e02's remote copy (tiered
    # by the prune) is kept: it is one of the last two; e03, the newest, stays local.
    ws.config.write_text(ws.config.read_text() + SCHEDULE)
    daemon = Daemon(ws)
    try:
        daemon.wait_until(
            lambda: key not in objects(client, bucket),
            120,
            "the retention job giving e01's remote copy up",
        )
    finally:
        assert daemon.stop() == 0, daemon.log
    assert e03.exists()
    where = {r["path"]: r["location"] for r in ws.json("list", "--location", "remote")}
    assert where == {str(e02): "remote"}, where
    (settled,) = ws.json("prune", "--dry-run", "--run", RUN)["runs"]
    assert {d["action"] for d in settled["decisions"]} == {"keep"}, settled
