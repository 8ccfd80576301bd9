"""core.training_metrics: filename templates, CSVLogger, sidecar and metrics.json parsing."""

from __future__ import annotations

import math
import re
import string

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ckpt_daemon.core.training_metrics import (
    FilenameTemplate,
    compile_template,
    parse_csv_log,
    parse_metrics_file,
    parse_sidecar,
)
from tests.support import keras_csv

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


# Strategies built once, not per draw: building and validating them was most of the run time.
FIELD_NAMES = st.lists(
    st.sampled_from(["epoch", "batch", "step", *FLOAT_FIELDS]), min_size=1, max_size=4, unique=True
)
SEPARATOR = st.sampled_from(SEPARATORS) | st.text("ab-_.~xyz", min_size=1, max_size=3)
LITERAL = st.sampled_from(LITERALS)
INT_SPEC, FLOAT_SPEC = st.sampled_from(INT_SPECS), st.sampled_from(FLOAT_SPECS)
INT_VALUE = st.integers(-1000, 10**7)
FLOAT_VALUE = (
    st.floats(allow_nan=True, allow_infinity=True) | st.floats(-10, 10) | st.floats(-1e-3, 1e-3)
)
GARBAGE, MUTATION = st.text(max_size=30), st.sampled_from("0123456789.-+e na_x")


@st.composite
def template_and_values(draw: st.DrawFn) -> tuple[str, dict[str, int | float]]:
    names = draw(FIELD_NAMES)
    text = draw(LITERAL)
    values: dict[str, int | float] = {}
    for i, name in enumerate(names):
        if i:
            text += draw(SEPARATOR)
        if name in ("epoch", "batch", "step"):
            spec = draw(INT_SPEC)
            values[name] = draw(INT_VALUE)
        else:
            spec = draw(FLOAT_SPEC)
            values[name] = draw(FLOAT_VALUE)
        text += f"{{{name}:{spec}}}" if spec else f"{{{name}}}"
    text += draw(LITERAL)
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


@settings(
    max_examples=400, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow]
)
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


@settings(
    max_examples=400, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow]
)
@given(template_and_values(), st.data())
def test_property_garbage_is_none_or_consistent(
    case: tuple[str, dict[str, int | float]], data: st.DataObject
) -> None:
    text, values = case
    template = _compiled(text)
    name = template.text.format(**values)
    candidates = [data.draw(GARBAGE)]
    if name:  # mutate one character of a real name
        i = data.draw(st.integers(0, len(name) - 1))
        c = data.draw(MUTATION)
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
    text = keras_csv(rows, sep)
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
