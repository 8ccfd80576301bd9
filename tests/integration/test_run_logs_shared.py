"""formats.run_logs in folders several runs share: a sibling experiment's log is never this run's
(a text log above the run naming another run's branch is not; one naming none is `shared` by the
runs below it, issue 21), a folder above a single run still gives it every log, and the cost per
run stays flat in the number of known runs (a `RunIndex` built once serves every run of a scan).
From the review of issue 10."""

from __future__ import annotations

import time
from pathlib import Path

from ckpt_daemon.formats.run_index import RunIndex
from ckpt_daemon.formats.run_logs import RunLogs, logs_signature, read_run_logs
from tests.support import keras_csv

PATTERNS = ["training.log", "*.csv", "metrics.json"]  # config.yaml's default


def _csv(path: Path, loss: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(keras_csv([{"epoch": 0, "loss": loss}, {"epoch": 1, "loss": loss / 2}]))


def _run(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "model-01.keras").write_bytes(b"PK")
    return path


def _sources(logs: RunLogs) -> set[str]:
    return {m.source for row in logs.by_epoch.values() for m in row.values()}


def test_a_sibling_experiments_csv_in_the_shared_parent_is_not_this_runs(tmp_path: Path) -> None:
    """The reviewer's case: lr_a/ and lr_b/ beside lr_a.csv and lr_b.csv; run lr_b got lr_a's
    values (csv:lr_a.csv sorts first)."""
    lr_a, lr_b = _run(tmp_path / "lr_a"), _run(tmp_path / "lr_b")
    _csv(tmp_path / "lr_a.csv", 0.9)
    _csv(tmp_path / "lr_b.csv", 0.5)
    logs = read_run_logs(lr_b, tmp_path, PATTERNS, [lr_a])
    assert _sources(logs) == {"csv:lr_b.csv"} and logs.values_at(1) == {"loss": 0.5}
    assert [f.label for f in logs.files] == ["lr_b.csv"] and logs.notes == ()
    assert _sources(read_run_logs(lr_a, tmp_path, PATTERNS, [lr_b])) == {"csv:lr_a.csv"}
    assert [label for label, _, _ in logs_signature(lr_b, tmp_path, PATTERNS, [lr_a])] == [
        "lr_b.csv"
    ]


def test_a_shared_folders_log_names_its_run_or_is_shared(tmp_path: Path) -> None:
    exps = tmp_path / "exps"
    runs = {n: _run(exps / n / "checkpoints") for n in ("lr_b", "lr_b_2", "base", "lonely")}
    _csv(exps / "lr_b_history.csv", 0.5)  # names lr_b (between separators)
    _csv(exps / "lr_b_2.csv", 0.25)  # names lr_b and lr_b_2: the longer name wins
    _csv(exps / "base.log", 0.75)  # sniffed by content, named after base/
    _csv(exps / "training.log", 0.125)  # a configured name naming no run: shared
    _csv(exps / "xbase.csv", 0.0625)  # `base` not between separators: shared
    index = RunIndex(runs.values())

    def sources(name: str) -> set[str]:
        return _sources(read_run_logs(runs[name], tmp_path, PATTERNS, index))

    # A log naming the run's branch beats the shared ones of its folder.
    assert sources("lr_b") == {"csv:exps/lr_b_history.csv"}
    assert sources("lr_b_2") == {"csv:exps/lr_b_2.csv"}
    assert sources("base") == {"csv:exps/base.log"}
    # Issue 21: a log naming no run is every run's below it (whose epochs it covers: derivation).
    lonely = read_run_logs(runs["lonely"], tmp_path, PATTERNS, index)
    assert _sources(lonely) == {"csv:exps/training.log"} and lonely.values_at(1) == {"loss": 0.125}
    assert [(f.label, f.shared) for f in lonely.files] == [
        ("exps/training.log", True),
        ("exps/xbase.csv", True),
    ]
    assert lonely.notes == ()
    # Another experiment's log never is: without the shared ones, lonely has no metrics.
    alone = lonely.without(["exps/training.log", "exps/xbase.csv"])
    assert alone.by_epoch == {} and alone.files == ()


def test_a_shared_folders_log_naming_another_run_is_withheld_with_a_note(tmp_path: Path) -> None:
    exps = tmp_path / "exps"
    runs = {n: _run(exps / n / "checkpoints") for n in ("lr_b", "lonely")}
    _csv(exps / "lr_b_history.csv", 0.5)
    lonely = read_run_logs(runs["lonely"], tmp_path, PATTERNS, RunIndex(runs.values()))
    assert lonely.by_epoch == {} and lonely.files == ()
    assert lonely.notes == (  # one note, and only for the run left without metrics
        "exps/lr_b_history.csv: in a folder shared by several runs and named after another"
        " run's folder, not used",
    )


def test_a_folder_above_a_single_run_gives_it_every_log(tmp_path: Path) -> None:
    """exp/training.log above exp/checkpoints (the e2e exp scenario): unchanged, whatever the
    names, also with the run and the folders above it in the index."""
    run = _run(tmp_path / "exp" / "checkpoints")
    _csv(tmp_path / "exp" / "training.log", 0.5)
    _csv(tmp_path / "whole_root.csv", 0.25)  # the root holds one run too: farther, loses
    for others in ([], RunIndex([run, tmp_path / "exp", tmp_path])):
        logs = read_run_logs(run, tmp_path, PATTERNS, others)
        assert _sources(logs) == {"csv:exp/training.log"}
        assert [f.label for f in logs.files] == ["exp/training.log", "whole_root.csv"]


def test_checkpoints_found_beside_share_the_folder_before_the_run_is_known(tmp_path: Path) -> None:
    """A scan's first pass may settle lr_a before it has met lr_b: lr_b's checkpoints, found
    while looking for event files, make the folder shared for text logs too."""
    lr_a = _run(tmp_path / "lr_a")
    _run(tmp_path / "lr_b")
    _csv(tmp_path / "lr_a.csv", 0.9)
    _csv(tmp_path / "lr_b.csv", 0.5)
    assert _sources(read_run_logs(lr_a, tmp_path, PATTERNS)) == {"csv:lr_a.csv"}
    (tmp_path / "lr_b" / "model-01.keras").unlink()  # no checkpoint, not named: one run here
    assert len(read_run_logs(lr_a, tmp_path, PATTERNS).files) == 2


def test_an_index_answers_as_the_list_of_other_runs_does(tmp_path: Path) -> None:
    runs = [_run(tmp_path / f"g{g}" / f"r{i}") for g in range(3) for i in range(3)]
    nested = _run(runs[0] / "sub")
    for run in (*runs, nested):
        _csv(run / "history.csv", 0.5)
        _csv(run.parent / f"{run.name}.csv", 0.25)
    _csv(tmp_path / "g1.csv", 0.125)
    index = RunIndex([*runs, nested])
    for run in (*runs, nested):
        others = [o for o in (*runs, nested) if o != run and o not in run.parents]
        listed = read_run_logs(run, tmp_path, PATTERNS, others)
        assert read_run_logs(run, tmp_path, PATTERNS, index) == listed
        sig = logs_signature(run, tmp_path, PATTERNS, others)
        assert logs_signature(run, tmp_path, PATTERNS, index) == sig
    assert {f.label for f in read_run_logs(runs[3], tmp_path, PATTERNS, index).files} == {
        "g1/r0/history.csv",
        "g1/r0.csv",
        "g1.csv",
    }


def test_signature_cost_does_not_grow_with_the_number_of_known_runs(tmp_path: Path) -> None:
    """An unchanged rescan calls logs_signature once per run: each call used to test every
    folder it listed against every known run (O(runs^2) a scan, ~10x here). With one RunIndex
    for the scan, a call with 1500 known runs costs what one with 8 does. The run folder holds
    200 subfolders (the listings checked against the runs) and the 1500 runs' parent is listed
    in both cases; CPU time, the best of several interleaved rounds, margin 3x (measured ~1x)."""
    runs = [_run(tmp_path / "exps" / f"r{i}") for i in range(1500)]
    me = runs[7]
    for i in range(200):
        (me / "samples" / f"s{i}").mkdir(parents=True)
    few, crowded = RunIndex(runs[:8]), RunIndex(runs)
    assert logs_signature(me, tmp_path, PATTERNS, few) == logs_signature(
        me, tmp_path, PATTERNS, crowded
    )

    def cost(index: RunIndex) -> float:
        start = time.process_time()
        for _ in range(5):
            logs_signature(me, tmp_path, PATTERNS, index)
        return time.process_time() - start

    rounds = [(cost(few), cost(crowded)) for _ in range(5)]
    alone, full = min(a for a, _ in rounds), min(c for _, c in rounds)
    assert full < 3 * alone + 0.005, rounds
