"""Adversarial review of issue 10 (core.naming): names whose inferred scheme reads a WRONG
epoch. Every test here FAILS on main at bbb2bfd (reproductions)."""

from __future__ import annotations

from ckpt_daemon.core.naming import infer_naming


def test_a_session_number_before_the_epoch_is_not_the_epoch() -> None:
    """FAILS: `run{epoch}_{batch:02d}.keras`: run2_07 reads epoch 2, batch 7.

    A resumed run whose script puts its session in the name (run1_01..05, then run2_06..10):
    two unlabelled varying integers are given epoch, batch by place alone."""
    names = [f"run1_{e:02d}.keras" for e in range(1, 6)]
    names += [f"run2_{e:02d}.keras" for e in range(6, 11)]
    naming = infer_naming(names)
    got = naming.fields("run2_07.keras").ints
    assert got.get("epoch") in (None, 7), (got, naming.as_json())


def test_a_session_timestamp_before_the_epoch_is_not_the_epoch() -> None:
    """FAILS: epoch 202401020930 (a time stamp), batch 7."""
    names = [f"model_202401011200_{e:02d}.keras" for e in range(1, 6)]
    names += [f"model_202401020930_{e:02d}.keras" for e in range(6, 11)]
    naming = infer_naming(names)
    got = naming.fields("model_202401020930_07.keras").ints
    assert got.get("epoch") in (None, 7), (got, naming.as_json())


def test_a_fold_number_after_the_epoch_is_not_a_batch() -> None:
    """FAILS: `epoch{epoch:02d}_fold{batch}.keras`: the fold is read as a batch, so every file
    is a 'mid-epoch checkpoint' whose epoch rows are never joined and whose step is invented
    from its iterations. Keras writes {batch} only with save_freq=N, and a batch number
    recurs under every epoch while a fold number here is the same under each."""
    names = [f"epoch{e:02d}_fold{k}.keras" for k in (1, 2, 3) for e in (1, 2, 3)]
    naming = infer_naming(names)
    got = naming.fields("epoch02_fold3.keras").ints
    assert "batch" not in got, (got, naming.as_json())
