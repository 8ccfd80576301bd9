"""core.naming: a run's naming scheme inferred from its checkpoint names and logged metrics."""

from __future__ import annotations

import string
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ckpt_daemon.core.naming import KERAS_DEFAULTS, RunNaming, infer_naming, is_unnamed
from ckpt_daemon.core.training_metrics import compile_template, disagrees, parse_csv_log


def _value(epoch: int, low: float) -> float:
    """A float in [low, low + 0.35) that changes with the epoch; disjoint ranges per metric keep
    two metrics from ever rounding to the same text, and no value prints as an integer."""
    return low + 0.35 * ((epoch * 0.6180339887) % 1)


RANGES = {"loss": 1.1, "val_loss": 2.1, "accuracy": 0.11, "val_accuracy": 0.51, "auc": 3.1}
LOGS = {e: {k: _value(e, low) for k, low in RANGES.items()} for e in range(1, 201)}
ALIASES = {  # label -> the logged metric it abbreviates
    "acc": "accuracy",
    "vl": "val_loss",
    "val_acc": "val_accuracy",
    "valloss": "val_loss",
    "valacc": "val_accuracy",
    "l": "loss",
}


def _specs(template: str) -> list[tuple[str, str]]:
    return [(f, s or "") for _, f, s, _ in string.Formatter().parse(template) if f is not None]


def _names(template: str, keys: list[dict[str, int]]) -> list[str]:
    out = []
    for ints in keys:
        row = LOGS[ints.get("epoch", 1)]
        values = {**row, **{a: row[m] for a, m in ALIASES.items()}, **ints}
        out.append(template.format(**values))
    return out


@dataclass(frozen=True)
class Case:
    template: str
    keys: list[dict[str, int]]
    logs: bool = True
    origin: str = "inferred"
    renamed: dict[str, str] = field(default_factory=dict)  # template field -> name read back
    suffix: str = ""  # TF files: what the catalog's basename adds to the prefix


def epochs(*values: int) -> list[dict[str, int]]:
    return [{"epoch": v} for v in values]


def steps(*values: int) -> list[dict[str, int]]:
    return [{"step": v} for v in values]


