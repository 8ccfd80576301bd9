"""core.metric_names: the metrics people choose checkpoints by (a direction: a loss, an accuracy,
a score) shown unasked; rates, runtimes, counters and HF's TensorBoard copies on request."""

from __future__ import annotations

import pytest

from ckpt_daemon.core.metric_names import default_metrics, has_direction, hf_original

DIRECTED = [
    "loss", "val_loss", "eval_loss", "eval/loss", "Loss/val", "Accuracy/val", "val_acc",
    "eval_accuracy", "train_loss", "eval_f1", "bleu", "rouge1", "perplexity", "val_mae",
]  # fmt: skip
UNDIRECTED = [
    "learning_rate", "lr", "LearningRate", "eval_runtime", "eval/samples_per_second",
    "eval_steps_per_second", "train/total_flos", "total_flos", "grad_norm", "epoch",
    "train/epoch", "train/train_runtime", "step",
]  # fmt: skip


@pytest.mark.parametrize("name", DIRECTED)
def test_losses_accuracies_and_scores_have_a_direction(name: str) -> None:
    assert has_direction(name)


@pytest.mark.parametrize("name", UNDIRECTED)
def test_rates_runtimes_and_counters_have_none(name: str) -> None:
    assert not has_direction(name)


def test_hf_tensorboard_names_map_back_to_what_the_trainer_logged() -> None:
    assert hf_original("eval/loss") == "eval_loss"
    assert hf_original("train/loss") == "loss"
    assert hf_original("test/accuracy") == "test_accuracy"
    assert hf_original("Loss/val") is None and hf_original("loss") is None


def test_an_hf_run_shows_its_losses_and_accuracies_once() -> None:
    present = [
        "eval/accuracy", "eval/loss", "eval/runtime", "eval/samples_per_second",
        "eval_accuracy", "eval_loss", "grad_norm", "learning_rate", "loss", "train/epoch",
        "train/grad_norm", "train/learning_rate", "train/loss", "train/total_flos",
        "train/train_loss", "train/train_runtime",
    ]  # fmt: skip
    assert default_metrics(present) == ["eval_accuracy", "eval_loss", "loss"]
    # A trainer's or retention's monitored metric is shown whatever its name says.
    assert "grad_norm" in default_metrics(present, monitored={"grad_norm"})
    # A PyTorch loop's TensorBoard tags under the names the user wrote.
    assert default_metrics(["Loss/train", "Loss/val", "Accuracy/val", "LearningRate"]) == [
        "Accuracy/val", "Loss/train", "Loss/val",
    ]  # fmt: skip
    assert default_metrics(["train_loss", "val_loss"]) == ["train_loss", "val_loss"]  # Lightning
