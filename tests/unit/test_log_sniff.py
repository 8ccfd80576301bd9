"""core.log_sniff: which files are training logs, from their names and first bytes."""

from __future__ import annotations

import pytest

from ckpt_daemon.core.log_sniff import (
    SNIFF_BYTES,
    csv_log_separator,
    is_json_log_name,
    looks_like_checkpoint,
    parse_json_log,
)
from tests.support import keras_csv

ROWS: list[dict[str, object]] = [
    {"epoch": 0, "loss": 0.9, "val_loss": 0.8},
    {"epoch": 1, "loss": 0.5},  # val_loss missing: CSVLogger writes NA
]


@pytest.mark.parametrize("sep", [",", ";", "\t"])
def test_csvlogger_text_is_recognised_with_its_separator(sep: str) -> None:
    assert csv_log_separator(keras_csv(ROWS, sep).encode(), complete=True) == sep


@pytest.mark.parametrize(
    "text",
    [
        "loss,val_loss\n0.5,0.6\n",  # no epoch column
        "epoch\n0\n1\n",  # no other column
        "epoch,loss\n",  # a header without rows
        "epoch,loss\n0,abc\n",  # a row that is not numbers
        "epoch,loss\n0.5,0.3\n",  # epoch not an integer
        "epoch,loss\n0,0.3,9\n",  # a row of another width
        "name,epoch,city\nann,1,paris\n",
        "just some notes about epoch 3\n",
    ],
)
def test_other_text_is_not_a_csv_log(text: str) -> None:
    assert csv_log_separator(text.encode(), complete=True) is None


def test_binary_and_cut_heads() -> None:
    assert csv_log_separator(b"epoch,loss\n0,0.5\n\x00\x01", complete=True) is None
    assert csv_log_separator("epoch,loss\n0,0.5\n".encode("utf-16"), complete=True) is None
    long = keras_csv([{"epoch": e, "loss": 0.1234567 * e} for e in range(400)]).encode()
    head = long[:SNIFF_BYTES]  # cut mid-row: the partial line is not judged
    assert csv_log_separator(head, complete=False) == ","
    cut_utf8 = "epoch,lossé\n0,0.5\n".encode()
    # a UTF-8 sequence cut at the end of the head is in the partial line, which is dropped
    assert csv_log_separator(cut_utf8 + "é".encode()[:1], complete=False) == ","
    assert csv_log_separator(cut_utf8 + "é".encode()[:1], complete=True) is None
    assert csv_log_separator(b"epoch,loss", complete=False) is None  # not even one line


def test_names() -> None:
    for name in (
        "e01.keras",
        "w.weights.h5",
        "m.hdf5",
        "ckpt-3.index",
        "ckpt-3.data-00000-of-00001",
    ):
        assert looks_like_checkpoint(name)
    for name in ("training.log", "history.txt", "metrics.json", "checkpoint"):
        assert not looks_like_checkpoint(name)
    assert is_json_log_name("metrics.json") and is_json_log_name("train.JSONL")
    assert not is_json_log_name("e01.keras.json")  # a checkpoint's sidecar
    assert not is_json_log_name("w.weights.h5.json")
    assert not is_json_log_name("training_metadata.json")  # BackupAndRestore
    assert not is_json_log_name("history.txt")


def test_json_and_json_lines() -> None:
    by_epoch, by_step, problem = parse_json_log('[{"epoch": 1, "loss": 0.5}]', lines=False)
    assert (by_epoch, by_step, problem) == ({1: {"loss": 0.5}}, {}, None)
    text = '{"epoch": 1, "loss": 0.5}\n{"step": 40, "loss": 0.45}\n{"note": 1}\n{"epoch": 2, "lo'
    by_epoch, by_step, problem = parse_json_log(text, lines=True)
    assert by_epoch == {1: {"loss": 0.5}} and by_step == {40: {"loss": 0.45}}
    assert problem == "1 lines are not JSON, skipped"
    assert parse_json_log("{", lines=False)[2] is not None
    assert parse_json_log("[" * 100_000, lines=False)[:2] == ({}, {})