E6 = epochs(1, 2, 3, 4, 5, 6)
CASES = {
    "dash, accuracy, logs": Case("model-{epoch:02d}-{val_accuracy:.3f}.keras", E6),
    "dash, no logs: unnamed": Case(
        "model-{epoch:02d}-{val_accuracy:.3f}.keras",
        E6,
        False,
        renamed={"val_accuracy": "unnamed1"},
    ),
    "key=value": Case("ep={epoch}_val_loss={val_loss:.4f}.weights.h5", E6, False),
    "bare epoch": Case("{epoch}.keras", epochs(1, 2, 3, 4, 5)),
    "bare padded epoch": Case("{epoch:03d}.h5", epochs(7, 8, 12)),
    "save_best_only gaps": Case("best-{epoch:02d}-{val_loss:.3f}.h5", epochs(1, 2, 5, 9)),
    "two unnamed decimals": Case("{epoch:03d}-{loss:.4f}-{val_loss:.4f}.h5", epochs(1, 2, 5, 9)),
    "three unnamed": Case("{epoch}_{loss:.3f}_{accuracy:.3f}_{auc:.2f}.keras", E6),
    "step label": Case("step-{step}.weights.h5", steps(500, 1000, 1500), False),
    "step by spacing": Case("{step}.weights.h5", steps(500, 1000, 1500, 2000), False),
    "it label": Case("it{step:06d}.weights.h5", steps(100, 200, 300), False),
    "tf CheckpointManager": Case(
        "ckpt-{step}", steps(1, 2, 3), False, "keras-default", suffix=".index"
    ),
    "tf data shard": Case(
        "model-{epoch:02d}", epochs(1, 2, 3), False, suffix=".data-00000-of-00001"
    ),
    "batch + epoch": Case(
        "b.e{epoch:02d}-b{batch:03d}.weights.h5",
        [{"epoch": e, "batch": b} for e in (1, 2, 3) for b in (3, 6, 9)],
        False,
    ),
    "batch + epoch, no labels": Case(
        "w{epoch:02d}_{batch:04d}.h5", [{"epoch": e, "batch": b} for e in (1, 2) for b in (5, 10)]
    ),
    "scientific, labelled": Case("e{epoch:03d}-loss{loss:.3e}.keras", E6),
    "scientific, by logs": Case("{epoch:02d}-{val_loss:.2e}.h5", epochs(1, 3, 4, 8)),
    "scientific upper": Case("E{epoch}-{val_loss:.2E}.h5", epochs(1, 2, 3)),
    "general format": Case("run-{epoch}-{loss:.3g}.h5", E6),
    "no spec (repr)": Case("w{epoch}_{loss}.h5", E6),
    "keras docstring hdf5": Case(
        "weights.{epoch:02d}-{val_loss:.2f}.hdf5", epochs(1, 2), origin="keras-default"
    ),
    "keras 3 docstring": Case("{epoch:02d}-{val_loss:.2f}.keras", E6, origin="keras-default"),
    "keras default contradicted by logs": Case("{epoch:02d}-{val_accuracy:.2f}.keras", E6),
    "tensorflow tutorial": Case("cp-{epoch:04d}.weights.h5", epochs(5, 10), False, "keras-default"),
    "acc abbreviates accuracy": Case(
        "e{epoch:02d}-acc{acc:.2f}.keras", E6, renamed={"acc": "accuracy"}
    ),
    "acc without logs stays": Case("e{epoch:02d}-acc{acc:.2f}.keras", E6, False),
    "vl initials of val_loss": Case(
        "e{epoch:02d}-vl{vl:.3f}.keras", E6, renamed={"vl": "val_loss"}
    ),
    "val_acc": Case("w.{epoch}.val_acc={val_acc:.4f}.h5", E6, renamed={"val_acc": "val_accuracy"}),
    "underscore label": Case("model_e{epoch}_loss_{loss:.4f}.h5", E6, False),
    "constant number": Case("resnet50-{epoch:02d}-{val_loss:.3f}.keras", E6),
    "version literal": Case("model_v2.{epoch:03d}.weights.h5", epochs(1, 2, 3, 10)),
    "epoch_ folder names": Case("epoch_{epoch}.weights.h5", epochs(1, 2, 3)),
    "two labelled metrics": Case(
        "ep{epoch:03d}_auc{auc:.4f}_val_accuracy{val_accuracy:.4f}.keras", E6
    ),
    "period 10": Case("chk_{epoch:04d}_{loss:.2f}.h5", epochs(10, 20, 30, 40)),
    "epoch at the end": Case("{val_loss:.3f}--epoch{epoch}.keras", E6),
    "braces in name": Case("{{run}}-{epoch}-{loss:.2f}.h5", E6),
    "squashed label": Case(
        "model_epoch{epoch:03d}_valloss{valloss:.4f}.h5", E6, renamed={"valloss": "val_loss"}
    ),
    "loose label, values agree": Case(
        "ep{epoch}_valacc{valacc:.4f}.h5", E6, renamed={"valacc": "val_accuracy"}
    ),
    "one-letter label": Case("model-e{epoch:02d}-l{l:.2f}.keras", E6, renamed={"l": "loss"}),
    "lightning style": Case("checkpoint-epoch={epoch:02d}-val_loss={val_loss:.2f}.ckpt", E6, False),
}


