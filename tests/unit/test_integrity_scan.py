"""Issue 43 item 5: the `integrity` stage's scan of the weights. The bit patterns of each float
dtype (NaN, +/-Inf, subnormals finite, zeros, |x| > 1e30) counted as numpy judges the same
values; a tensor bigger than the scan's chunk; hostile files refused with the reason; the
result line and the health verdict `latest --resumable`, `best` and `wait` use."""

from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ckpt_daemon.core import health
from ckpt_daemon.core.errors import ConfigError, CorruptCheckpoint, NotScanned
from ckpt_daemon.core.model import Checkpoint, CheckpointStatus, Format
from ckpt_daemon.core.wait_match import WaitFor, pick, sick_news
from ckpt_daemon.formats import tensor_values, weight_scan
from ckpt_daemon.settings import pipeline as settings_pipeline
from ckpt_daemon.usecases.integrity import scan_checkpoint
from tests.support import hostile_torch

SPECIALS = [0.0, -0.0, 1.0, -2.5, np.nan, -np.nan, np.inf, -np.inf, 1e31, -3e38, 1e-45, 1e30]


def _bf16(values: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns of float32 values (their top half: truncation, as a cast keeps
    NaN and Inf)."""
    return (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _expected(values: np.ndarray) -> tuple[int, int, int, int]:
    finite = np.isfinite(values)
    return (
        int(np.isnan(values).sum()),
        int(np.isinf(values).sum()),
        int((values == 0).sum()),
        int((finite & (np.abs(values.astype(np.float64)) > 1e30)).sum()),
    )


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_ieee_patterns_are_counted_as_numpy_judges_them(dtype: str) -> None:
    with np.errstate(over="ignore"):
        values = np.array(SPECIALS, dtype=dtype)
    got = tensor_values.count(values.tobytes(), dtype)
    assert (got.nan, got.inf, got.zero, got.huge) == _expected(values)
    assert got.elements == len(SPECIALS)


def test_bfloat16_through_its_bit_pattern() -> None:
    patterns = _bf16(np.array(SPECIALS, dtype=np.float32))
    got = tensor_values.count(patterns.tobytes(), "bfloat16")
    widened = (patterns.astype(np.uint32) << 16).view(np.float32)  # what the bits are
    assert (got.nan, got.inf, got.zero, got.huge) == _expected(widened)
    # 1e-45 (float32's smallest subnormal) truncates to +0 in bfloat16; the bf16 subnormal
    # 0x0001 is finite and not zero.
    sub = tensor_values.count(np.array([0x0001, 0x8001], dtype=np.uint16).tobytes(), "bfloat16")
    assert (sub.nan, sub.inf, sub.zero) == (0, 0, 0)
    # A NaN with any payload, and both infinities, by their exponent bits.
    odd = np.array([0x7FC1, 0xFF81, 0x7F80, 0xFF80, 0x7F7F], dtype=np.uint16)
    got = tensor_values.count(odd.tobytes(), "BF16")
    assert (got.nan, got.inf, got.huge) == (2, 2, 1)  # 0x7F7F: bf16's largest, 3.39e38


def test_float16_subnormals_are_finite_and_huge_never() -> None:
    patterns = np.array([0x0001, 0x83FF, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01], dtype=np.uint16)
    got = tensor_values.count(patterns.tobytes(), "float16")
    assert (got.nan, got.inf, got.zero, got.huge) == (2, 2, 0, 0)


def test_float8_rules() -> None:
    e4m3 = tensor_values.count(bytes([0x7F, 0xFF, 0x7E, 0x78, 0x00, 0x80]), "float8_e4m3fn")
    assert (e4m3.nan, e4m3.inf, e4m3.zero) == (2, 0, 2)  # 0x78 is 256, not Inf
    e5m2 = tensor_values.count(bytes([0x7C, 0xFC, 0x7D, 0x00, 0x01]), "float8_e5m2")
    assert (e5m2.nan, e5m2.inf, e5m2.zero) == (1, 2, 1)
    e8m0 = tensor_values.count(bytes([0xFF, 0x00, 0x7F]), "float8_e8m0fnu")
    assert (e8m0.nan, e8m0.zero) == (1, 0)


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(
        np.float32,
        st.integers(0, 300),
        elements=st.one_of(st.floats(width=32), st.sampled_from([1e31, -1e31, np.nan, np.inf])),
    )
)
def test_any_float32_and_its_bfloat16_counted_as_numpy(values: np.ndarray) -> None:
    got = tensor_values.count(values.tobytes(), "float32")
    assert (got.nan, got.inf, got.zero, got.huge) == _expected(values)
    patterns = _bf16(values)
    widened = (patterns.astype(np.uint32) << 16).view(np.float32)
    got = tensor_values.count(patterns.tobytes(), "bfloat16")
    assert (got.nan, got.inf, got.zero, got.huge) == _expected(widened)


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], bytes]]) -> Path:
    """A safetensors file as the reference writer lays one out (8-byte length, JSON, bytes)."""
    header: dict[str, object] = {}
    at, data = 0, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(raw)]}
        at, data = at + len(raw), data + raw
    text = json.dumps(header).encode()
    text += b" " * (-(8 + len(text)) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def test_a_safetensors_file_each_tensor_tallied_one_bigger_than_the_chunk(tmp_path: Path) -> None:
    big = np.zeros(weight_scan.CHUNK // 4 * 3 + 5, dtype=np.float32)  # 3 chunks and a bit
    big[-1] = np.nan  # in the last, short chunk
    big[weight_scan.CHUNK // 4] = np.inf  # the first value of the second chunk
    path = write_safetensors(
        tmp_path / "model.safetensors",
        {
            "big": ("F32", [big.size], big.tobytes()),
            "zeros": ("BF16", [4], bytes(8)),
            "ids": ("I64", [2], bytes(16)),  # not floating: not tallied
            "huge": ("F64", [2], np.array([1e31, 1.0]).tobytes()),
        },
    )
    found = weight_scan.scan(path, Format.SAFETENSORS)
    by_name = {t.name: t for t in found.tallies}
    assert set(by_name) == {"big", "zeros", "huge"}
    assert (by_name["big"].nan, by_name["big"].inf, by_name["big"].elements) == (1, 1, big.size)
    assert by_name["zeros"].all_zero and by_name["huge"].huge == 1
    doc = health.result(found.tallies, len(found.files))
    assert doc["metrics"] == {
        "integrity:scanned": 1,
        "integrity:tensors": 3,
        "integrity:nonfinite_tensors": 1,
        "integrity:nan": 1,
        "integrity:inf": 1,
        "integrity:zero_tensors": 1,
        "integrity:huge_tensors": 1,
        "integrity:dense_nan_tensors": 0,
    }
    assert doc["note"].startswith("NON-FINITE: 1 of 3 tensors in 1 file (1 NaN, 1 Inf), e.g. big")
    assert doc["flagged"][0]["name"] == "big"
    assert health.unhealthy(doc["metrics"]) == (
        "integrity found non-finite weights: 1 tensor (1 NaN, 1 Inf)"
    )


def test_a_torch_zip_and_a_view_of_its_storage(tmp_path: Path) -> None:
    values = np.array([1.0, np.nan, 0.0, 0.0], dtype=np.float32)
    pkl = hostile_torch.tensor_pickle(
        {"w": ("FloatStorage", "0", 4), "b": ("FloatStorage", "1", 2)}
    )
    path = hostile_torch.torch_zip(tmp_path / "m.pt", pkl, {"0": values.tobytes(), "1": bytes(8)})
    found = weight_scan.scan(path, Format.TORCH_ZIP)
    by_name = {t.name: t for t in found.tallies}
    assert (by_name["w"].nan, by_name["w"].zero, by_name["w"].elements) == (1, 2, 4)
    assert by_name["b"].all_zero and not by_name["b"].nonfinite


def test_hostile_files_are_refused_with_the_reason(tmp_path: Path) -> None:
    short = hostile_torch.safetensors_truncated(tmp_path, tmp_path)
    with pytest.raises(CorruptCheckpoint, match="truncated"):
        weight_scan.scan(short, Format.SAFETENSORS)
    outside = tmp_path / "outside.safetensors"
    header = b'{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,1600]}}'
    outside.write_bytes(struct.pack("<Q", len(header)) + header + bytes(16))
    with pytest.raises(CorruptCheckpoint, match="needs 16 bytes"):
        weight_scan.scan(outside, Format.SAFETENSORS)
    huge = hostile_torch.safetensors_huge_header(tmp_path, tmp_path)
    with pytest.raises(CorruptCheckpoint, match="refused unread"):
        weight_scan.scan(huge, Format.SAFETENSORS)
    missing = hostile_torch.missing_storage(tmp_path, tmp_path)
    with pytest.raises(CorruptCheckpoint, match="storage is missing"):
        weight_scan.scan(missing, Format.TORCH_ZIP)
    # A view reaching past its storage: 4 floats claimed, 8 bytes stored.
    pkl = hostile_torch.tensor_pickle({"w": ("FloatStorage", "0", 4)})
    past = hostile_torch.torch_zip(tmp_path / "past.pt", pkl, {"0": bytes(8)})
    with pytest.raises(CorruptCheckpoint, match="reaches past its storage"):
        weight_scan.scan(past, Format.TORCH_ZIP)


def test_a_format_not_scanned_is_never_called_healthy() -> None:
    assert not weight_scan.scannable(Format.ORBAX)
    doc = health.not_scanned("orbax-step weights")
    assert doc["note"] == "not scanned: orbax-step weights"
    assert health.unhealthy(doc["metrics"]) is None
    assert health.summary(doc["metrics"]).startswith("not scanned")
    assert health.summary({}) is None  # no integrity stage ran


def test_the_summary_show_prints() -> None:
    finite = health.result([health.Tally("w", "float32", 4, zero=4)], 1)
    assert health.summary(finite["metrics"]) == "finite (1 tensors, 1 all-zero)"
    sick = health.result([health.Tally("w", "bfloat16", 4, nan=4)], 1)
    assert health.summary(sick["metrics"]) == "NON-FINITE: 1 tensor (4 NaN, 0 Inf)"
    assert sick["metrics"]["integrity:dense_nan_tensors"] == 1


def _row(i: int, epoch: int, metrics: dict[str, float | None], **details: object) -> Checkpoint:
    return Checkpoint(
        i, f"/r/run/e{epoch}.pt", "run", "/r", None, "full", CheckpointStatus.OK, None, 1,
        float(epoch), i, None, None, epoch=epoch, metrics=metrics, details=dict(details),
    )  # fmt: skip


def test_wait_passes_over_non_finite_weights_and_waits_for_a_pending_verdict() -> None:
    sick = health.result([health.Tally("w", "float32", 4, nan=1)], 1)["metrics"]
    fine = health.result([health.Tally("w", "float32", 4)], 1)["metrics"]
    rows = [_row(1, 1, fine), _row(2, 2, sick)]
    found = pick(rows, WaitFor("run"))
    assert found is not None and found.path == "/r/run/e1.pt"
    assert found.details["passed_over"] == [
        {"path": "/r/run/e2.pt", "reason": "integrity found non-finite weights: 1 tensor "
         "(1 NaN, 0 Inf)"}
    ]  # fmt: skip
    # Only the sick one is new: no answer yet (the wait goes on).
    assert pick(rows, WaitFor("run", newer_than=1)) is None
    assert sick_news(rows, WaitFor("run", newer_than=1)) == {"/r/run/e2.pt": health.unhealthy(sick)}
    # A verdict still to come is not answered; once recorded finite, it is.
    pending = [_row(3, 3, {}, **{health.PENDING: True})]
    assert pick(pending, WaitFor("run")) is None
    assert pick([_row(3, 3, fine)], WaitFor("run")) is not None


def test_which_checkpoints_await_an_integrity_verdict() -> None:
    stages = settings_pipeline.parse_pipeline(
        [{"name": "health", "uses": "integrity", "runs": "exp*"}, {"name": "e", "command": ["x"]}]
    )
    assert stages[0].metric_prefix == "integrity" and stages[1].metric_prefix == "e"
    row = dataclasses.replace(_row(1, 1, {}), run="exp1")
    assert health.awaits_verdict(stages, row)
    assert not health.awaits_verdict(stages, dataclasses.replace(row, run="other"))
    assert not health.awaits_verdict(stages, dataclasses.replace(row, metrics={health.SCANNED: 0}))
    assert not health.awaits_verdict(stages[1:], row)
    with pytest.raises(ConfigError, match="integrity is the built-in integrity stage's name"):
        settings_pipeline.parse_pipeline([{"name": "integrity", "command": ["x"]}])


def _valid_files(folder: Path) -> dict[Format, bytes]:
    values = np.array([1.0, np.nan, 0.0, 2.0], dtype=np.float32)
    st_path = write_safetensors(
        folder / "v.safetensors",
        {"a": ("F32", [4], values.tobytes()), "b": ("BF16", [2, 2], _bf16(values).tobytes())},
    )
    pkl = hostile_torch.tensor_pickle({"w": ("FloatStorage", "0", 4)})
    pt_path = hostile_torch.torch_zip(folder / "v.pt", pkl, {"0": values.tobytes()})
    return {Format.SAFETENSORS: st_path.read_bytes(), Format.TORCH_ZIP: pt_path.read_bytes()}


@settings(max_examples=150, deadline=None)
@given(
    fmt=st.sampled_from([Format.SAFETENSORS, Format.TORCH_ZIP]),
    cut=st.integers(0, 1 << 12),
    flips=st.lists(st.tuples(st.integers(0, 1 << 12), st.integers(1, 255)), max_size=4),
)
def test_a_damaged_file_is_scanned_or_refused_with_a_reason(
    tmp_path_factory: pytest.TempPathFactory, fmt: Format, cut: int, flips: list[tuple[int, int]]
) -> None:
    """Truncated anywhere, bytes flipped anywhere: a tally or CorruptCheckpoint, never another
    exception, never a read past the file."""
    folder = tmp_path_factory.mktemp("fuzz")
    data = bytearray(_valid_files(folder)[fmt])
    for at, xor in flips:
        data[at % len(data)] ^= xor
    path = folder / ("d.safetensors" if fmt == Format.SAFETENSORS else "d.pt")
    path.write_bytes(bytes(data[: len(data) - cut % len(data)]))
    try:
        found = weight_scan.scan(path, fmt)
    except CorruptCheckpoint as exc:
        assert str(exc)
        return
    assert all(t.elements >= 0 for t in found.tallies)


def _view_pickle(views: dict[str, tuple[int, tuple[int, ...], tuple[int, ...]]]) -> bytes:
    """torch.save's pickle of float32 views of one storage "0" of 12 elements: name ->
    (storage offset, shape, stride), as `_rebuild_tensor_v2` takes them."""

    def ints(values: tuple[int, ...]) -> bytes:
        return b"(" + b"".join(b"K" + bytes([v]) for v in values) + b"t"

    out = [b"\x80\x02}("]
    for name, (offset, shape, stride) in views.items():
        out += [
            hostile_torch._text(name),
            b"ctorch._utils\n_rebuild_tensor_v2\n(",
            b"(" + hostile_torch._text("storage") + b"ctorch\nFloatStorage\n",
            hostile_torch._text("0") + hostile_torch._text("cpu") + b"K\x0ctQ",
            b"K" + bytes([offset]) + ints(shape) + ints(stride) + b"\x89",
            b"ccollections\nOrderedDict\n)RtR",
        ]
    out.append(b"u.")
    return b"".join(out)


def test_views_of_a_storage_count_the_elements_they_reach(tmp_path: Path) -> None:
    storage = np.arange(12, dtype=np.float32)
    storage[[3, 5]] = np.nan  # 3 lies between the strided view's elements
    pkl = _view_pickle(
        {
            "strided": (1, (2, 3), (1, 4)),  # elements 1, 2, 5, 6, 9, 10: gaps
            "transposed": (0, (4, 3), (1, 4)),  # all 12, a permutation: read as a range
            "column": (2, (3,), (4,)),  # 2, 6, 10
        }
    )
    path = hostile_torch.torch_zip(tmp_path / "views.pt", pkl, {"0": storage.tobytes()})
    by_name = {t.name: t for t in weight_scan.scan(path, Format.TORCH_ZIP).tallies}
    assert (by_name["strided"].elements, by_name["strided"].nan) == (6, 1)
    assert (by_name["transposed"].elements, by_name["transposed"].nan) == (12, 2)
    assert (by_name["column"].elements, by_name["column"].nan, by_name["column"].zero) == (3, 0, 0)


def test_what_is_not_read_is_said_not_scanned(tmp_path: Path) -> None:
    """A legacy torch file (its pickle never unpickled: this one would run code) and a format
    the scan does not read: `not scanned`, with why, never healthy and never a failure."""
    legacy = hostile_torch.legacy_one_call(tmp_path, tmp_path)
    with pytest.raises(NotScanned, match="legacy"):
        weight_scan.scan(legacy, Format.TORCH_ZIP)
    row = dataclasses.replace(_row(1, 1, {}), path=str(legacy), format=Format.TORCH_LEGACY)
    doc = scan_checkpoint(row)
    assert doc["metrics"] == {"integrity:scanned": 0} and doc["note"].startswith("not scanned")
    orbax = scan_checkpoint(dataclasses.replace(row, format=Format.ORBAX))
    assert orbax["note"] == "not scanned: orbax-step weights"
    assert not (tmp_path / hostile_torch.MARKER).exists()
