"""core.naming: numbers that are not the training's counters. A session, fold or seed number,
a time stamp or a model family's number is never the epoch or the batch ("no evidence, no
epoch"); a session part is literal within each of its sub-series. The first three tests are the
review's reproductions (branch i10-review)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from ckpt_daemon.core.naming import infer_naming


def test_a_session_number_before_the_epoch_is_not_the_epoch() -> None:
    """A resumed run whose script puts its session in the name (run1_01..05, then run2_06..10)
    once read `run{epoch}_{batch:02d}`: run2_07 as epoch 2, batch 7."""
    names = [f"run1_{e:02d}.keras" for e in range(1, 6)]
    names += [f"run2_{e:02d}.keras" for e in range(6, 11)]
    naming = infer_naming(names)
    assert naming.fields("run2_07.keras").ints == {"epoch": 7}, naming.as_json()
    assert [(s.template, s.members) for s in naming.schemes] == [
        ("run1_{epoch:02d}.keras", 5),
        ("run2_{epoch:02d}.keras", 5),
    ]
    assert any("session part" in line for line in naming.schemes[0].evidence)


def test_a_session_timestamp_before_the_epoch_is_not_the_epoch() -> None:
    """Once epoch 202401020930 (a time stamp), batch 7."""
    names = [f"model_202401011200_{e:02d}.keras" for e in range(1, 6)]
    names += [f"model_202401020930_{e:02d}.keras" for e in range(6, 11)]
    naming = infer_naming(names)
    assert naming.fields("model_202401020930_07.keras").ints == {"epoch": 7}, naming.as_json()


def test_a_fold_number_after_the_epoch_is_not_a_batch() -> None:
    """Once `epoch{epoch:02d}_fold{batch}.keras`: every file a 'mid-epoch checkpoint'."""
    names = [f"epoch{e:02d}_fold{k}.keras" for k in (1, 2, 3) for e in (1, 2, 3)]
    naming = infer_naming(names)
    assert naming.fields("epoch02_fold3.keras").ints == {"epoch": 2}, naming.as_json()
    assert {s.template for s in naming.schemes} == {
        f"epoch{{epoch:02d}}_fold{k}.keras" for k in (1, 2, 3)
    }


def _sessions(pattern: str, spans: Mapping[int, Sequence[int]]) -> list[str]:
    """Names of a run resumed in sessions: `pattern` formatted with s (session) and v (value)."""
    return [pattern.format(s=s, v=v) for s, values in spans.items() for v in values]


FIRST, SECOND = range(1, 6), range(6, 11)
FOLDS = dict.fromkeys((1, 2, 3), (1, 2, 3))
E3 = {"epoch": 3}
STAMPS = (20240101120501, 20240101130501, 20240101140501)


@pytest.mark.parametrize(
    ("names", "probe", "ints"),
    [
        # an unlabelled session counter constant over stretches while the epoch grows
        (_sessions("m_{s}_{v:02d}.h5", {1: FIRST, 2: SECOND}), "m_2_07.h5", {"epoch": 7}),
        # ... and after the epoch
        (_sessions("m_{v:02d}_{s}.h5", {1: FIRST, 2: SECOND}), "m_07_2.h5", {"epoch": 7}),
        # a resumed run that redid epochs 4 and 5: unclear, no scheme, nothing guessed
        (_sessions("m_{s}_{v:02d}.h5", {1: FIRST, 2: range(4, 11)}), "m_2_07.h5", {}),
        # sessions of steps: the step by its spacing, the session literal
        (
            _sessions("run{s}_{v}.h5", {1: (500, 1000, 1500), 2: (2000, 2500)}),
            "run2_2500.h5",
            {"step": 2500},
        ),
        # a labelled seed (bound to its number) before a labelled epoch, or an unlabelled one
        (_sessions("seed{s}-e{v:02d}.keras", {7: FIRST, 42: FIRST}), "seed42-e03.keras", E3),
        (_sessions("{v:02d}_fold{s}.keras", FOLDS), "02_fold3.keras", {"epoch": 2}),
        # a fold number in every name, one name per fold: no sub-series, no scheme
        ([f"e{e:02d}_fold{e}.keras" for e in (1, 2, 3, 4)], "e02_fold2.keras", {"epoch": 2}),
        # a time stamp per file is no step and no epoch
        ([f"model_{t}.keras" for t in STAMPS], f"model_{STAMPS[1]}.keras", {}),
    ],
)
def test_session_parts_and_time_stamps(names: list[str], probe: str, ints: dict[str, int]) -> None:
    naming = infer_naming(names)
    assert naming.fields(probe).ints == ints, naming.as_json()


def test_unlabelled_epoch_and_batch_only_in_save_freq_pattern() -> None:
    """Keras's `batch` is 1-based within the epoch and saves come every N batches, so the first
    save of each epoch is within N of its start: (epoch, batch) then, and nothing otherwise."""
    dividing = [f"w{e:02d}_{b:04d}.h5" for e in (1, 2, 3) for b in (10, 20)]
    shifted = [  # save_freq=10 with 26 steps per epoch: the batches shift from epoch to epoch
        f"w{e:02d}_{b:04d}.h5"
        for e, bs in ((1, (10, 20)), (2, (4, 14, 24)), (3, (8, 18)))
        for b in bs
    ]
    for names in (dividing, shifted):
        naming = infer_naming(names)
        assert naming.schemes[0].template == "w{epoch:02d}_{batch:04d}.h5"
        assert naming.fields(names[3]).ints == {"epoch": 2, "batch": int(names[3][4:8])}
    later = [f"w{e:02d}_{b:04d}.h5" for e in (1, 2, 3) for b in (15, 20)]  # a gap of 5 after 15
    assert infer_naming(later).schemes == ()


@pytest.mark.parametrize(
    "names",
    [
        [f"resnet{k}.keras" for k in (18, 34, 50, 101)],
        [f"resnet{k}.keras" for k in (18, 34, 50)],  # evenly spaced, but off any saving period
        [f"vgg{k}.weights.h5" for k in (11, 13, 16, 19)],
        [f"densenet{k}.h5" for k in (121, 169, 201)],
    ],
)
def test_model_family_numbers_are_not_epochs(names: list[str]) -> None:
    """(c) A number glued to a word that is no epoch label, sparse, not from the first epochs
    and at no saving period, with no logged epochs to confirm it: a model, not an epoch."""
    naming = infer_naming(names)
    assert naming.schemes == (), naming.as_json()
    assert all(naming.fields(n).ints == {} for n in names)
    logged = {e: {"loss": 1 / e} for e in range(1, 202)}  # logs with those epochs: confirmed
    assert infer_naming(names, logged).fields(names[1]).ints.get("epoch") is not None


@pytest.mark.parametrize(
    ("names", "epochs"),
    [
        ([f"w{e}.keras" for e in (1, 2, 5, 9)], [1, 2, 5, 9]),  # save_best_only gaps
        ([f"e{e}.keras" for e in (1, 2, 5, 9)], [1, 2, 5, 9]),  # an epoch label
        ([f"snap{e}.keras" for e in (5, 6, 7)], [5, 6, 7]),  # contiguous (older ones pruned)
        ([f"model{e}.keras" for e in (10, 20, 30)], [10, 20, 30]),  # a saving period
        ([f"resnet-{e}.keras" for e in (3, 77, 140)], [3, 77, 140]),  # a separator: a prefix
    ],
)
def test_glued_numbers_that_still_read_as_epochs(names: list[str], epochs: list[int]) -> None:
    naming = infer_naming(names)
    assert [naming.fields(n).ints.get("epoch") for n in names] == epochs, naming.as_json()