def _check_reads(naming: RunNaming, case: Case, names: list[str]) -> None:
    for name, ints in zip(names, case.keys, strict=True):
        got = naming.fields(name + case.suffix)
        assert got.ints == ints, (name, got)
        row = LOGS[ints.get("epoch", 1)]
        expected = {}
        for key, spec in _specs(case.template):
            if key not in ("epoch", "step", "batch"):
                value = row[ALIASES.get(key, key)]
                expected[case.renamed.get(key, key)] = format(value, spec)
        assert got.metrics == expected, (name, got)
        assert got.template is not None


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_scheme_table(case: Case) -> None:
    names = _names(case.template, case.keys)
    naming = infer_naming([n + case.suffix for n in names], LOGS if case.logs else {})
    assert [s.origin for s in naming.schemes] == [case.origin], naming.as_json()
    scheme = naming.schemes[0]
    assert scheme.members == len(names)
    assert scheme.evidence and all(isinstance(s, str) and s for s in scheme.evidence)
    template = compile_template(scheme.template)  # accepted, and reads the names back
    assert all(template.match(n) is not None for n in names)
    _check_reads(naming, case, names)


def test_table_is_big_enough() -> None:
    assert len(CASES) >= 25


def test_inferred_template_text() -> None:
    names = _names("model-{epoch:02d}-{val_accuracy:.3f}.keras", E6)
    naming = infer_naming(names, LOGS)
    assert naming.schemes[0].template == "model-{epoch:02d}-{val_accuracy:.3f}.keras"
    assert any(
        "val_accuracy at epoch" in s and "3 places (6 of 6" in s for s in naming.schemes[0].evidence
    )
    assert naming.as_json() == [
        {
            "template": "model-{epoch:02d}-{val_accuracy:.3f}.keras",
            "origin": "inferred",
            "members": 6,
            "evidence": list(naming.schemes[0].evidence),
        }
    ]
    constant = infer_naming(_names("resnet50-{epoch:02d}-{val_loss:.3f}.keras", E6), LOGS)
    assert constant.schemes[0].template == "resnet50-{epoch:02d}-{val_loss:.3f}.keras"


def test_series_plus_one_odd_file_keeps_its_scheme() -> None:
    names = _names("resnet50-{epoch:02d}-{val_loss:.3f}.keras", E6)
    alone = infer_naming(names, LOGS)
    odd = ["resnet18-03-0.500.keras", "final-e07-val_loss=0.25.keras"]
    both = infer_naming([*names, *odd], LOGS)
    assert [s.template for s in both.schemes] == [s.template for s in alone.schemes]
    assert both.schemes[0].members == len(names)
    stray = both.fields(odd[0])
    assert stray.template is None  # its own series of one: labels only
    assert both.fields(odd[1]).ints == {"epoch": 7}
    assert both.fields(odd[1]).metrics == {"val_loss": "0.25"}


def test_fixed_names_have_no_fields_and_no_scheme() -> None:
    naming = infer_naming(["best.keras", "last.keras", "model.weights.h5"], LOGS)
    assert naming.schemes == ()
    for name in ("best.keras", "last.keras", "model.weights.h5", "never-seen.h5"):
        got = naming.fields(name)
        assert (got.ints, got.metrics, got.template) == ({}, {}, None)


@pytest.mark.parametrize(
    ("name", "ints", "metrics"),
    [
        ("epoch_3.weights.h5", {"epoch": 3}, {}),
        ("e03.keras", {"epoch": 3}, {}),
        ("step-500.h5", {"step": 500}, {}),
        ("ckpt_7", {"step": 7}, {}),
        ("ckpt_7.index", {"step": 7}, {}),
        ("b.7.h5", {}, {}),  # a batch without an epoch is no batch
        ("7.keras", {"epoch": 7}, {}),
        ("007.h5", {"epoch": 7}, {}),
        ("val_loss=0.2.keras", {}, {"val_loss": "0.2"}),
        ("b.e01-b003.weights.h5", {"epoch": 1, "batch": 3}, {}),
        ("model-0.93.keras", {}, {}),  # "model" is no metric name: the number stays unread
        ("run5.keras", {}, {}),
    ],
)
def test_labels_only(name: str, ints: dict[str, int], metrics: dict[str, str]) -> None:
    for naming in (infer_naming([name]), infer_naming([])):  # in the run or not
        got = naming.fields(name)
        assert (got.ints, got.metrics, got.template) == (ints, metrics, None)


