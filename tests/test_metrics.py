"""core.metrics and formats.metric_files: filename templates, CSVLogger, sidecar and
metrics.json, and the join."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import string
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ckpt_daemon.core.metrics import (
    FilenameTemplate,
    compile_template,
    parse_csv_log,
    parse_metrics_file,
    parse_sidecar,
)
from ckpt_daemon.core.model import MetricValue
from ckpt_daemon.formats.metric_files import MetricsResult, metrics_for

# --- compile_template / match: tables -------------------------------------------------------

MATCHES = [
    (
        "weights.{epoch:02d}-{val_loss:.2f}.hdf5",
        "weights.03-0.23.hdf5",
        {"epoch": 3, "val_loss": 0.23},
    ),
    ("e{epoch:02d}-vl{val_loss:.3f}.keras", "e01-vl1.241.keras", {"epoch": 1, "val_loss": 1.241}),
    (
        "e{epoch:02d}-vl{val_loss:.3f}-acc{accuracy:.2f}.keras",
        "e01-vl1.241-acc0.33.keras",
        {"epoch": 1, "val_loss": 1.241, "accuracy": 0.33},
    ),
    ("ckpt-{step}", "ckpt-1500", {"step": 1500}),
    ("b.e{epoch:02d}-b{batch:03d}.weights.h5", "b.e01-b003.weights.h5", {"epoch": 1, "batch": 3}),
    ("model.{epoch}.keras", "model.12.keras", {"epoch": 12}),
    ("runs/{run}/w.{epoch:03d}.h5", "w.100.h5", {"epoch": 100}),  # basename only
    (
        "w.{epoch:02d}-{val_loss:.4f}.weights.h5",
        "w.01-2.2993.weights.h5",
        {"epoch": 1, "val_loss": 2.2993},
    ),
    ("w{epoch}_{loss}.h5", "w7_1e-05.h5", {"epoch": 7, "loss": 1e-05}),
    ("w{epoch}_{loss}.h5", "w7_0.2871.h5", {"epoch": 7, "loss": 0.2871}),
    ("w{epoch}_{loss:.3e}.h5", "w7_-1.250e+02.h5", {"epoch": 7, "loss": -125.0}),
    ("w{epoch}_{loss:08.2f}.h5", "w7_-0001.50.h5", {"epoch": 7, "loss": -1.5}),
    ("w{epoch:3d}_{loss:8.2f}.h5", "w  7_   -1.50.h5", {"epoch": 7, "loss": -1.5}),
    ("w{epoch}_{loss:.2f}-{acc:.1f}", "w2_-0.50--1.0", {"epoch": 2, "loss": -0.5, "acc": -1.0}),
    ("best.keras", "best.keras", {}),
    ("a{{b}}{epoch}(x)", "a{b}3(x)", {"epoch": 3}),  # literals are regex-escaped
]


@pytest.mark.parametrize(("text", "name", "expected"), MATCHES)
def test_match_table(text: str, name: str, expected: dict[str, float]) -> None:
    template = compile_template(text)
    assert template.fields == tuple(expected)
    got = template.match(name)
    assert got == expected
    assert got is not None
    assert all(type(got[k]) is int for k in got if k in ("epoch", "batch", "step"))
    assert all(type(got[k]) is float for k in got if k not in ("epoch", "batch", "step"))


@pytest.mark.parametrize(
    ("spec", "text", "check"),
    [
        (".2f", "nan", math.isnan),
        ("08.2f", "00000nan", math.isnan),
        (".2f", "-inf", lambda v: v == -math.inf),
        ("08.2f", "-0000inf", lambda v: v == -math.inf),
        ("E", "INF", lambda v: v == math.inf),
        ("", "inf", lambda v: v == math.inf),
        ("g", "1e+300", lambda v: v == 1e300),
    ],
)
def test_match_special_floats(spec: str, text: str, check: object) -> None:
    got = compile_template(f"x{{loss:{spec}}}.h5").match(f"x{text}.h5")
    assert got is not None and callable(check) and check(got["loss"])


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("weights.{epoch:02d}-{val_loss:.2f}.hdf5", "weights.03-0.23.h5"),
        ("weights.{epoch:02d}-{val_loss:.2f}.hdf5", "weights.03-0.234.hdf5"),  # .2f is exact
        ("weights.{epoch:02d}-{val_loss:.2f}.hdf5", "weights.x3-0.23.hdf5"),
        ("weights.{epoch:02d}-{val_loss:.2f}.hdf5", "xweights.03-0.23.hdf5"),
        ("ckpt-{step}", "ckpt-12.index"),
        ("ckpt-{step}", "ckpt-"),
        ("model.{epoch}.keras", "model.1.5.keras"),
        ("model.{epoch}.keras", "modelX1Xkeras"),  # "." is literal, not a regex wildcard
    ],
)
def test_no_match(text: str, name: str) -> None:
    assert compile_template(text).match(name) is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{}", "positional"),
        ("w{0}.h5", "positional"),
        ("{epoch!r}", "conversion"),
        ("{epoch:{width}d}", "nested"),
        ("{a{b}}", "unexpected"),
        ("{epoch}{val_loss}", "no literal"),
        ("{epoch.real}", "attribute"),
        ("{logs[loss]}", "attribute"),
        ("w{epoch", "expected"),
        ("w}{epoch}", "Single"),
        ("{epoch:x}", "not supported"),
        ("{epoch:.2f}", "not supported"),
        ("{val_loss:d}", "not supported"),
        ("{val_loss:.1%}", "not supported"),
        ("{val_loss:>8.2f}", "not supported"),
        ("{val_loss:,.2f}", "not supported"),
        ("{epoch}-{epoch}", "twice"),
        ("{val_loss}-{loss}", "could be part"),  # "1e-05-..." : "-" can be inside the value
        ("{val_loss:.2e}-{loss:.2f}", "could be part"),
        ("{epoch}0{step}", "could be part"),
        ("{val_loss:.0f}1{loss}", "could be part"),
        ("{val_loss}.{loss}", "could be part"),
        ("", "empty"),
        ("runs/", "empty"),
    ],
)
def test_compile_rejects(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)) as info:
        compile_template(text)
    assert "\n" not in str(info.value)


def test_template_equality_and_direct_construction() -> None:
    a = compile_template("runs/w.{epoch}.h5")
    assert a == FilenameTemplate("w.{epoch}.h5", ("epoch",))
    assert a.text == "w.{epoch}.h5"
    with pytest.raises(ValueError):
        FilenameTemplate("w.{epoch}.h5", ("step",))


# --- compile_template / match: properties ---------------------------------------------------

INT_SPECS = ["", "d", "02d", "03d", "04", "+d", "3d", "05d", " d"]
FLOAT_SPECS = [
    "",
    ".2f",
    ".3f",
    ".4f",
    ".0f",
    "f",
    "F",
    ".3e",
    "e",
    "E",
    "g",
    ".3g",
    "G",
    "08.3f",
    "+.2f",
    "10.2f",
    " .1f",
    "012.3e",
    ".5",
    "08",
]
SEPARATORS = ["-", "_", ".", "-vl", "-acc", "_e", ".b", "~", "=", "x", "-loss=", "){", "[a]"]
LITERALS = [
    "",
    "weights.",
    ".keras",
    ".weights.h5",
    "ckpt-",
    "e",
    "model.",
    "^$",
    "{{",
    "}}",
    "(.*)",
    "a+b",
    "\\",
]
FLOAT_FIELDS = ["loss", "val_loss", "accuracy", "val_acc", "lr", "auc"]


@st.composite
def template_and_values(draw: st.DrawFn) -> tuple[str, dict[str, int | float]]:
    names = draw(
        st.lists(
            st.sampled_from(["epoch", "batch", "step", *FLOAT_FIELDS]),
            min_size=1,
            max_size=4,
            unique=True,
        )
    )
    text = draw(st.sampled_from(LITERALS))
    values: dict[str, int | float] = {}
    for i, name in enumerate(names):
        if i:
            text += draw(st.sampled_from(SEPARATORS) | st.text("ab-_.~xyz", min_size=1, max_size=3))
        if name in ("epoch", "batch", "step"):
            spec = draw(st.sampled_from(INT_SPECS))
            values[name] = draw(st.integers(-1000, 10**7))
        else:
            spec = draw(st.sampled_from(FLOAT_SPECS))
            values[name] = draw(
                st.floats(allow_nan=True, allow_infinity=True)
                | st.floats(-10, 10)
                | st.floats(-1e-3, 1e-3)
            )
        text += f"{{{name}:{spec}}}" if spec else f"{{{name}}}"
    text += draw(st.sampled_from(LITERALS))
    return text, values


def _expected_float(formatted: str) -> float:
    return float(re.sub(r"^([-+]?)0+(?=[a-zA-Z])", r"\1", formatted.strip()))


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _compiled(text: str) -> FilenameTemplate:
    try:
        return compile_template(text)
    except ValueError:
        assume(False)
        raise


@settings(max_examples=400, suppress_health_check=[HealthCheck.filter_too_much])
@given(template_and_values())
def test_property_round_trip(case: tuple[str, dict[str, int | float]]) -> None:
    text, values = case
    template = _compiled(text)
    name = template.text.format(**values)
    got = template.match(name)
    assert got is not None, (text, name)
    assert set(got) == set(values)
    for key, value in values.items():
        if key in ("epoch", "batch", "step"):
            assert got[key] == value and type(got[key]) is int
        else:
            spec = next(s for f, s in _fields_with_specs(template.text) if f == key)
            assert _same(got[key], _expected_float(format(value, spec))), (name, key)


def _fields_with_specs(text: str) -> list[tuple[str, str]]:
    return [(f, s or "") for _, f, s, _ in string.Formatter().parse(text) if f is not None]


@settings(max_examples=400, suppress_health_check=[HealthCheck.filter_too_much])
@given(template_and_values(), st.data())
def test_property_garbage_is_none_or_consistent(
    case: tuple[str, dict[str, int | float]], data: st.DataObject
) -> None:
    text, values = case
    template = _compiled(text)
    name = template.text.format(**values)
    candidates = [data.draw(st.text(max_size=30))]
    if name:  # mutate one character of a real name
        i = data.draw(st.integers(0, len(name) - 1))
        c = data.draw(st.sampled_from("0123456789.-+e na_x"))
        candidates += [
            name[:i] + c + name[i + 1 :],
            name[:i] + name[i + 1 :],
            name[:i] + c + name[i:],
        ]
    for candidate in candidates:
        got = template.match(candidate)
        if got is None:
            continue
        reformatted = template.text.format(**got)
        again = template.match(reformatted)
        assert again is not None and again.keys() == got.keys(), (candidate, got)
        for key, spec in _fields_with_specs(template.text):
            if key in ("epoch", "batch", "step") or spec[-1:] in ("d", "f", "F", "e", "E"):
                assert _same(again[key], got[key]), (candidate, got, again)  # fixed precision
            else:  # g / general: re-formatting may round further, to what it printed
                assert _same(again[key], _expected_float(format(got[key], spec)))


# --- CSVLogger --------------------------------------------------------------------------------


def _keras_csv(rows: list[dict[str, object]], sep: str = ",") -> str:
    """What Keras's CSVLogger writes: DictWriter, excel dialect, header epoch + sorted keys."""
    keys = sorted({k for r in rows for k in r if k != "epoch"})

    class Dialect(csv.excel):
        delimiter = sep

    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["epoch", *keys], dialect=Dialect)
    writer.writeheader()
    for row in rows:
        writer.writerow({"epoch": row["epoch"], **{k: row.get(k, "NA") for k in keys}})
    return out.getvalue()


