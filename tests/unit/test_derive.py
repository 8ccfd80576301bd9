"""core.derive: a run's epochs and metrics from all its evidence, and never a guess."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_daemon.core.derive import Logged, Member, Sighting, derive_run
from ckpt_daemon.core.model import MetricValue

SPE = 26  # steps per epoch of the runs below


def _log(epochs: int, mtime_ns: int = 10_000) -> Logged:
    rows = {
        e: {
            "loss": MetricValue("loss", 1.0 / e, "csv:training.log"),
            "val_loss": MetricValue("val_loss", 2.0 / e, "csv:training.log"),
        }
        for e in range(1, epochs + 1)
    }
    return Logged(by_epoch=rows, epochs=epochs, mtime_ns=mtime_ns)


def _member(i: int, name: str, iterations: int | None, mtime_ns: int = 1_000, **kw) -> Member:
    return Member(i, name, kw.pop("hash", f"h{i}"), iterations, mtime_ns, **kw)


def test_steps_per_epoch_from_named_epochs_gives_a_fixed_name_its_epoch() -> None:
    members = [
        _member(1, "model.03.keras", 3 * SPE, name_ints={"epoch": 3}),
        _member(2, "model.04.keras", 4 * SPE, name_ints={"epoch": 4}),
        _member(3, "best.keras", 2 * SPE),
    ]
    out = derive_run(members, _log(5))
    assert out.steps_per_epoch == SPE
    best = out.members[3]
    assert best.epoch == 2
    assert best.epoch_source == f"optimizer iterations ({2 * SPE} / {SPE} steps per epoch)"
    assert {m.name: m.value for m in best.metrics} == {"loss": 0.5, "val_loss": 1.0}


def test_identical_content_gives_the_same_epoch_and_metrics() -> None:
    members = [
        _member(1, "model.05-1.30.keras", None, hash="same", name_ints={"epoch": 5}),
        _member(2, "last.keras", None, hash="same"),
    ]
    out = derive_run(members, _log(5))
    last = out.members[2]
    assert (last.epoch, last.epoch_source) == (5, "same content as model.05-1.30.keras")
    assert {m.name for m in last.metrics} == {"loss", "val_loss"}


def test_best_and_last_after_the_fact_are_resolved_by_the_log_together() -> None:
    # The CSV row of the last epoch was written after both files (ModelCheckpoint first).
    members = [_member(1, "best.keras", 2 * SPE), _member(2, "last.keras", 5 * SPE)]
    out = derive_run(members, _log(5, mtime_ns=5_000))
    assert (out.members[1].epoch, out.members[2].epoch) == (2, 5)


def test_one_fixed_name_alone_is_ambiguous_and_gets_no_epoch() -> None:
    out = derive_run([_member(1, "best.keras", 3 * SPE)], _log(5, mtime_ns=5_000))
    assert out.members[1].epoch is None
    assert out.steps_per_epoch is None
    assert "ambiguous" in out.evidence[0]


def test_generations_seen_live_each_get_the_epoch_of_their_moment() -> None:
    # last.keras seen at each epoch end: the log had e-1 rows and was written before it.
    history = tuple(
        Sighting(e, f"g{e}", e * SPE, 1_000 * e, log_epochs=e - 1 or None, log_before=True)
        for e in range(1, 5)
    )
    member = _member(1, "last.keras", 4 * SPE, mtime_ns=4_000, hash="g4", history=history)
    out = derive_run([member], _log(4, mtime_ns=4_500))
    assert out.steps_per_epoch == SPE
    assert out.members[1].epoch == 4
    assert out.members[1].history_epochs == (1, 2, 3, 4)


def test_iterations_that_restarted_contradict_the_names_and_give_no_epoch() -> None:
    members = [
        _member(1, "e03.keras", 3 * SPE, name_ints={"epoch": 3}),
        _member(2, "e05.keras", 1 * SPE, name_ints={"epoch": 5}),  # a fresh optimizer
        _member(3, "best.keras", 2 * SPE),
    ]
    out = derive_run(members, _log(5))
    assert out.steps_per_epoch is None
    assert out.members[3].epoch is None
    assert out.members[1].epoch == 3  # names still tell their own epochs


def test_mid_epoch_checkpoint_is_not_joined_to_epoch_rows() -> None:
    member = _member(1, "b.e02-b003.keras", None, name_ints={"epoch": 2, "batch": 3})
    out = derive_run([member], _log(3)).members[1]
    assert out.epoch == 2 and out.metrics == ()
    assert "mid-epoch" in out.notes[0]


def test_sidecar_wins_and_filename_values_are_cross_checked() -> None:
    member = _member(
        1,
        "weights.02-1.50.hdf5",
        None,
        name_ints={"epoch": 2},
        name_metrics={"val_loss": "1.50", "acc": "0.91"},
        sidecar_ints={"epoch": 3},
        sidecar_values={"loss": 9.0},
        sidecar_label="sidecar:weights.02-1.50.hdf5.json",
    )
    out = derive_run([member], _log(3)).members[1]
    assert (out.epoch, out.epoch_source) == (3, "sidecar:weights.02-1.50.hdf5.json")
    values = {m.name: (m.value, m.source) for m in out.metrics}
    assert values["loss"] == (9.0, "sidecar:weights.02-1.50.hdf5.json")
    assert values["val_loss"] == (2.0 / 3, "csv:training.log")
    assert values["acc"] == (0.91, "filename")
    assert any("disagrees" in n for n in out.notes)


def test_no_log_and_no_names_means_no_epoch() -> None:
    out = derive_run([_member(1, "best.keras", 130)], Logged())
    assert out.members[1].epoch is None and out.members[1].epoch_source is None


@settings(deadline=None, max_examples=150)
@given(
    spe=st.integers(1, 500),
    epochs=st.lists(st.integers(1, 60), min_size=1, max_size=12, unique=True),
    named=st.data(),
)
def test_an_epoch_from_iterations_is_never_wrong(spe: int, epochs: list[int], named) -> None:
    """Whatever subset of a run's checkpoints carries its epoch in the name, and however the
    log stands, every epoch derived from iterations is the true one (or none)."""
    last = max(epochs)
    members = []
    for i, e in enumerate(epochs):
        with_name = named.draw(st.booleans())
        members.append(
            _member(
                i,
                f"c{i}.keras",
                e * spe,
                mtime_ns=e * 1_000,
                name_ints={"epoch": e} if with_name else {},
            )
        )
    log_mtime = named.draw(st.sampled_from([last * 1_000 - 1, last * 1_000 + 1]))
    out = derive_run(members, _log(last, mtime_ns=log_mtime))
    for i, e in enumerate(epochs):
        assert out.members[i].epoch in (None, e)


def test_a_log_that_names_epoch_and_step_together_gives_save_counter_names_their_epoch() -> None:
    # TF CheckpointManager in a custom loop: `ckpt-N` counts saves; JSON lines carry both keys.
    rows = {
        e: {
            "loss": MetricValue("loss", 1.0 / e, "jsonl:metrics.jsonl"),
            "val_loss": MetricValue("val_loss", 2.0 / e, "jsonl:metrics.jsonl"),
        }
        for e in (1, 2, 3)
    }
    steps = {e * 7: rows[e] for e in (1, 2, 3)}
    logged = Logged(by_epoch=rows, by_step=steps, epochs=3, mtime_ns=10)
    members = [_member(n, f"ckpt-{n}", 7 * n, name_ints={"step": n}) for n in (1, 2, 3)]
    out = derive_run(members, logged)
    assert [out.members[n].epoch for n in (1, 2, 3)] == [1, 2, 3]
    assert out.members[2].epoch_source == "the log's epoch ending at step 14"
    assert out.steps_per_epoch == 7


def test_the_same_values_at_two_epochs_link_no_step() -> None:
    same = {
        "loss": MetricValue("loss", 0.5, "jsonl:m.jsonl"),
        "val_loss": MetricValue("val_loss", 0.6, "jsonl:m.jsonl"),
    }
    logged = Logged(by_epoch={1: same, 2: same}, by_step={4: same}, epochs=2)
    out = derive_run([_member(1, "ckpt-1", 4, name_ints={"step": 1})], logged)
    assert out.members[1].epoch is None


def test_a_name_number_that_is_not_the_optimizers_count_is_not_the_step() -> None:
    member = _member(1, "ckpt-3", 3 * SPE, name_ints={"step": 3})
    out = derive_run([member], Logged()).members[1]
    assert out.step == 3 * SPE
    assert out.notes == (f"step {3 * SPE} from the optimizer; the name's 3 counts saves",)


def test_a_keras_files_step_label_times_the_steps_per_epoch_is_its_epoch() -> None:
    """`ckpt.{epoch:02d}.keras`: ModelCheckpoint names no save counter; 3 x SPE iterations in
    `ckpt.03.keras` makes 3 the epoch, and the log row attaches."""
    scheme = "ckpt.{step:02d}.keras"
    members = [
        _member(n, f"ckpt.{n:02d}.keras", n * SPE, name_ints={"step": n}, name_scheme=scheme)
        for n in (1, 2, 3)
    ]
    out = derive_run(members, _log(3))
    assert [out.members[n].epoch for n in (1, 2, 3)] == [1, 2, 3]
    assert out.members[2].step is None and out.members[2].notes == ()
    assert {m.name: m.value for m in out.members[2].metrics} == {"loss": 0.5, "val_loss": 1.0}
    assert "is the epoch" in out.members[2].epoch_source
    assert out.steps_per_epoch == SPE


def test_a_step_label_stays_a_step_without_one_constant_or_in_a_tf_checkpoint() -> None:
    # The TF CheckpointManager's `ckpt-N` (no Keras suffix) counts saves, even at N x SPE.
    tf = [_member(n, f"ckpt-{n}", n * SPE, name_ints={"step": n}) for n in (1, 2, 3)]
    assert [derive_run(tf, Logged()).members[n].epoch for n in (1, 2, 3)] == [None] * 3
    # Keras files: iterations that are no single multiple of the numbers; a lone file; the
    # number that is the optimizer's count itself (one step per epoch, or a real step).
    odd = [
        _member(n, f"ckpt-{n}.keras", it, name_ints={"step": n})
        for n, it in ((1, SPE), (2, 3 * SPE), (3, 3 * SPE))
    ]
    lone = [_member(1, "ckpt-2.keras", 2 * SPE, name_ints={"step": 2})]
    same = [_member(n, f"step-{n}.keras", n, name_ints={"step": n}) for n in (5, 10)]
    for members in (odd, lone, same):
        out = derive_run(members, Logged())
        assert all(d.epoch is None for d in out.members.values()), members
    note = derive_run(lone, Logged()).members[1].notes
    assert note == (
        f"step {2 * SPE} from the optimizer; the name's 2 is neither the step nor an epoch the"
        " iterations confirm",
    )


def test_tensorboard_validation_values_by_step_link_the_step_to_their_epoch() -> None:
    """Keras's TensorBoard callback: `validation/` holds epoch_* (by epoch, merged with the
    train values) and evaluation_*_vs_iterations (by the step): a subset of the epoch's row."""
    train = {"loss": 1.0, "accuracy": 0.5}
    rows = {
        e: {
            **{k: MetricValue(k, v / e, "tensorboard:logs/train") for k, v in train.items()},
            "val_loss": MetricValue("val_loss", 2.0 / e, "tensorboard:logs/validation"),
            "val_accuracy": MetricValue("val_accuracy", 0.1 * e, "tensorboard:logs/validation"),
        }
        for e in (1, 2, 3)
    }
    steps = {e * 7: {k: rows[e][k] for k in ("val_loss", "val_accuracy")} for e in (1, 2, 3)}
    logged = Logged(by_epoch=rows, by_step=steps, epochs=3, mtime_ns=10)
    members = [_member(n, f"ckpt-{n}", 7 * n, name_ints={"step": n}) for n in (1, 2, 3)]
    out = derive_run(members, logged).members[2]
    assert (out.epoch, out.step) == (2, 14)
    assert {m.name for m in out.metrics} == {"loss", "accuracy", "val_loss", "val_accuracy"}