def test_label_resolved_against_logs_in_a_name_of_its_own() -> None:
    text = format(LOGS[3]["accuracy"], ".2f")
    got = infer_naming([f"e03-acc{text}.h5"], LOGS).fields(f"e03-acc{text}.h5")
    assert got.metrics == {"accuracy": text}
    wrong = infer_naming(["e03-acc0.99.h5"], LOGS).fields("e03-acc0.99.h5")
    assert wrong.metrics == {"acc": "0.99"}  # the logs disagree: kept as written, never guessed


def test_two_logged_metrics_fit_equally_left_unnamed() -> None:
    logs = {e: {"loss": 1 / e, "val_loss": 1 / e + 1e-4} for e in range(1, 7)}
    names = [f"w{e:02d}-{1 / e:.2f}.h5" for e in range(1, 7)]
    naming = infer_naming(names, logs)
    assert naming.schemes[0].template == "w{epoch:02d}-{unnamed1:.2f}.h5"
    assert any("loss and val_loss equally" in s for s in naming.schemes[0].evidence)
    assert [is_unnamed(m) for m in naming.fields(names[0]).metrics] == [True]
    assert not is_unnamed("unnamed") and not is_unnamed("val_loss")


def test_one_stray_value_still_names_the_metric() -> None:
    names = _names("{epoch:02d}_{val_accuracy:.3f}.h5", E6)
    names[2] = names[2][:3] + "0.999.h5"  # one value the logs disagree with
    naming = infer_naming(names, LOGS)
    assert naming.schemes[0].template == "{epoch:02d}_{val_accuracy:.3f}.h5"
    assert "5 of 6 names" in " ".join(naming.schemes[0].evidence)


def test_configured_template_wins() -> None:
    names = _names("{epoch:02d}-{val_loss:.2f}.keras", E6)  # also a Keras default
    configured = compile_template("{step:02d}-{score:.2f}.keras")
    naming = infer_naming(names, LOGS, [configured])
    assert [(s.template, s.origin, s.members) for s in naming.schemes] == [
        ("{step:02d}-{score:.2f}.keras", "configured", 6)
    ]
    assert naming.fields(names[0]).ints == {"step": 1}
    assert naming.fields("77-0.12.keras").metrics == {"score": "0.12"}  # not in the run


def test_unseen_name_fitting_an_inferred_scheme() -> None:
    naming = infer_naming(_names("model-{epoch:02d}-{val_accuracy:.3f}.keras", E6), LOGS)
    got = naming.fields("model-42-0.777.keras")
    assert got.ints == {"epoch": 42} and got.metrics == {"val_accuracy": "0.777"}
    assert got.template == "model-{epoch:02d}-{val_accuracy:.3f}.keras"


def test_a_number_before_the_epoch_is_no_batch() -> None:
    names = [f"20240101-1200{e:02d}_e{e:02d}.keras" for e in range(1, 6)]  # a time of day
    naming = infer_naming(names)
    assert naming.schemes == ()  # never guessed: the names are read by their labels
    assert [naming.fields(n).ints for n in names] == [{"epoch": e} for e in range(1, 6)]


def test_two_names_show_no_growth() -> None:
    naming = infer_naming(["m-01-0.50.h5", "m-02-0.40.h5"])
    assert naming.schemes == ()
    assert naming.fields("m-01-0.50.h5").ints == {}


def test_keras_defaults_compile() -> None:
    for text, source in KERAS_DEFAULTS:
        assert compile_template(text).text == text and source