def test_csv_keras_example() -> None:
    text = (
        "epoch,accuracy,loss,val_accuracy,val_loss\r\n"
        "0,0.33,2.1,NA,2.2993457\r\n"
        "1,0.5,1.5,,1.2407\r\n"
        "1,0.55,1.4,0.6,1.1\r\n"  # append=True re-ran epoch index 1: the last row wins
        "x,1,1,1,1\r\n"
        "2,0.6,abc,0.7"  # partial line, mid-write
    )
    assert parse_csv_log(text) == {
        1: {"accuracy": 0.33, "loss": 2.1, "val_loss": 2.2993457},
        2: {"accuracy": 0.55, "loss": 1.4, "val_accuracy": 0.6, "val_loss": 1.1},
    }


def test_csv_partial_line_with_full_column_count_is_kept() -> None:
    assert parse_csv_log("epoch;loss\n0;1.5\n1;0.7", sep=";") == {
        1: {"loss": 1.5},
        2: {"loss": 0.7},
    }


@pytest.mark.parametrize("text", ["", "\n", "loss,acc\n1,2\n", "\x00\x01garbage", "epoch\n"])
def test_csv_garbage(text: str) -> None:
    assert parse_csv_log(text) == {}


metric_value = st.one_of(st.floats(allow_nan=False, allow_infinity=True), st.just("NA"))


