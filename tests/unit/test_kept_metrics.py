"""`core.kept_metrics`: what a checkpoint's generation keeps when its training log is rewritten
(issue 21: a resumed job's CSVLogger with `append=False`): a recorded logged value is never lost,
a disagreeing later log is noted and not taken, a sidecar still wins, new values are added."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_daemon.core.kept_metrics import as_record, keep_recorded, record_of
from ckpt_daemon.core.model import MetricValue
from ckpt_daemon.core.runs import shared_log_covers

CSV = "csv:exp/history.csv"
M = MetricValue

# (derived now, recorded for the generation, expected (name, value, source), notes that say)
TABLE = [
    # The log no longer holds the epoch: the recorded value stays, with its source.
    ([], {"val_loss": (0.5, CSV)}, [("val_loss", 0.5, CSV)], []),
    # The log says another value: the recorded one, and a note with both.
    (
        [M("val_loss", 0.7, CSV)],
        {"val_loss": (0.5, CSV)},
        [("val_loss", 0.5, CSV)],
        ["exp/history.csv was rewritten: epoch 3 val_loss 0.5 kept", "now says 0.7"],
    ),
    # The same value: nothing to say.
    ([M("val_loss", 0.5, CSV)], {"val_loss": (0.5, CSV)}, [("val_loss", 0.5, CSV)], []),
    # NaN recorded, NaN logged: the same.
    ([M("loss", math.nan, CSV)], {"loss": (math.nan, CSV)}, [("loss", math.nan, CSV)], []),
    # The checkpoint's own sidecar is above any log.
    ([M("val_loss", 0.9, "sidecar")], {"val_loss": (0.5, CSV)}, [("val_loss", 0.9, "sidecar")], []),
    # A value printed in the name is below a log: the recorded log value wins, silently.
    ([M("val_loss", 0.5001, "filename")], {"val_loss": (0.5, CSV)}, [("val_loss", 0.5, CSV)], []),
    # A metric logged since (the row was written after the first derivation): added.
    (
        [M("val_loss", 0.5, CSV), M("loss", 0.4, CSV)],
        {"val_loss": (0.5, CSV)},
        [("loss", 0.4, CSV), ("val_loss", 0.5, CSV)],
        [],
    ),
    # Nothing recorded (a new generation): the log as it is.
    ([M("val_loss", 0.7, CSV)], {}, [("val_loss", 0.7, CSV)], []),
]


def _triples(values: tuple[MetricValue, ...]) -> list[tuple[str, float, str]]:
    return [(m.name, m.value, m.source) for m in values]


@pytest.mark.parametrize(("derived", "recorded", "expected", "says"), TABLE)
def test_kept_metrics_table(
    derived: list[MetricValue],
    recorded: dict[str, tuple[float, str]],
    expected: list[tuple[str, float, str]],
    says: list[str],
) -> None:
    values, notes = keep_recorded(derived, recorded, 3)
    got = _triples(values)
    assert [(n, s) for n, _v, s in got] == [(n, s) for n, _v, s in expected]
    for (_, value, _), (_, want, _) in zip(got, expected, strict=True):
        assert value == want or (math.isnan(value) and math.isnan(want))
    assert len(notes) == (1 if says else 0)
    assert all(word in notes[0] for word in says)


finite = st.floats(allow_nan=False, allow_infinity=False, width=32)
names = st.sampled_from(["loss", "val_loss", "accuracy", "val_accuracy", "lr"])
sources = st.sampled_from([CSV, "json:exp/m.json", "tensorboard:exp/logs", "filename", "sidecar"])


@settings(deadline=None)  # a loaded 2-core machine: no time limit per example
@given(
    st.dictionaries(names, st.tuples(finite, sources)),
    st.dictionaries(names, st.tuples(finite, st.sampled_from([CSV, "tensorboard:exp/logs"]))),
)
def test_a_recorded_log_value_is_never_lost_unless_a_sidecar_says_otherwise(
    now: dict[str, tuple[float, str]], recorded: dict[str, tuple[float, str]]
) -> None:
    derived = [M(name, value, source) for name, (value, source) in now.items()]
    values, notes = keep_recorded(derived, recorded, 5)
    by_name = {m.name: m for m in values}
    assert set(by_name) == set(now) | set(recorded)  # nothing lost, nothing invented
    for name, (value, source) in recorded.items():
        if now.get(name, (0, ""))[1] == "sidecar":
            assert by_name[name].source == "sidecar"
        else:  # the value as recorded (another log saying the same value may name itself)
            assert by_name[name].value == value
            assert by_name[name].source in (source, now.get(name, (0, source))[1])
    for name in set(now) - set(recorded):
        assert (by_name[name].value, by_name[name].source) == now[name]
    disagreeing = [
        n
        for n, (v, s) in recorded.items()
        if n in now and now[n][1] not in ("sidecar", "filename") and now[n][0] != v
    ]
    assert len(notes) == len(disagreeing)


@settings(deadline=None)
@given(st.lists(st.tuples(names, st.floats(width=32), sources), unique_by=lambda t: t[0]))
def test_a_record_round_trips_through_json_keeping_only_logged_values(
    values: list[tuple[str, float, str]],
) -> None:
    record = record_of({"logged": as_record([M(n, v, s) for n, v, s in values])})
    logged = {n: (v, s) for n, v, s in values if s.startswith(("csv:", "json:", "tensorboard:"))}
    assert set(record) == set(logged)
    for name, (value, source) in logged.items():
        kept, kept_source = record[name]
        assert kept_source == source
        assert kept == value or (math.isnan(kept) and not math.isfinite(value))


@pytest.mark.parametrize(
    "entry", [None, {}, {"logged": 3}, {"logged": {"a": [1]}}, {"logged": {"a": ["x", CSV]}}]
)
def test_a_malformed_record_is_no_record(entry: object) -> None:
    assert record_of(entry) == {}  # type: ignore[arg-type]


# (epochs a shared log has rows for, epochs the run's checkpoints name, belongs)
COVERS = [
    (range(1, 11), range(1, 11), True),  # exp/history.csv above exp/ckpt and exp/weights
    (range(8, 11), range(1, 11), True),  # rewritten by the resumed job: it still covers 8-10
    (range(1, 11), [], True),  # a run naming no epoch: nothing contradicts
    (range(1, 4), range(5, 9), False),  # another experiment's log: none of this run's epochs
    ([], range(1, 3), False),
]


@pytest.mark.parametrize(("log", "run", "belongs"), COVERS)
def test_a_shared_log_belongs_to_the_runs_whose_epochs_it_covers(
    log: range, run: range, belongs: bool
) -> None:
    assert shared_log_covers(set(log), set(run)) is belongs