# Real Keras 3 / tf-keras training runs (the names ModelCheckpoint wrote, the CSVLogger
# logs beside them or one folder up), from the generated fixtures' training_runs-v1.
CSV_1 = (
    "epoch,accuracy,loss,val_accuracy,val_loss\n"
    "0,0.3333333432674408,1.3056122064590454,0.375,1.2381534576416016\n"
    "1,0.5833333134651184,0.9194914698600769,0.6875,0.9682454466819763\n"
    "2,0.75,0.706612765789032,0.6875,0.759703516960144\n"
    "3,0.8958333134651184,0.5385283827781677,0.6875,0.6224435567855835\n"
    "4,0.9583333134651184,0.3934588134288788,0.75,0.5446242094039917\n"
)
CSV_2 = (
    "epoch,accuracy,loss,val_accuracy,val_loss\n"
    "0,0.3333333432674408,1.3056122064590454,0.375,1.2381534576416016\n"
    "1,0.5833333134651184,0.9194914698600769,0.6875,0.9682454466819763\n"
    "2,0.75,0.706612765789032,0.6875,0.759703516960144\n"
    "3,0.8958333134651184,0.5385283827781677,0.6875,0.6224435567855835\n"
)
CSV_3 = (
    "epoch,accuracy,learning_rate,loss,val_accuracy,val_loss\n"
    "0,0.3333333432674408,0.03125,1.3056122064590454,0.375,1.2381534576416016\n"
    "1,0.5625,0.02812499925494194,0.928645670413971,0.6875,0.9921156167984009\n"
    "2,0.5416666865348816,0.025312500074505806,1.046103835105896,0.4375,1.1092076301574707\n"
    "3,0.6875,0.02278124913573265,0.7712330222129822,0.5625,0.9125177264213562\n"
    "4,0.75,0.020503124222159386,0.5962356328964233,0.5625,0.795276403427124\n"
    "5,0.5833333134651184,0.018452811986207962,0.8414702415466309,0.6875,0.9713361859321594\n"
    "6,0.7291666865348816,0.016607530415058136,0.6205661296844482,0.6875,0.8335206508636475\n"
    "7,0.8541666865348816,0.014946778304874897,0.466132789850235,0.6875,0.7360473871231079\n"
    "8,0.8958333134651184,0.013452100567519665,0.3808043897151947,0.625,0.6701191663742065\n"
)
CSV_4 = (
    "epoch,accuracy,loss,val_accuracy,val_loss\n"
    "0,0.3333333432674408,1.3056122064590454,0.375,1.2381534576416016\n"
    "1,0.5833333134651184,0.9194914698600769,0.6875,0.9682454466819763\n"
    "2,0.75,0.706612765789032,0.6875,0.759703516960144\n"
    "3,0.8958333134651184,0.5385283827781677,0.6875,0.6224435567855835\n"
    "4,0.9583333134651184,0.3934588134288788,0.75,0.5446242094039917\n"
    "5,0.9583333134651184,0.27838802337646484,0.75,0.47996434569358826\n"
)
REAL_RUNS: dict[str, tuple[str | None, list[tuple[str, int, int | None]]]] = {
    "keras3/acc_label": (
        CSV_1,
        [
            ("e1-acc0.33.keras", 1, None),
            ("e2-acc0.58.keras", 2, None),
            ("e3-acc0.75.keras", 3, None),
            ("e4-acc0.90.keras", 4, None),
            ("e5-acc0.96.keras", 5, None),
        ],
    ),
    "keras3/bare_epoch": (
        CSV_2,
        [
            ("001.keras", 1, None),
            ("002.keras", 2, None),
            ("003.keras", 3, None),
            ("004.keras", 4, None),
        ],
    ),
    "keras3/batch_freq": (
        CSV_2,
        [
            ("b.e01-b002.weights.h5", 1, 2),
            ("b.e02-b001.weights.h5", 2, 1),
            ("b.e02-b003.weights.h5", 2, 3),
            ("b.e03-b002.weights.h5", 3, 2),
            ("b.e04-b001.weights.h5", 4, 1),
            ("b.e04-b003.weights.h5", 4, 3),
        ],
    ),
    "keras3/best_gaps": (
        CSV_3,
        [
            ("best-01-1.24.keras", 1, None),
            ("best-02-0.99.keras", 2, None),
            ("best-04-0.91.keras", 4, None),
            ("best-05-0.80.keras", 5, None),
            ("best-08-0.74.keras", 8, None),
            ("best-09-0.67.keras", 9, None),
        ],
    ),
    "keras3/constant": (
        CSV_1,
        [
            ("run42-ep1.keras", 1, None),
            ("run42-ep2.keras", 2, None),
            ("run42-ep3.keras", 3, None),
            ("run42-ep4.keras", 4, None),
            ("run42-ep5.keras", 5, None),
        ],
    ),
    "keras3/dash_acc": (
        CSV_4,
        [
            ("model-01-0.375.keras", 1, None),
            ("model-02-0.688.keras", 2, None),
            ("model-03-0.688.keras", 3, None),
            ("model-04-0.688.keras", 4, None),
            ("model-05-0.750.keras", 5, None),
            ("model-06-0.750.keras", 6, None),
        ],
    ),
    "keras3/exp/checkpoints": (
        CSV_1,
        [
            ("epoch_1.weights.h5", 1, None),
            ("epoch_2.weights.h5", 2, None),
            ("epoch_3.weights.h5", 3, None),
            ("epoch_4.weights.h5", 4, None),
            ("epoch_5.weights.h5", 5, None),
        ],
    ),
    "keras3/keyvalue": (
        CSV_1,
        [
            ("ckpt_epoch=1_val_loss=1.2382.weights.h5", 1, None),
            ("ckpt_epoch=2_val_loss=0.9682.weights.h5", 2, None),
            ("ckpt_epoch=3_val_loss=0.7597.weights.h5", 3, None),
            ("ckpt_epoch=4_val_loss=0.6224.weights.h5", 4, None),
            ("ckpt_epoch=5_val_loss=0.5446.weights.h5", 5, None),
        ],
    ),
    "keras3/metric_first": (
        CSV_4,
        [
            ("vl1.238_ep01.keras", 1, None),
            ("vl0.968_ep02.keras", 2, None),
            ("vl0.760_ep03.keras", 3, None),
            ("vl0.622_ep04.keras", 4, None),
            ("vl0.545_ep05.keras", 5, None),
            ("vl0.480_ep06.keras", 6, None),
        ],
    ),
    "keras3/odd_csv": (
        None,
        [
            ("snap_01.keras", 1, None),
            ("snap_02.keras", 2, None),
            ("snap_03.keras", 3, None),
            ("snap_04.keras", 4, None),
            ("snap_05.keras", 5, None),
            ("snap_06.keras", 6, None),
        ],
    ),
    "keras3/sci": (
        CSV_2,
        [
            ("weights_0001_1.238e+00.keras", 1, None),
            ("weights_0002_9.682e-01.keras", 2, None),
            ("weights_0003_7.597e-01.keras", 3, None),
            ("weights_0004_6.224e-01.keras", 4, None),
        ],
    ),
    "keras3/tb_run": (
        None,
        [
            ("w.01.keras", 1, None),
            ("w.02.keras", 2, None),
            ("w.03.keras", 3, None),
            ("w.04.keras", 4, None),
        ],
    ),
    "keras3/two_decimals": (
        CSV_4,
        [
            ("01-1.3056-1.2382.keras", 1, None),
            ("02-0.9195-0.9682.keras", 2, None),
            ("03-0.7066-0.7597.keras", 3, None),
            ("04-0.5385-0.6224.keras", 4, None),
            ("05-0.3935-0.5446.keras", 5, None),
            ("06-0.2784-0.4800.keras", 6, None),
        ],
    ),
    "tfkeras/dash_acc": (
        CSV_1,
        [
            ("model-01-0.33.h5", 1, None),
            ("model-02-0.58.h5", 2, None),
            ("model-03-0.75.h5", 3, None),
            ("model-04-0.90.h5", 4, None),
            ("model-05-0.96.h5", 5, None),
        ],
    ),
    "tfkeras/weights_hdf5": (
        CSV_4,
        [
            ("weights.01-1.24.hdf5", 1, None),
            ("weights.02-0.97.hdf5", 2, None),
            ("weights.03-0.76.hdf5", 3, None),
            ("weights.04-0.62.hdf5", 4, None),
            ("weights.05-0.54.hdf5", 5, None),
            ("weights.06-0.48.hdf5", 6, None),
        ],
    ),
}


