"""Retention on real files: the executor's safety rails, trash, restore, purge, leases."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import ZIP_FILES, ZIP_RUN, Workspace, forked_python, zip_run
from tests.support.browser import web_page

pytestmark = pytest.mark.slow
RUN, FILES = ZIP_RUN, ZIP_FILES


@pytest.fixture
def zips(workspace: Workspace, keras_checkpoints: Path) -> Workspace:
    return zip_run(workspace, keras_checkpoints)


def rows(ws: Workspace) -> dict[str, dict[str, Any]]:
    """Every row by file name: `ckpt list` shows the files on disk, `--status` the others."""
    return {Path(r["path"]).name: r for r in ws.json("list", "--all")}


def prune(ws: Workspace, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return ws.run("prune", "--run", RUN, "--keep-last", "1", *args, check=check)


def test_dry_run_says_why_and_changes_nothing(zips: Workspace) -> None:
    before = sorted(p.name for p in (zips.root / RUN).iterdir())
    doc = json.loads(prune(zips, "--dry-run", "--json").stdout)
    assert doc["dry_run"] is True
    (run,) = doc["runs"]
    actions = {Path(d["path"]).name: (d["action"], d["reasons"]) for d in run["decisions"]}
    assert actions == {
        FILES[0]: ("trash", ["matched no keep rule"]),
        FILES[1]: ("trash", ["matched no keep rule"]),
        FILES[2]: ("keep", ["newest", "last #1"]),
    }
    assert sorted(p.name for p in (zips.root / RUN).iterdir()) == before
    assert all(r["status"] == "ok" for r in rows(zips).values())


def test_prune_trash_restore_purge_round_trip(zips: Workspace) -> None:
    original = (zips.root / RUN / FILES[0]).read_bytes()
    prune(zips)
    assert not (zips.root / RUN / FILES[0]).exists()
    found = rows(zips)
    assert found[FILES[0]]["status"] == "trashed" and found[FILES[2]]["status"] == "ok"
    trashed = {Path(t["path"]).name: t for t in zips.json("trash", "list")}
    assert set(trashed) == {FILES[0], FILES[1]}
    assert all(
        Path(p).exists() and ".ckpt-trash" in p for t in trashed.values() for p in t["paths"]
    )
    zips.run("trash", "restore", str(zips.root / RUN / FILES[0]))
    assert (zips.root / RUN / FILES[0]).read_bytes() == original  # identical bytes
    assert rows(zips)[FILES[0]]["status"] == "ok"
    # The grace period: nothing was trashed a day ago, so a default purge deletes nothing.
    assert zips.json("trash", "purge")["purged"] == []
    assert Path(trashed[FILES[1]]["paths"][0]).exists()
    done = zips.json("trash", "purge", "--older-than", "0s")
    assert [Path(p["path"]).name for p in done["purged"]] == [FILES[1]]
    assert not Path(trashed[FILES[1]]["paths"][0]).exists()
    assert rows(zips)[FILES[1]]["status"] == "purged"
    actions = [e["action"] for e in zips.json("log", "--run", RUN)]
    assert actions.count("trash") == 2 and "restore" in actions and "purge" in actions


def test_pinned_checkpoints_are_never_trashed(zips: Workspace) -> None:
    zips.run("pin", str(zips.root / RUN / FILES[0]))
    prune(zips)
    found = rows(zips)
    assert found[FILES[0]]["status"] == "ok" and found[FILES[0]]["pinned"] is True
    assert found[FILES[1]]["status"] == "trashed"


def test_a_file_modified_after_indexing_is_skipped(zips: Workspace) -> None:
    target = zips.root / RUN / FILES[0]
    with open(target, "ab") as f:
        f.write(b"appended by someone")
    result = prune(zips, "--json", check=False)
    assert result.returncode == 3
    failures = json.loads(result.stdout)["failures"]
    assert [Path(f["path"]).name for f in failures] == [FILES[0]]
    assert "changed since it was indexed" in failures[0]["error"]
    assert target.exists() and rows(zips)[FILES[1]]["status"] == "trashed"


def test_a_file_replaced_by_another_inode_is_skipped(zips: Workspace) -> None:
    target = zips.root / RUN / FILES[0]
    replacement = target.with_name("replacement")
    shutil.copy2(target, replacement)  # same bytes, same mtime: only the inode differs
    os.replace(replacement, target)
    result = prune(zips, "--json", check=False)
    assert result.returncode == 3
    (failure,) = json.loads(result.stdout)["failures"]
    assert "inode" in failure["error"] and target.exists()


def test_symlink_escapes_are_refused(
    zips: Workspace, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("outside")
    victim = outside / FILES[0]
    shutil.copy2(zips.root / RUN / FILES[0], victim)
    # The file itself becomes a link to a file outside the root.
    (zips.root / RUN / FILES[0]).unlink()
    (zips.root / RUN / FILES[0]).symlink_to(victim)
    # And the parent of another catalogued file becomes a link to a folder outside the root.
    other = zips.root / "k3" / "elsewhere"
    other.mkdir()
    shutil.copy2(zips.root / RUN / FILES[1], other / FILES[1])
    zips.run("scan", str(other))
    shutil.move(str(other), str(outside / "moved"))
    other.symlink_to(outside / "moved", target_is_directory=True)
    result = zips.run(
        "prune", "--run", RUN, "--run", "k3", "--keep-last", "1", "--json", check=False
    )
    doc = json.loads(result.stdout)
    errors = " ".join(f["error"] for f in doc["failures"])
    assert "symlink" in errors
    assert victim.exists() and (outside / "moved" / FILES[1]).exists()
    assert (zips.root / RUN / FILES[0]).is_symlink()  # the link itself was not moved either
    trashed = [Path(t["path"]).name for t in zips.json("trash", "list")]
    assert FILES[0] not in trashed and trashed.count(FILES[1]) == 1  # only the real one


def test_trash_across_a_filesystem_boundary_is_kept_in_the_catalog(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    """The run folder is its own (tmpfs) mount: a rename into the root's trash fails (EXDEV),
    so the files stay where they are, trashed in the catalog (a delayed delete,
    usecases.trash_in_place), invisible to `list`, and `trash purge` deletes them there."""
    run = workspace.root / RUN
    run.mkdir(parents=True)
    script = (
        'set -e; mount -t tmpfs ckpt-test "$1"; shift\n'
        'for f in "$@"; do cp -p "$f" "$RUNDIR/"; done\n'
        'ckpt() { "$PY" -m ckpt_daemon --config "$CFG" "$@"; }\n'
        "ckpt scan >/dev/null\n"
        "ckpt prune --run k3/run_zip --keep-last 1 --json; echo '#'\n"
        "ckpt scan >/dev/null; ls \"$RUNDIR\"; echo '#'; ckpt list --json; echo '#'\n"
        "ckpt trash list --json; echo '#'\n"
        'ckpt trash purge --older-than 0 --json >/dev/null; ls "$RUNDIR"\n'
    )
    sources = [str(keras_checkpoints / RUN / name) for name in FILES]
    prefix = (
        ["unshare", "--mount"]
        if os.geteuid() == 0
        else ["unshare", "--user", "--map-root-user", "--mount"]
    )
    env = {**os.environ, "RUNDIR": str(run), "PY": sys.executable, "CFG": str(workspace.config)}
    result = subprocess.run(
        [*prefix, "sh", "-c", script, "sh", str(run), *sources],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    pruned, after_scan, listed, trash, after_purge = result.stdout.split("#\n")
    assert json.loads(pruned)["failures"] == [], pruned
    assert after_scan.split() == FILES  # still at their paths: nothing renamed
    assert [Path(r["path"]).name for r in json.loads(listed)] == [FILES[-1]]
    items = json.loads(trash)
    assert sorted(Path(t["path"]).name for t in items) == FILES[:2]
    for t in items:
        assert t["in_place"] is True and t["paths"] == t["members"] == [t["path"]], t
        assert "EXDEV" in t["why"] and t["due"] > t["at"], t
    assert after_purge.split() == [FILES[-1]]  # deleted where they were
    assert not list((workspace.root / ".ckpt-trash").rglob("*.keras"))


def test_tf_checkpoint_sets_move_as_a_unit_and_the_state_file_stays_valid(
    workspace: Workspace, keras_checkpoints: Path
) -> None:
    shutil.copytree(keras_checkpoints / "k3" / "tfckpt", workspace.root / "tf")
    workspace.run("scan")
    workspace.run("prune", "--run", "tf", "--keep-last", "1")
    left = sorted(p.name for p in (workspace.root / "tf").iterdir())
    assert left == ["checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index"]
    check = (
        "import sys, tensorflow as tf\n"
        "state = tf.train.get_checkpoint_state(sys.argv[1])\n"
        "print(tf.train.latest_checkpoint(sys.argv[1]))\n"
        "print(list(state.all_model_checkpoint_paths))\n"
        "tf.train.load_checkpoint(tf.train.latest_checkpoint(sys.argv[1]))\n"
    )
    out = forked_python.run(  # from the TensorFlow zygote: no import of its own
        [sys.executable, "-c", check, str(workspace.root / "tf")],
        check=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    ).stdout.splitlines()
    assert out[-2] == str(workspace.root / "tf" / "ckpt-2")
    assert out[-1] == f"['{workspace.root / 'tf' / 'ckpt-2'}']"
    trashed = {Path(t["path"]).name: t for t in workspace.json("trash", "list")}
    assert sorted(Path(p).name for p in trashed["ckpt-1"]["paths"]) == [
        "ckpt-1.data-00000-of-00001",
        "ckpt-1.index",
    ]


def test_two_processes_pruning_one_run_one_exits_4(zips: Workspace) -> None:
    import sqlite3

    db = zips.base / "state" / "catalog.db"
    with sqlite3.connect(db) as conn:  # another prune holds the run's lease right now
        run_id = conn.execute("SELECT id FROM runs WHERE name = ?", (RUN,)).fetchone()[0]
        until = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(time.time() + 60))
        conn.execute(
            "INSERT INTO leases (run_id, holder, acquired_at, expires_at)"
            " VALUES (?, 'other@host pid 1', '2026-01-01', ?)",
            (run_id, until),
        )
    result = prune(zips, check=False)
    assert result.returncode == 4 and "other@host" in result.stderr
    assert all(r["status"] == "ok" for r in rows(zips).values())
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM leases")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ckpt_daemon",
                "--config",
                str(zips.config),
                "prune",
                "--run",
                RUN,
                "--keep-last",
                "1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]  # read to the end, pipes closed
    codes = sorted(p.returncode for p in procs)
    assert codes in ([0, 0], [0, 4]), errors
    trash_events = [e for e in zips.json("log", "--run", RUN) if e["action"] == "trash"]
    assert len(trash_events) == 2  # nothing done twice
    assert all(e["state"] == "done" for e in trash_events)


@pytest.mark.parametrize("other_keeps", [1, 2])
def test_a_prune_planned_before_another_one_trashed_its_files_plans_again_under_the_lease(
    zips: Workspace, other_keeps: int
) -> None:
    """The second of two prunes planned before the first took the run's lease: under the
    lease it finds files it planned to trash already trashed, plans again on the rows as they
    are now (what the other left: nothing, or one more), moves only that, counts its progress
    against that, and reports no failure (it was exit 3: a KeyError per vanished row, seen once
    in a run of test_two_processes_pruning_one_run_one_exits_4)."""
    from ckpt_daemon.catalog.store import Store
    from ckpt_daemon.core.progress import Progress
    from ckpt_daemon.core.retention import Policy
    from ckpt_daemon.settings import config as config_module
    from ckpt_daemon.usecases import pruner

    config = config_module.load(str(zips.config))
    store = Store(config.database, named_roots=config.named_roots())
    first: list[subprocess.CompletedProcess[str]] = []
    heard: list[Progress] = []

    def meanwhile() -> bool:  # asked once the plan is made, before the run's lease is taken
        if not first:  # another process prunes the run first, keeping 1 or 2 of the 3
            first.append(zips.run("prune", "--run", RUN, "--keep-last", str(other_keeps)))
        return False

    try:
        report = pruner.prune(
            config, store, runs=[RUN], override=Policy(keep_last=1), actor="second",
            should_stop=meanwhile, on_progress=heard.append,
        )  # fmt: skip
    finally:
        store.close()
    assert first and first[0].returncode == 0, first
    assert report.failures == [] and report.lease_lost == [], report.failures
    [planned] = report.runs
    left = [Path(d.path).name for d in planned.plan.to_trash()]
    assert left == FILES[1:other_keeps]  # the first trashed the oldest 3 - other_keeps
    assert planned.moved == {d.id for d in planned.plan.to_trash()}
    assert [(p.done, p.total) for p in heard if p.outcome] == [(1, 1)] * len(left)
    trash_events = [e for e in zips.json("log", "--run", RUN) if e["action"] == "trash"]
    by_second = [Path(e["path"]).name for e in trash_events if e["actor"] == "second"]
    assert len(trash_events) == 2 and by_second == left
    assert sorted(r["status"] for r in rows(zips).values()) == ["ok", "trashed", "trashed"]


def test_empty_policy_is_refused(zips: Workspace) -> None:
    result = zips.run("prune", check=False)
    assert result.returncode == 2 and "no retention policy" in result.stderr


def test_a_split_killed_before_it_finished_does_not_count_as_demoted(zips: Workspace) -> None:
    """A split killed after registering its artifact (a pending row, no hash) and before the
    rename leaves no artifact: a demotion then writes one before it trashes the full file."""
    from ckpt_daemon.catalog.store import Store
    from ckpt_daemon.settings import config as config_module

    found = rows(zips)
    oldest = zips.root / RUN / FILES[0]
    artifact = oldest.with_name(FILES[0].replace(".keras", ".inference.keras"))
    store = Store(config_module.load(str(zips.config)).database)
    try:  # what the killed split left in the catalog: its row registered, never finished
        store.add_artifact(
            found[FILES[0]]["id"], kind="inference", path=str(artifact), size=0, codec=None,
            digest=None,
        )  # fmt: skip
    finally:
        store.close()
    assert not artifact.exists()
    total = sum(r["size_bytes"] for r in found.values())
    budget = total - found[FILES[0]]["optimizer_bytes"]  # one demotion: the oldest
    zips.run("prune", "--run", RUN, "--keep-last", "3", "--max-bytes", str(budget))
    assert rows(zips)[FILES[0]]["status"] == "trashed"
    assert artifact.exists(), "the full file was trashed with no inference artifact"
    shown = zips.json("show", str(oldest))
    assert [e["action"] for e in shown["events"]][-2:] == ["split", "trash"]


def test_over_budget_demotes_to_inference_artifacts_before_trashing(zips: Workspace) -> None:
    total = sum(r["size_bytes"] for r in rows(zips).values())
    budget = total - 2 * rows(zips)[FILES[0]]["optimizer_bytes"]  # needs two demotions
    doc = json.loads(
        zips.run(
            "prune", "--run", RUN, "--keep-last", "3", "--max-bytes", str(budget), "--json"
        ).stdout
    )
    actions = {Path(d["path"]).name: d["action"] for d in doc["runs"][0]["decisions"]}
    assert actions == {FILES[0]: "demote", FILES[1]: "demote", FILES[2]: "keep"}
    found = rows(zips)
    assert [found[f]["status"] for f in FILES] == ["trashed", "trashed", "ok"]
    for name in FILES[:2]:
        artifact = zips.root / RUN / name.replace(".keras", ".inference.keras")
        assert artifact.exists()
        shown = zips.json("show", str(zips.root / RUN / name))
        assert [a["kind"] for a in shown["artifacts"]] == ["inference", "card"]
        assert artifact.with_name(artifact.name.replace(".keras", ".md")).exists()  # left too
        assert [e["action"] for e in shown["events"]][-2:] == ["split", "trash"]
    assert zips.json("scan")["indexed"] == []  # the artifacts are ours, not new checkpoints
    # The web view marks them demoted (the full file trashed, its inference artifact kept).
    status, doc = web_page(zips.config, "/api/run", run=RUN)
    assert status == 200
    marks = {Path(found[f]["path"]).name: doc["marks"][str(found[f]["id"])] for f in FILES}
    assert [("demoted" in marks[f]["marks"], "trashed" in marks[f]["marks"]) for f in FILES] == [
        (True, True),
        (True, True),
        (False, False),
    ]
    html = web_page(zips.config, "/run", run=RUN)[1]
    rows_marked = re.findall(r'<tr class="checkpoint[^>]*data-marks="([^"]*)"', html)
    assert sorted("demoted" in m.split() for m in rows_marked) == [False, True, True]
    assert html.count('class="ring demoted"') == 2  # on the curve too