# ---- reviewed cases: realistic runs where iterations would give a wrong epoch ------------------


def test_fine_tuning_phase_with_a_recompiled_optimizer_gets_no_wrong_epoch() -> None:
    """The transfer-learning recipe: fit epochs 1-5 (model-01..05.keras), `compile()` again (the
    iteration count restarts) and fit 6-10 into last.keras, saved just before the CSV row. Its
    130 iterations are epoch 5's; the pace of the named files says it was written at epoch 10."""
    members = [
        Member(e, f"model-{e:02d}.keras", f"h{e}", e * SPE, 1_000 * e, name_ints={"epoch": e})
        for e in range(1, 6)
    ]
    members.append(Member(10, "last.keras", "h-last", 5 * SPE, 10_000))
    out = derive_run(members, _log(10, mtime_ns=10_005))
    assert out.members[10].epoch is None, out.members[10]
    assert out.members[5].epoch == 5


def test_last_keras_one_epoch_after_the_newest_named_file_keeps_its_epoch() -> None:
    # save_best_only names (epochs 1, 2, 4, 8) + last.keras at epoch 9, one pace later.
    named = [1, 2, 4, 8]
    members = [
        Member(e, f"best-{e:02d}.keras", f"h{e}", e * SPE, 1_000 * e, name_ints={"epoch": e})
        for e in named
    ]
    members.append(Member(9, "last.keras", "h-last", 9 * SPE, 9_000))
    out = derive_run(members, _log(9, mtime_ns=9_005))
    assert out.members[9].epoch == 9