EXPECTED_TEMPLATES = {
    "keras3/dash_acc": "model-{epoch:02d}-{val_accuracy:.3f}.keras",
    "keras3/two_decimals": "{epoch:02d}-{loss:.4f}-{val_loss:.4f}.keras",
    "keras3/sci": "weights_{epoch:04d}_{val_loss:.3e}.keras",
    "keras3/metric_first": "vl{val_loss:.3f}_ep{epoch:02d}.keras",
    "keras3/acc_label": "e{epoch}-acc{accuracy:.2f}.keras",
    "tfkeras/dash_acc": "model-{epoch:02d}-{accuracy:.2f}.h5",
    "tfkeras/weights_hdf5": "weights.{epoch:02d}-{val_loss:.2f}.hdf5",
}


@pytest.mark.parametrize("run", REAL_RUNS)
def test_real_keras_runs(run: str) -> None:
    csv, items = REAL_RUNS[run]
    logged = parse_csv_log(csv) if csv else {}
    naming = infer_naming([name for name, _, _ in items], logged)
    if run in EXPECTED_TEMPLATES:
        assert [s.template for s in naming.schemes] == [EXPECTED_TEMPLATES[run]]
    for name, epoch, batch in items:
        got = naming.fields(name)
        assert got.ints.get("epoch") == epoch and got.ints.get("batch") == batch, (name, got)
        for metric, text in got.metrics.items():  # every metric read is a logged one, agreeing
            assert metric in logged[epoch] and not disagrees(text, logged[epoch][metric])


