"""core.log_alignment: which checkpoint a 0-based log row (or a plain TensorBoard step) is, told
by the checkpoints: their own values first, then their formats, else the Keras rule."""

from __future__ import annotations

from ckpt_daemon.core.log_alignment import KERAS_RULE, Alignment, Evidence, Stream, align

ROWS = {0: {"val_loss": 0.9}, 1: {"val_loss": 0.7}, 2: {"val_loss": 0.3}}


def _ckpt(epoch: int, fmt: str = "torch-zip", **values: float) -> Evidence:
    return Evidence(f"e{epoch}", fmt, epoch, None, values)


def test_a_value_the_file_records_decides_over_its_format() -> None:
    csv = Stream("csv:m.csv", "epochs", ROWS)
    # A torch file that says epoch 3 and holds row 2's val_loss: it counts epochs done.
    found = align([csv], [_ckpt(3, val_loss=0.3), _ckpt(2, val_loss=0.7)])
    assert found.offset == 1 and "values agree" in found.reason, found
    found = align([csv], [_ckpt(2, "keras-v3-zip", val_loss=0.3)])
    assert found.offset == 0 and not found.notes, found


def test_torch_files_count_from_zero_keras_files_by_epochs_done() -> None:
    csv = Stream("csv:m.csv", "epochs", ROWS)
    assert align([csv], [_ckpt(1), _ckpt(2)]).offset == 0
    assert align([csv], [_ckpt(1, "lightning-ckpt")]).offset == 0
    assert align([csv], [_ckpt(1, "keras-v3-zip"), _ckpt(2, "keras-v3-zip")]).offset == KERAS_RULE
    assert align([csv], [_ckpt(0, "hf-folder")]).offset == 0  # epoch 0: not a count of epochs done
    assert align([csv], [_ckpt(1, "hf-folder")]).offset == KERAS_RULE
    # Without logs too: optimizer iterations count epochs done from the first epoch's number.
    assert align([], [_ckpt(1)]).offset == 0
    assert align([], [_ckpt(1, "keras-v3-zip")]) == Alignment(KERAS_RULE, (), "")


def test_a_disagreeing_value_is_a_note_at_the_chosen_row() -> None:
    csv = Stream("csv:m.csv", "epochs", ROWS)
    found = align([csv], [_ckpt(0, val_loss=0.9), _ckpt(1, val_loss=0.7), _ckpt(2, val_loss=0.31)])
    assert found.offset == 0, found
    assert found.notes == (
        "csv:m.csv has val_loss 0.3 at epoch 2, e2 records 0.31: the checkpoint's value is used",
    )


def test_a_plain_tensorboard_stream_is_read_by_what_its_steps_meet() -> None:
    by_epoch = Stream("tensorboard:tb", "steps", {0: {"Loss/val": 0.9}, 1: {"Loss/val": 0.7}})
    found = align([by_epoch], [_ckpt(0), _ckpt(1)])
    assert found.epoch_streams == ("tensorboard:tb",) and found.offset == 0, found
    # HF's: the global step, which the checkpoints record (checkpoint-8, checkpoint-16).
    by_step = Stream("tensorboard:tb", "steps", {4: {"eval/loss": 0.9}, 8: {"eval/loss": 0.7}})
    hf = [Evidence("checkpoint-8", "hf-folder", 1, 8, {}), Evidence("c16", "hf-folder", 2, 16, {})]
    assert align([by_step], hf).epoch_streams == ()
    # A loop logging every batch by global step, its files (SGD) recording no step.
    batches = Stream("tensorboard:tb", "steps", {s: {"Loss/train": 1.0} for s in range(1, 21)})
    assert align([batches], [_ckpt(e) for e in range(5)]).epoch_streams == ()


def test_an_alignment_round_trips_through_the_runs_details() -> None:
    found = Alignment(0, ("tensorboard:tb",), "why")
    assert Alignment.of_json(found.as_json()) == found
    assert Alignment.of_json(None) == Alignment(KERAS_RULE, (), "")
    assert Alignment.of_json({"offset": 7}).offset == KERAS_RULE
