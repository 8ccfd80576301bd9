"""formats.run_logs on hand-made run folders: which files count as logs, where they are looked
for, and hostile files (symlinks, FIFOs, binary junk, garbage event files) becoming notes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt_daemon.formats.log_discovery import Candidate
from ckpt_daemon.formats.run_logs import _Reader, logs_signature, read_run_logs
from tests.support import keras_csv
from tests.support.event_files import file_version_event, scalar_event, tfrecord

PATTERNS = ["training.log", "*.csv", "metrics.json"]
CSV = keras_csv([{"epoch": 0, "loss": 0.9}, {"epoch": 1, "loss": 0.5}])


def _events(path: Path, *values: tuple[str, int, float]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = tfrecord(file_version_event()) + b"".join(scalar_event(*v) for v in values)
    path.write_bytes(data)


def _sources(logs: object) -> set[str]:
    rows = [*logs.by_epoch.values(), *logs.by_step.values()]  # type: ignore[attr-defined]
    return {m.source for row in rows for m in row.values()}


def test_symlinks_and_fifos_are_never_followed_or_opened(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    run = root / "run"
    run.mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.csv").write_text(CSV)
    (run / "metrics.json").symlink_to(outside / "secret.csv")  # a configured plain name
    (run / "history.txt").symlink_to(outside / "secret.csv")  # a sniffed one
    (run / "logs").symlink_to(outside)  # a symlinked folder is not walked
    _events(outside / "train" / "events.out.tfevents.1.v2", ("epoch_loss", 0, 0.1))
    os.mkfifo(run / "training.log")  # would block a plain open
    os.mkfifo(run / "x.csv")  # matched by a wildcard: left out of the listing
    os.mkfifo(run / "fifo.txt")
    logs = read_run_logs(run, root, PATTERNS)
    assert logs.by_epoch == {} and logs.files == ()
    assert logs.notes == (  # configured plain names are noted; the rest simply passed
        "run/training.log: is a FIFO: not read, ignored",
        "run/metrics.json: is a symlink: not followed, ignored",
    )
    assert [label for label, _, _ in logs_signature(run, root, PATTERNS)] == [
        "run/metrics.json",
        "run/training.log",
    ]


def test_sidecars_metadata_binary_and_other_json_are_not_logs(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "e01.keras").write_bytes(b"PK")
    (run / "e01.keras.json").write_text('[{"epoch": 1, "loss": 0.1}]')
    (run / "training_metadata.json").write_text('{"1": {"loss": 0.2}}')
    (run / "config.json").write_text('{"layers": [1, 2]}')
    (run / "junk.log").write_bytes(b"epoch,loss\n0,0.5\n\x00\x00\x00")
    (run / "history.jsonl").write_text('{"epoch": 1, "loss": 0.3}\n{"step": 9, "loss": 0.35}\n')
    logs = read_run_logs(run, tmp_path, PATTERNS)
    assert logs.values_at(1) == {"loss": 0.3}
    assert logs.by_step[9]["loss"].source == "json:run/history.jsonl"
    assert [(f.label, f.kind, f.epochs) for f in logs.files] == [("run/history.jsonl", "json", 1)]
    assert logs.notes == ()


def test_precedence_json_then_csv_then_tensorboard_within_a_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text('{"epochs": {"1": {"loss": 0.1}}}')
    (run / "log.tsv").write_text(keras_csv([{"epoch": 0, "loss": 0.2, "acc": 0.5}], "\t"))
    _events(
        run / "logs" / "train" / "events.out.tfevents.1.v2",
        ("epoch_loss", 0, 0.3),
        ("epoch_acc", 0, 0.25),
        ("epoch_lr", 0, 0.5),
    )
    logs = read_run_logs(run, tmp_path, PATTERNS)
    row = logs.by_epoch[1]
    assert (row["loss"].value, row["loss"].source) == (0.1, "json:run/metrics.json")
    assert (row["acc"].value, row["acc"].source) == (0.5, "csv:run/log.tsv")
    assert row["lr"].source == "tensorboard:run/logs/train"
    assert logs.epochs_logged == 1 and len(logs.files) == 3


def test_event_files_four_folders_down_and_not_five(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _events(
        run / "logs/fit/20240101-1200/validation/events.out.tfevents.1.v2", ("epoch_loss", 1, 0.5)
    )
    _events(run / "a/b/c/d/e/events.out.tfevents.1.v2", ("epoch_acc", 0, 0.5))
    logs = read_run_logs(run, tmp_path, PATTERNS)
    assert logs.values_at(2) == {"val_loss": 0.5} and 1 not in logs.by_epoch
    assert _sources(logs) == {"tensorboard:run/logs/fit/20240101-1200/validation"}


def test_newer_session_folder_wins_and_nested_runs_keep_their_logs(tmp_path: Path) -> None:
    run = tmp_path / "exp"
    _events(run / "logs/fit/20240101-1200/train/events.out.tfevents.1.v2", ("epoch_loss", 0, 0.9))
    _events(run / "logs/fit/20240102-0900/train/events.out.tfevents.2.v2", ("epoch_loss", 0, 0.4))
    _events(run / "sub/logs/train/events.out.tfevents.3.v2", ("epoch_loss", 5, 0.1))
    logs = read_run_logs(run, tmp_path, PATTERNS, other_runs=[run / "sub"])
    assert logs.by_epoch[1]["loss"].value == pytest.approx(0.4)
    assert 6 not in logs.by_epoch  # exp/sub is a run of its own


def test_garbage_and_live_event_files_give_notes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    good = tfrecord(file_version_event()) + scalar_event("epoch_loss", 0, 0.5)
    _events(run / "logs/train/events.out.tfevents.1.v2")
    (run / "logs/train/events.out.tfevents.1.v2").write_bytes(
        good + scalar_event("epoch_loss", 1, 0.4)[:-3]
    )
    (run / "logs/validation").mkdir()
    (run / "logs/validation/events.out.tfevents.2.v2").write_bytes(os.urandom(3000))
    logs = read_run_logs(run, tmp_path, PATTERNS)
    assert logs.values_at(1) == {"loss": 0.5}
    assert any("train/events.out.tfevents.1.v2: incomplete record" in n for n in logs.notes)
    assert any("validation/events.out.tfevents.2.v2" in n for n in logs.notes)


def test_configured_patterns_above_the_run_only_name_files_there(tmp_path: Path) -> None:
    root = tmp_path
    (root / "a" / "run").mkdir(parents=True)
    (root / "b").mkdir()
    (root / "b" / "metrics.csv").write_text(keras_csv([{"epoch": 0, "loss": 7.0}]))
    (root / "a" / "metrics.csv").write_text(CSV)
    logs = read_run_logs(root / "a" / "run", root, ["**/*.csv"])
    assert _sources(logs) == {"csv:a/metrics.csv"}  # found by content; b/ never swept
    with pytest.raises(ValueError, match="not beneath"):
        read_run_logs(tmp_path / "elsewhere", root / "a", PATTERNS)


def test_signature_is_stat_only_and_covers_candidates(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("not a log")
    (run / "e01.keras").write_bytes(b"PK")
    _events(run / "logs/train/events.out.tfevents.1.v2", ("epoch_loss", 0, 0.5))
    labels = [label for label, _, _ in logs_signature(run, tmp_path, PATTERNS)]
    assert labels == ["run/logs/train/events.out.tfevents.1.v2", "run/notes.txt"]
    os.chmod(run / "notes.txt", 0)  # stat only: a file we could not read still has a stat
    assert len(logs_signature(run, tmp_path, PATTERNS)) == 2


def test_a_folder_shared_by_several_runs_gives_its_subfolders_logs_to_none(tmp_path: Path) -> None:
    run = tmp_path / "exp_a" / "run"
    run.mkdir(parents=True)
    (run / "e01.keras").write_bytes(b"PK")
    _events(tmp_path / "logs/train/events.out.tfevents.1.v2", ("epoch_loss", 0, 0.5))
    assert read_run_logs(run, tmp_path, PATTERNS).values_at(1) == {"loss": 0.5}  # only run here
    (tmp_path / "exp_b" / "ckpts").mkdir(parents=True)
    (tmp_path / "exp_b" / "ckpts" / "w.weights.h5").write_bytes(b"\x89HDF")  # a run not named
    _events(tmp_path / "events.out.tfevents.2.v2", ("epoch_acc", 0, 0.75))  # directly in it
    logs = read_run_logs(run, tmp_path, PATTERNS)
    assert logs.values_at(1) == {"acc": 0.75}
    assert logs.values_at(1) == read_run_logs(
        run, tmp_path, PATTERNS, [tmp_path / "x/y"]
    ).values_at(1)
    (tmp_path / "exp_b" / "ckpts" / "w.weights.h5").unlink()
    assert read_run_logs(run, tmp_path, PATTERNS).values_at(1) == {"acc": 0.75, "loss": 0.5}
    named = read_run_logs(run, tmp_path, PATTERNS, [tmp_path / "exp_b"])  # named, no ckpt yet
    assert named.values_at(1) == {"acc": 0.75}


def test_backup_and_restore_folders_are_the_runs_housekeeping(tmp_path: Path) -> None:
    exp = tmp_path / "exp"
    (exp / "checkpoints").mkdir(parents=True)
    (exp / "backup").mkdir()
    (exp / "backup" / "latest.weights.h5").write_bytes(b"\x89HDF")
    (exp / "backup" / "training_metadata.json").write_text('{"epoch": 2}')
    (exp / "tf_backup" / "chief").mkdir(parents=True)
    (exp / "tf_backup" / "chief" / "ckpt-1.index").write_bytes(b"x")
    _events(exp / "logs/validation/events.out.tfevents.1.v2", ("epoch_loss", 0, 0.5))
    logs = read_run_logs(exp / "checkpoints", tmp_path, PATTERNS)
    assert logs.values_at(1) == {"val_loss": 0.5}


def test_an_event_file_over_the_limit_keeps_its_first_records(tmp_path: Path) -> None:
    path = tmp_path / "train" / "events.out.tfevents.1.v2"
    _events(path, *(("epoch_loss", e, 0.5) for e in range(20)))
    st = path.stat()
    cand = Candidate(path, "train/f", "tensorboard", 0, st.st_size, st.st_mtime_ns, False)
    reader = _Reader(tmp_path, budget=300)  # a run with 300 bytes left to read
    reader.event_folder(path.parent, 0, [cand])
    assert 0 < len(reader.layers[0].by_epoch) < 20
    assert reader.notes[0] == "train/f: over 300 bytes, only the records before read"
    assert any("incomplete record" in n for n in reader.notes[1:])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=300), min_size=5, max_size=5))
def test_hostile_contents_never_raise(contents: list[bytes]) -> None:
    names = ["training.log", "metrics.json", "h.jsonl", "x.txt", "logs/train/events.out.tfevents.1"]
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        for name, data in zip(names, contents, strict=True):
            (run / name).parent.mkdir(parents=True, exist_ok=True)
            (run / name).write_bytes(b"epoch,loss\n0," + data if name == "x.txt" else data)
        logs = read_run_logs(run, Path(tmp), PATTERNS)
        assert all(isinstance(m.value, float) for r in logs.by_epoch.values() for m in r.values())
        assert len(logs_signature(run, Path(tmp), PATTERNS)) >= 3