@given(
    keys=st.lists(
        st.from_regex(r"[a-z_]{1,8}", fullmatch=True).filter(lambda k: k != "epoch"),
        min_size=1,
        max_size=5,
        unique=True,
    ),
    epochs=st.lists(st.integers(0, 50), min_size=1, max_size=8),
    data=st.data(),
    sep=st.sampled_from([",", ";", "\t"]),
    cut=st.integers(1, 40),
)
def test_property_csv_round_trip(
    keys: list[str], epochs: list[int], data: st.DataObject, sep: str, cut: int
) -> None:
    rows: list[dict[str, object]] = [
        {"epoch": e, **{k: data.draw(metric_value) for k in keys}} for e in epochs
    ]
    text = _keras_csv(rows, sep)
    expected: dict[int, dict[str, float]] = {}
    for row in rows:  # last row for an epoch wins; NA dropped; 0-based -> 1-based
        expected[int(str(row["epoch"])) + 1] = {
            k: float(str(v)) for k, v in row.items() if k != "epoch" and v != "NA"
        }
    assert parse_csv_log(text, sep) == expected
    partial = sep.join(["99", *["0.5"] * len(keys)])
    short = partial[: min(cut, partial.rfind(sep))]  # fewer cells than the header: mid-write
    assert parse_csv_log(text + short, sep) == expected
    assert parse_csv_log(text + partial, sep) == expected | {100: dict.fromkeys(keys, 0.5)}


