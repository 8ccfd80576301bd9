"""Which metrics a listing shows unasked, and which have a "best" (pure).

People choose a checkpoint by a loss, an accuracy or a score, and by the metric their trainer
monitors; a learning rate, a runtime, samples per second, FLOPs, a gradient norm or an epoch
counter has no better direction, so it has no "best" and is shown only on request
(`ckpt list --metrics all`, `--columns NAME`).

Hugging Face's `TensorBoardCallback` writes each value the Trainer logs a second time under a
TensorBoard name (transformers' `rewrite_logs`): `eval_X` as `eval/X`, `test_X` as `test/X`,
any other `X` as `train/X`. Where the original is in the listing too (from `trainer_state.json`),
the TensorBoard copy is left out of the default columns. The Trainer's end-of-training summary
under its TensorBoard names (`train/train_loss`, the mean over the whole run; `train/total_flos`,
...) describes the run, not a checkpoint: never a default column (a Lightning or Keras
`train_loss` is a metric of its epoch, and is one).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

# Words of a metric name that make it better one way (prefix match: `acc` covers `accuracy`).
_DIRECTED = (
    "loss",
    "acc",
    "auc",
    "precision",
    "recall",
    "f1",
    "error",
    "err",
    "mae",
    "mse",
    "rmse",
    "perplexity",
    "ppl",
    "bleu",
    "rouge",
    "iou",
    "dice",
    "wer",
    "cer",
    "top1",
    "top5",
    "score",
    "exact",
    "matthews",
    "mcc",
    "pearson",
    "spearman",
    "reward",
    "map",
    "psnr",
    "ssim",
    "fid",
)
# Words that make a name a rate, a time, a size or a counter whatever else it says.
_UNDIRECTED = (
    "lr",
    "learning",
    "rate",
    "runtime",
    "time",
    "second",
    "seconds",
    "per",
    "flos",
    "flops",
    "samples",
    "steps",
    "step",
    "epoch",
    "epochs",
    "norm",
    "momentum",
    "accumulation",
    "tokens",
    "memory",
    "mem",
)
HF_SUMMARY = frozenset(
    {
        "train_loss",
        "train_runtime",
        "train_samples_per_second",
        "train_steps_per_second",
        "total_flos",
    }
)
_WORD = re.compile(r"[a-z]+[0-9]*|[0-9]+")


def _words(name: str) -> list[str]:
    return _WORD.findall(name.lower())


def has_direction(name: str) -> bool:
    """Whether a higher or a lower value of `name` is better (a loss, an accuracy, a score),
    as opposed to a rate, a runtime, a count or a norm."""
    words = _words(name)
    if any(w in _UNDIRECTED for w in words):
        return False
    return any(w.startswith(d) for w in words for d in _DIRECTED)


def hf_original(name: str) -> str | None:
    """The name the Trainer logged that HF's TensorBoard callback wrote as `name`, if any."""
    head, sep, rest = name.partition("/")
    if not sep or not rest or "/" in rest:
        return None
    if head in ("eval", "test"):
        return f"{head}_{rest}"
    return rest if head == "train" else None


def default_metrics(present: Iterable[str], monitored: Collection[str] = ()) -> list[str]:
    """The metrics of `present` shown without `--metrics`: those with a direction, except HF's
    TensorBoard copies of a metric present under its own name and the Trainer's run summary;
    and every `monitored` one (a trainer's or retention's metric) that is present."""
    names = set(present)
    out = []
    for name in sorted(names):
        original = hf_original(name)
        if name in monitored:
            out.append(name)
        elif original is not None and original in HF_SUMMARY:
            continue  # `train/train_loss`: the whole run's mean, logged once at its end
        elif original is not None and original in names:
            continue  # the same value under its TensorBoard name
        elif has_direction(name):
            out.append(name)
    return out
