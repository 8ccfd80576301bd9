"""Issue 21 ("The first hour"), items 5, 7 and 9: what a new user meets in the first hour.

One catalog of real Keras 3 checkpoints, driven through `ckpt` subprocesses: the three epochs
of k3/run_zip (the first trashed by `ckpt prune`), and `job/best.keras` rewritten in place three
times, so the catalog keeps two versions of it (`.ckpt-versions/job/best.vN.keras`) and a
standby copy of the generation it holds.

- 5: ordinary views (`list`, `history`, prune plans, the Python API's `list()`) show the
  checkpoints themselves, versions folded under their file with a count; `--versions` and
  `--status` show the rest.
- 7: every REF accepts any path form a command prints (root-relative, absolute, relative to
  the working folder), and the human lines print one form: relative to the root.
- 9: a misspelt metric or column is an error naming the ones that exist (exit 2), and a dry
  run always says what it would do.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support import ZIP_FILES, ZIP_RUN, Workspace, rewritten_best, zip_run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path) -> Workspace:
    ws = zip_run(Workspace(tmp_path_factory.mktemp("first-hour")), keras_checkpoints)
    rewritten_best(ws, keras_checkpoints)
    for name in ZIP_FILES:  # the same epochs saved under their own names too
        shutil.copy2(keras_checkpoints / ZIP_RUN / name, ws.root / "job" / name)
    ws.run("scan")
    ws.run("prune", "--run", ZIP_RUN, "--keep-last", "2")  # trashes e01
    return ws


def refused(ws: Workspace, *args: str) -> str:
    done = ws.run(*args, check=False)
    assert done.returncode == 2, (args, done.returncode, done.stdout, done.stderr)
    assert done.stdout == "", done.stdout
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr


# ---- item 5: versions and trashed rows do not crowd the ordinary views ----

VERSIONS = ".ckpt-versions/"


def test_list_shows_the_checkpoints_themselves(ws: Workspace) -> None:
    text = ws.run("list").stdout
    assert VERSIONS not in text, text
    assert ZIP_FILES[0] not in text.split("job/")[0], text  # k3/run_zip's e01 is trashed
    head, *rows = text.splitlines()
    assert "VERSIONS" in head.split(), head
    best_row = next(r for r in rows if r.split()[1] == "job/best.keras")
    assert best_row.split()[-2:] == ["2", "0.7000"], text  # VERSIONS, then val_loss
    rows_json = ws.json("list")
    assert all(r["version_of"] is None and r["status"] != "trashed" for r in rows_json)
    by_path = {r["path"]: r for r in rows_json}
    assert by_path[str(ws.root / "job" / "best.keras")]["versions_kept"] == 2
    assert by_path[str(ws.root / ZIP_RUN / ZIP_FILES[1])]["versions_kept"] == 0
    # --versions and --status show the rest
    with_versions = ws.json("list", "--versions")
    assert sorted(Path(r["path"]).name for r in with_versions if r["version_of"]) == [
        "best.v1.keras",
        "best.v2.keras",
    ]
    trashed = ws.json("list", "--status", "trashed")
    assert [r["path"] for r in trashed] == [str(ws.root / ZIP_RUN / ZIP_FILES[0])]
    assert len(ws.json("list", "--status", "standby")) == 1  # the copy of what best.keras holds


def test_the_python_api_lists_the_checkpoints_themselves(ws: Workspace) -> None:
    from ckpt_daemon.api import open_catalog

    with open_catalog(str(ws.config)) as cat:
        found = cat.list()
        assert all(c.version_of is None and c.status.value != "trashed" for c in found)
        assert {c.path: c.versions_kept for c in found}[str(ws.root / "job" / "best.keras")] == 2
        assert len([c for c in cat.list(versions=True) if c.version_of]) == 2
        assert [c.path for c in cat.list(status="trashed")] == [
            str(ws.root / ZIP_RUN / ZIP_FILES[0])
        ]


def test_the_fast_reads_fold_versions_as_the_store(ws: Workspace) -> None:
    """`ckpt list` reads through sqlite3 (catalog.dbapi_reads), the other commands through the
    Store: one answer, on a catalog with versions, a standby copy and a trashed row."""
    import dataclasses

    from ckpt_daemon.catalog.sqlite_reads import SqliteReads
    from ckpt_daemon.catalog.store import Store
    from ckpt_daemon.core.query import ListQuery
    from ckpt_daemon.settings import config as config_module

    url = config_module.load(str(ws.config)).database
    store, reads = Store(url), SqliteReads.open(url, None)
    assert reads is not None
    try:
        for query in (
            ListQuery(versions=False, off_disk=False),
            ListQuery(versions=False, off_disk=False, run="job", sort="val_loss"),
            ListQuery(status="trashed", off_disk=False),
        ):
            expected = [dataclasses.asdict(c) for c in store.reads.list(query)]
            assert [dataclasses.asdict(c) for c in reads.list(query)] == expected, query
        paths = [c.path for c in store.reads.list(ListQuery())]
        counts = store.reads.version_counts(paths)
        assert reads.version_counts(paths) == counts == {str(ws.root / "job" / "best.keras"): 2}
    finally:
        reads.close()
        store.close()


def test_history_folds_a_version_under_the_epoch_it_doubles(ws: Workspace) -> None:
    text = ws.run("history", "--run", "job").stdout
    # v1 (epoch 1) doubles job/e01: folded and counted; v2 is the run's best: listed
    assert f"{VERSIONS}job/best.v1.keras" not in text, text
    assert f"{VERSIONS}job/best.v2.keras" in text, text
    epoch_1 = next(line for line in text.splitlines() if line.split()[:1] == ["1"])
    assert "+1 version" in epoch_1 and ZIP_FILES[0] in epoch_1, text
    # --json keeps every checkpoint
    doc = ws.json("history", "--run", "job")
    assert len([c for c in doc["checkpoints"] if "version" in c["marks"]]) == 2


def test_a_prune_plan_folds_versions_under_their_file(ws: Workspace) -> None:
    plan = ws.run("prune", "-n", "--run", "job", "--keep-last", "1").stdout
    lines = plan.splitlines()
    assert not [line for line in lines if VERSIONS in line], plan
    at = next(i for i, line in enumerate(lines) if line.split()[1:2] == ["job/best.keras"])
    under = lines[at + 1 : at + 3]
    assert [line.split()[0] for line in under] == ["v1", "v2"], plan
    assert all(line.startswith("      v") for line in under), plan


# ---- item 9: silent typos ----


def test_a_misspelt_where_metric_is_an_error_naming_the_metrics(ws: Workspace) -> None:
    said = refused(ws, "list", "--where", "val_los < 0.5")
    assert "'val_los'" in said and "val_loss" in said
    # the right name still answers
    assert ws.json("list", "--where", "val_loss < 1")


def test_an_unknown_sort_key_is_an_error_naming_columns_and_metrics(ws: Workspace) -> None:
    said = refused(ws, "list", "--sort", "bogus")
    assert "'bogus'" in said and "val_loss" in said and "epoch" in said
    assert ws.run("list", "--sort", "val_loss").returncode == 0
    assert ws.run("list", "--sort", "run").returncode == 0


def test_best_of_a_metric_no_checkpoint_has_names_the_metrics(ws: Workspace) -> None:
    said = refused(ws, "best", "--metric", "val_acc")
    assert "'val_acc'" in said and "val_loss" in said
    # a metric that exists, in a run without it, is still "not found" (exit 6)
    assert ws.run("best", "--metric", "val_loss", "--run", "nothere", check=False).returncode == 6


@pytest.mark.parametrize(
    "args",
    [
        ("list", "--metrics", "val_los"),
        ("list", "--columns", "id,val_los"),
        ("runs", "--metrics", "val_los"),
        ("history", "--run", "job", "--metric", "val_los"),
        ("prune", "--dry-run", "--keep-best", "1", "--metric", "val_los"),
    ],
)
def test_every_metric_option_refuses_a_typo(ws: Workspace, args: tuple[str, ...]) -> None:
    said = refused(ws, *args)
    assert "val_los" in said and "val_loss" in said


@pytest.mark.parametrize(
    ("option", "typo", "known"),
    [
        ("--status", "trashd", "trashed"),
        ("--format", "keras", "keras-v3-zip"),
        ("--kind", "ful", "full"),
    ],
)
def test_a_misspelt_filter_value_names_the_values(
    ws: Workspace, option: str, typo: str, known: str
) -> None:
    said = refused(ws, "list", option, typo)
    assert repr(typo) in said and known in said


def test_every_dry_run_says_what_it_would_do(ws: Workspace) -> None:
    nothing_due = ws.run("trash", "purge", "-n")  # e01 was trashed seconds ago: not due
    assert "nothing to purge" in nothing_due.stdout and "1 " in nothing_due.stdout
    due = ws.run("trash", "purge", "-n", "--older-than", "0s")
    assert f"would purge: {ZIP_RUN}/{ZIP_FILES[0]}" in due.stdout
    plan = ws.run("prune", "-n", "--keep-last", "5")
    assert "would trash" in plan.stdout
    assert (ws.root / ".ckpt-trash").exists()  # the one prune of the fixture
    trashed = ws.json("trash", "list")
    assert [t["path"] for t in trashed] == [str(ws.root / ZIP_RUN / ZIP_FILES[0])]


def test_the_api_refuses_a_misspelt_metric_too(ws: Workspace) -> None:
    from ckpt_daemon.api import open_catalog
    from ckpt_daemon.core.errors import UsageError

    with open_catalog(str(ws.config)) as cat:
        with pytest.raises(UsageError, match="val_loss"):
            cat.list(where=["val_los < 1"])
        assert json.dumps([c.path for c in cat.list(where=["val_loss < 1"])])


# ---- item 7: one printed path form, and every REF takes any printed form ----


def listed_paths(ws: Workspace, *args: str) -> list[str]:
    """The PATH cells of `ckpt list` (piped: nothing cut)."""
    lines = ws.run("list", "--columns", "id,path", *args).stdout.splitlines()
    return [line.split(None, 1)[1] for line in lines[1:]]


def test_a_path_pasted_from_list_is_found_from_any_folder(ws: Workspace) -> None:
    printed = listed_paths(ws)
    assert f"{ZIP_RUN}/{ZIP_FILES[1]}" in printed and "job/best.keras" in printed
    elsewhere = ws.base / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    for cwd in (ws.base, elsewhere, ws.root / "k3"):
        for path in printed:
            shown = ws.json("show", path) if cwd == ws.base else None
            done = ws.run("show", path, "--json", cwd=cwd, check=False)
            assert done.returncode == 0, (cwd, path, done.stderr)
            doc = json.loads(done.stdout)
            assert doc["path"] == str(ws.root / path)
            assert shown is None or shown["id"] == doc["id"]
    # relative to the working folder still works (the README's `ckpt show runs/exp1/...`)
    assert ws.json("show", f"runs/{ZIP_RUN}/{ZIP_FILES[1]}")["path"] == str(
        ws.root / ZIP_RUN / ZIP_FILES[1]
    )
    # and a trashed file (gone from its place) by the form `trash list` prints
    trashed = f"{ZIP_RUN}/{ZIP_FILES[0]}"
    assert ws.json("show", trashed)["status"] == "trashed"


def test_every_line_prints_the_form_list_prints(ws: Workspace) -> None:
    path = f"{ZIP_RUN}/{ZIP_FILES[1]}"
    assert ws.run("pin", path, cwd=ws.root / "k3").stdout == f"pinned: {path}\n"
    assert ws.run("unpin", path).stdout == f"unpinned: {path}\n"
    plan = ws.run("prune", "-n", "--run", ZIP_RUN, "--keep-last", "1").stdout
    assert f"  trash {path}  " in plan, plan
    assert str(ws.root) not in plan, plan
    trash = ws.run("trash", "list").stdout
    assert f"{ZIP_RUN}/{ZIP_FILES[0]}" in trash and str(ws.root) not in trash, trash
    # --json keeps the absolute path (the contract)
    assert ws.json("trash", "list")[0]["path"] == str(ws.root / ZIP_RUN / ZIP_FILES[0])
    # each printed form is a REF again
    for line in plan.splitlines()[1:]:
        if line.startswith("  trash") or line.startswith("  keep"):
            ref = line.split()[1]
            assert ws.run("show", ref, "--json", cwd=ws.base / "elsewhere").returncode == 0