# --- sidecar and metrics.json ---------------------------------------------------------------


def test_sidecar() -> None:
    obj = {
        "val_loss": 0.25,
        "epoch": 3,
        "ok": True,
        "name": "x",
        "n": None,
        "big": 10**400,
        "acc": 1,
        "nested": {"a": 1},
    }
    assert parse_sidecar(obj) == {"val_loss": 0.25, "epoch": 3.0, "acc": 1.0}
    assert parse_sidecar([1, 2]) == {}
    assert parse_sidecar(None) == {}


@pytest.mark.parametrize(
    ("obj", "by_epoch", "by_step"),
    [
        (
            {"epochs": {"1": {"val_loss": 0.5}}, "steps": {"500": {"loss": 0.7, "step": 500}}},
            {1: {"val_loss": 0.5}},
            {500: {"loss": 0.7}},
        ),
        (
            [
                {"epoch": 1, "val_loss": 0.5},
                {"step": 500, "loss": 0.7},
                {"epoch": 1, "acc": 0.9},
                {"epoch": "x", "loss": 1},
                "junk",
                {"epoch": True, "loss": 1},
            ],
            {1: {"val_loss": 0.5, "acc": 0.9}},
            {500: {"loss": 0.7}},
        ),
        ({"1": {"val_loss": 0.5}, "two": {"loss": 1}, "3": "x"}, {1: {"val_loss": 0.5}}, {}),
        ({"epochs": [{"epoch": 2, "loss": 0.1}]}, {2: {"loss": 0.1}}, {}),
        ("junk", {}, {}),
        (None, {}, {}),
    ],
)
def test_metrics_file(obj: object, by_epoch: object, by_step: object) -> None:
    assert parse_metrics_file(obj) == (by_epoch, by_step)


# --- metrics_for over real folders ------------------------------------------------------------

KERAS_TEMPLATE = compile_template("weights.{epoch:02d}-{val_loss:.2f}.hdf5")