# --- property: random templates from Keras's format grammar read back ------------------------

PREFIXES = ["", "model-", "weights.", "net.", "resnet50-", "b.", "run_v2-", "{{x}}-"]
EXTS = [".keras", ".h5", ".weights.h5", ".hdf5", ""]
METRICS = list(RANGES)
LABELS = {"accuracy": ["accuracy", "acc"], "val_loss": ["val_loss", "vl"]}  # besides the name
# Not "--": `weights.1--1.32.h5` reads as val_loss -1.32 by Keras's own default template,
# and without logs nothing can tell that it was meant as a "--" separator.
SEPARATORS = ["-", "_", "~", "__", "-x-", "+"]
FLOAT_SPECS = [".1f", ".2f", ".3f", ".4f", ".1e", ".3e", ".2E", ".3g", ".4g", ""]


Drawn = tuple[str, list[dict[str, int]], dict[str, str], bool, frozenset[str]]


@st.composite
def schemes(draw: st.DrawFn) -> Drawn:
    """(template, the ints of each name, field -> the metric name expected back ("": any),
    whether logs are given, the unlabelled fields)."""
    kind = draw(st.sampled_from(["epoch", "epoch", "step", "epoch+batch"]))
    parts: list[str] = []
    if kind == "step":
        label = draw(st.sampled_from(["step", "step-", "it", "ckpt-", "iter_"]))
        parts.append(label + draw(st.sampled_from(["{step}", "{step:06d}"])))
        start = draw(st.integers(1, 50)) * 100
        gaps = draw(st.lists(st.integers(1, 20), min_size=2, max_size=9))
        values = [start + 100 * sum(gaps[:i]) for i in range(len(gaps) + 1)]
        keys = [{"step": v} for v in values]
    else:
        label = draw(st.sampled_from(["", "e", "ep", "epoch_", "ep="]))
        parts.append(label + draw(st.sampled_from(["{epoch}", "{epoch:02d}", "{epoch:03d}"])))
        chosen = sorted(draw(st.sets(st.integers(1, 150), min_size=3, max_size=10)))
        keys = [{"epoch": e} for e in chosen]
        if kind == "epoch+batch":
            label = draw(st.sampled_from(["-b", "_batch", "-batch="]))
            parts.append(label + draw(st.sampled_from(["{batch}", "{batch:03d}"])))
            batches = sorted(draw(st.sets(st.integers(1, 500), min_size=2, max_size=3)))
            keys = [{"epoch": k["epoch"], "batch": b} for k in keys for b in batches]
    logs = draw(st.booleans())
    expect: dict[str, str] = {}
    free: set[str] = set()
    for metric in draw(st.lists(st.sampled_from(METRICS), max_size=3, unique=True)):
        spec = draw(st.sampled_from(FLOAT_SPECS))
        body = f"{{{metric}:{spec}}}" if spec else f"{{{metric}}}"
        labelled = kind == "step" or draw(st.booleans())
        if labelled:
            word = draw(st.sampled_from([metric, *LABELS.get(metric, [])]))
            glue = draw(st.sampled_from(["=", ""] if word == "vl" else ["=", "", "_"]))
            body = body.replace(f"{{{metric}", f"{{{word}", 1)
            parts.append(draw(st.sampled_from(["-", "_", "."])) + word + glue + body)
            expect[word] = metric if (logs or word == metric) else word
        else:
            parts.append(draw(st.sampled_from(SEPARATORS)) + body)
            expect[metric] = metric if logs else ""  # "" : unnamed, any placeholder
            free.add(metric)
    text = draw(st.sampled_from(PREFIXES)) + "".join(parts) + draw(st.sampled_from(EXTS))
    return text, keys, expect, logs, frozenset(free)