def test_an_optimizer_seen_created_anew_gives_no_epoch_from_iterations() -> None:
    """Resumed from weights only: the daemon saw last.keras at 130 iterations, then at 26. A run
    seen only after the fact, with best.keras and last.keras alone, cannot show this (their
    counts fit a run with fewer steps per epoch just as well): docs/checkpoints.md says so."""
    history = (
        Sighting(1, "g1", 5 * SPE, 5_000, log_epochs=5, log_before=True),
        Sighting(2, "g2", 1 * SPE, 6_000, log_epochs=6, log_before=True),
    )
    members = [
        Member(1, "last.keras", "g2", 1 * SPE, 6_000, history=history),
        Member(2, "best.keras", "hb", 4 * SPE, 4_000),
    ]
    out = derive_run(members, _log(6, mtime_ns=5_990))
    assert out.steps_per_epoch is None
    assert "created anew" in out.evidence[0]
    assert (out.members[1].epoch, out.members[2].epoch) == (None, None)


def test_a_step_record_equal_to_an_epoch_row_by_chance_links_nothing() -> None:
    """Rounded single-metric JSON records: the step-130 loss equals epoch 3's by chance."""
    by_epoch = {
        e: {"loss": MetricValue("loss", v, "json")}
        for e, v in {1: 0.9, 2: 0.7, 3: 0.52, 4: 0.45, 5: 0.4}.items()
    }
    by_step = {
        s: {"loss": MetricValue("loss", v, "json")} for s, v in {100: 0.6, 130: 0.52}.items()
    }
    logged = Logged(by_epoch=by_epoch, by_step=by_step, epochs=5, mtime_ns=1)
    out = derive_run([Member(1, "last.keras", "h", 130, 10)], logged).members[1]
    assert out.epoch != 3 and out.epoch_source != "the log's epoch ending at step 130", out