def _by_name(result: MetricsResult) -> dict[str, MetricValue]:
    return {m.name: m for m in result.metrics}


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    rows: list[dict[str, object]] = [
        {"epoch": 0, "loss": 0.9, "val_loss": 0.81234},
        {"epoch": 1, "loss": 0.5, "val_loss": 0.23456},
        {"epoch": 2, "loss": 0.4, "val_loss": 0.2871},
    ]
    (run / "training.log").write_text(_keras_csv(rows), newline="")
    return run


def test_csv_joined_by_epoch(tmp_path: Path) -> None:
    run = _run(tmp_path)
    ckpt = run / "weights.02-0.23.hdf5"
    ckpt.write_bytes(b"x")
    result = metrics_for(ckpt, run, [KERAS_TEMPLATE], ["training.log", "*.csv"])
    assert (result.epoch, result.step) == (2, None)
    assert _by_name(result) == {  # filename epoch 2 <-> CSV row epoch 1
        "loss": MetricValue("loss", 0.5, "csv:training.log"),
        "val_loss": MetricValue("val_loss", 0.23456, "csv:training.log"),
    }
    assert result.notes == ()


def test_disagreement_note(tmp_path: Path) -> None:
    run = _run(tmp_path)
    result = metrics_for(run / "weights.03-0.23.hdf5", run, [KERAS_TEMPLATE], ["training.log"])
    assert _by_name(result)["val_loss"] == MetricValue("val_loss", 0.2871, "csv:training.log")
    assert result.notes == ("filename val_loss 0.23 disagrees with csv:training.log 0.2871",)