@settings(
    deadline=None,
    max_examples=200,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(schemes())
def test_property_inferred_scheme_reads_back_the_values(
    case: Drawn,
) -> None:
    text, keys, expect, logs, free = case
    try:
        compile_template(text)
    except ValueError:
        assume(False)
    names = []
    for ints in keys:
        row = LOGS[ints.get("epoch", 1)]
        names.append(text.format(**row, **{a: row[m] for a, m in ALIASES.items()}, **ints))
    assume(len(set(names)) == len(names))
    for key, spec in _specs(text):  # an unlabelled value the same in every name is a literal
        if key not in free:
            continue
        printed = {format(LOGS[k.get("epoch", 1)][ALIASES.get(key, key)], spec) for k in keys}
        assume(len(printed) > 1)
    naming = infer_naming(names, LOGS if logs else {})
    for name, ints in zip(names, keys, strict=True):
        got = naming.fields(name)
        assert got.ints == ints, (text, name, got, naming.as_json())
        row = LOGS[ints.get("epoch", 1)]
        want_texts = {}
        for key, spec in _specs(text):
            if key in expect:
                want_texts[key] = format(row[ALIASES.get(key, key)], spec)
        assert sorted(got.metrics.values()) == sorted(want_texts.values()), (name, got)
        for key, metric in expect.items():
            if metric:
                assert got.metrics.get(metric) == want_texts[key], (text, name, got)
    odd = infer_naming([*names, "best.keras", "model-final.h5"], LOGS if logs else {})
    assert [odd.fields(n) for n in names] == [naming.fields(n) for n in names]  # stable


NAME_PIECES = [*"0123456789.-_=eEbsx{}nanif", "ckpt", "step", "val_loss", "\udcff", "\x00", "é"]
NAME_CHARS = st.sampled_from([*NAME_PIECES, ".h5", ".keras", "9" * 50])
HOSTILE_NAME = st.lists(NAME_CHARS, max_size=12).map("".join) | st.text(max_size=40)


@settings(deadline=None, max_examples=300)
@given(st.lists(HOSTILE_NAME, max_size=12), st.booleans())
def test_property_hostile_names_never_crash(names: list[str], with_logs: bool) -> None:
    """Any names: no exception; what is read is in the name; every scheme compiles and reads
    its own members back."""
    naming = infer_naming(names, LOGS if with_logs else {})
    for scheme in naming.schemes:
        template = compile_template(scheme.template)
        assert sum(template.match(n) is not None for n in set(names)) >= scheme.members or (
            scheme.origin != "inferred"
        )
    assert isinstance(naming.as_json(), list)
    for name in [*names, "x" + "".join(names)]:
        got = naming.fields(name)
        assert all(v >= 0 for v in got.ints.values())
        assert all(text in name for text in got.metrics.values())