def test_filename_only_and_rounding_tolerance(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    assert metrics_for(run / "weights.07-0.29.hdf5", run, [KERAS_TEMPLATE], ["*.log"]) == (
        MetricsResult(7, None, (MetricValue("val_loss", 0.29, "filename"),), ())
    )
    (run / "metrics.json").write_text(json.dumps({"7": {"val_loss": 0.294999}}))
    result = metrics_for(run / "weights.07-0.29.hdf5", run, [KERAS_TEMPLATE], ["metrics.json"])
    assert _by_name(result)["val_loss"].source == "json:metrics.json"
    assert result.notes == ()  # within .2f rounding


def test_float32_repr_in_filename_agrees_with_csv(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "log.csv").write_text("epoch,val_loss\r\n0,0.2871000170707703\r\n")  # float32 0.2871
    template = compile_template("w.{epoch}-{val_loss}.h5")
    result = metrics_for(run / "w.1-0.2871.h5", run, [template], ["*.csv"])
    assert result.metrics == (MetricValue("val_loss", 0.2871000170707703, "csv:log.csv"),)
    assert result.notes == ()


def test_sidecar_precedence_and_epoch_override(tmp_path: Path) -> None:
    run = _run(tmp_path)
    ckpt = run / "weights.02-0.23.hdf5"
    (run / "weights.02-0.23.hdf5.json").write_text(
        json.dumps({"val_loss": 0.2345, "epoch": 3, "custom": 7, "note": "hi"})
    )
    (run / "metrics.json").write_text(json.dumps({"epochs": {"3": {"loss": 0.11, "val_loss": 9}}}))
    result = metrics_for(ckpt, run, [KERAS_TEMPLATE], ["training.log", "*.json"])
    assert result.epoch == 3
    assert _by_name(result) == {
        "val_loss": MetricValue("val_loss", 0.2345, "sidecar:weights.02-0.23.hdf5.json"),
        "custom": MetricValue("custom", 7.0, "sidecar:weights.02-0.23.hdf5.json"),
        "loss": MetricValue("loss", 0.11, "json:metrics.json"),  # json beats the csv's 0.4
    }
    assert result.notes == ("sidecar epoch 3 overrides filename epoch 2",)


def test_tf_prefix_and_metrics_json_by_step(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "ckpt-2.index").write_bytes(b"")
    (run / "metrics.json").write_text(
        json.dumps([{"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.5}, {"epoch": 2, "acc": 1}])
    )
    for name in ("ckpt-2", "ckpt-2.index", "model.ckpt-2"):
        result = metrics_for(run / name, run, [], ["metrics.json"])
        assert (result.epoch, result.step) == (None, 2)
        assert result.metrics == (MetricValue("loss", 0.5, "json:metrics.json"),)
    templated = metrics_for(run / "ckpt-2", run, [compile_template("ckpt-{step}")], [])
    assert templated.step == 2


@pytest.mark.parametrize(
    ("name", "epoch", "step"),
    [
        ("epoch_003.keras", 3, None),
        ("weights-epoch-12.h5", 12, None),
        ("e03.weights.h5", 3, None),
        ("model_e10.keras", 10, None),
        ("model.ckpt-123", None, 123),
        ("step_500.weights.h5", None, 500),
        ("lr1e05.h5", None, None),
        ("base3.keras", None, None),
        ("best.keras", None, None),
    ],
)
def test_fallback_names(tmp_path: Path, name: str, epoch: int | None, step: int | None) -> None:
    result = metrics_for(tmp_path / name, tmp_path, [KERAS_TEMPLATE], [])
    assert (result.epoch, result.step) == (epoch, step)


def test_mid_epoch_checkpoint_not_joined_to_epoch_rows(tmp_path: Path) -> None:
    run = _run(tmp_path)
    template = compile_template("b.e{epoch:02d}-b{batch:03d}.weights.h5")
    result = metrics_for(run / "b.e02-b003.weights.h5", run, [template], ["training.log"])
    assert (result.epoch, result.metrics) == (2, ())
    assert result.notes == ("mid-epoch checkpoint (batch 3): epoch rows not joined",)


def test_garbage_files_are_ignored(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "training.log").write_bytes(bytes(range(256)) * 4)  # binary, not UTF-8
    (run / "latin1.csv").write_bytes("epoch,val_pr\xe9cision\n0,0.5\n".encode("latin-1"))
    (run / "ok.csv").write_text("epoch;val_loss\n0;0.3\n")  # ';' sniffed from the header
    (run / "metrics.json").write_text("{not json")
    (run / "deep.json").write_text("[" * 100_000)
    (run / "weights.01-0.30.hdf5.json").write_bytes(b"\xff\xfe{}")
    (run / "dir.csv").mkdir()
    (run / "nul.csv").write_bytes(b"epoch,val_loss\x00,x\x01y\n0,0.1,0.2\n")  # junk names dropped
    (run / "gone.csv").symlink_to(run / "nowhere.csv")
    (run / "loop.csv").symlink_to(run / "loop.csv")
    result = metrics_for(
        run / "weights.01-0.30.hdf5",
        run,
        [KERAS_TEMPLATE],
        ["training.log", "*.csv", "*.json", "missing.json", "/abs/*.csv", "a**b/x"],
    )
    assert result.epoch == 1
    assert _by_name(result) == {"val_loss": MetricValue("val_loss", 0.3, "csv:ok.csv")}
    notes = "\n".join(result.notes)
    for expected in (
        "training.log: not UTF-8",
        "latin1.csv: not UTF-8",
        "metrics.json: invalid",
        "deep.json: invalid",
        "weights.01-0.30.hdf5.json: not UTF-8",
        "/abs/*.csv",
    ):
        assert expected in notes


def test_unreadable_file_is_ignored(tmp_path: Path) -> None:
    run = _run(tmp_path)
    (run / "training.log").chmod(0)
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from ckpt_daemon.core.metrics import compile_template\n"
        "from ckpt_daemon.formats.metric_files import metrics_for\n"
        "run = Path(sys.argv[1])\n"
        "r = metrics_for(run / 'weights.02-0.23.hdf5', run, [compile_template(sys.argv[2])],"
        " ['training.log'])\n"
        "print(json.dumps({'metrics': [[m.name, m.value, m.source] for m in r.metrics],"
        " 'notes': list(r.notes)}))\n"
    )
    cmd = [sys.executable, "-c", script, str(run), KERAS_TEMPLATE.text]
    if os.geteuid() == 0:  # root reads anything: drop the capabilities that bypass permissions
        cmd = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *cmd]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    assert out["metrics"] == [["val_loss", 0.23, "filename"]]
    assert any("training.log: unreadable" in n for n in out["notes"])


def test_missing_run_dir_never_raises(tmp_path: Path) -> None:
    result = metrics_for(tmp_path / "nope" / "e05.keras", tmp_path / "nope", [], ["*.csv"])
    assert result == MetricsResult(5, None, (), ())
