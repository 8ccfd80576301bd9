"""TensorBoard event decoding (core.protowire, formats.tb_events, core.tb_scalars) on bytes made
by hand: every representation of a scalar, CRC checks, and hostile bytes becoming notes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_daemon.core.protowire import (
    WireError,
    as_int32,
    crc32c,
    fields,
    masked_crc32c,
    read_varint,
    split_tfrecords,
)
from ckpt_daemon.core.tb_scalars import Scalar, metric_key, to_metrics
from ckpt_daemon.formats.tb_events import decode_events
from tests.support.event_files import (
    event,
    field_bytes,
    field_varint,
    file_version_event,
    scalar_event,
    scalar_tensor,
    summary_value,
    tfrecord,
    varint,
)


def _f32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


# --- crc32c and framing -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "crc"),
    [
        (b"", 0),
        (b"123456789", 0xE3069283),  # the CRC-32C check value
        (bytes(32), 0x8A9136AA),  # RFC 3720 B.4 test vectors
        (b"\xff" * 32, 0x62A8AB43),
        (bytes(range(32)), 0x46DD794E),
    ],
)
def test_crc32c_known_vectors(data: bytes, crc: int) -> None:
    assert crc32c(data) == crc


def test_masked_crc_is_tfrecords() -> None:
    crc = crc32c(b"abc")
    assert masked_crc32c(b"abc") == ((((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def test_framing_splits_records() -> None:
    data = tfrecord(b"one") + tfrecord(b"") + tfrecord(b"three")
    framing = split_tfrecords(data, 10, 100)
    assert [r.data for r in framing.records] == [b"one", b"", b"three"]
    assert all(r.intact for r in framing.records)
    assert (framing.problem, framing.truncated) == (None, False)


def test_framing_stops_at_a_bad_length_crc_and_a_huge_length() -> None:
    bad = split_tfrecords(tfrecord(b"a") + tfrecord(b"b", bad_length_crc=True), 10, 100)
    assert [r.data for r in bad.records] == [b"a"]
    assert bad.problem is not None and "bad length CRC" in bad.problem
    huge_length = struct.pack("<Q", 2**62)
    huge = huge_length + struct.pack("<I", masked_crc32c(huge_length)) + b"x" * 20
    framed = split_tfrecords(tfrecord(b"a") + huge, 10, 100)  # a lie the length CRC vouches for
    assert [r.data for r in framed.records] == [b"a"]
    assert framed.problem is not None and "exceeds" in framed.problem


# --- varints and fields -------------------------------------------------------------------------


def test_varints() -> None:
    assert read_varint(varint(300), 0) == (300, 2)
    assert read_varint(varint(-1), 0) == (2**64 - 1, 10)
    assert as_int32(read_varint(varint(-5), 0)[0]) == -5
    with pytest.raises(WireError, match="longer than 10"):
        read_varint(b"\x80" * 11 + b"\x01", 0)
    with pytest.raises(WireError, match="cut short"):
        read_varint(b"\x80\x80", 0)


def test_fields_refuse_lies() -> None:
    assert list(fields(field_varint(2, 7) + field_bytes(3, b"xy"))) == [(2, 0, 7), (3, 2, b"xy")]
    with pytest.raises(WireError, match="claims"):
        list(fields(varint(3 << 3 | 2) + varint(1000) + b"short"))
    with pytest.raises(WireError, match="wire type"):
        list(fields(varint(1 << 3 | 3)))  # a group: never in these messages
    with pytest.raises(WireError, match="field number 0"):
        list(fields(b"\x00\x00"))


# --- events -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tensor", "expected"),
    [
        (scalar_tensor(0.1), _f32(0.1)),  # what tf.summary.scalar writes
        (scalar_tensor(0.1, how="float_val_packed"), _f32(0.1)),
        (scalar_tensor(0.1, how="float_val"), _f32(0.1)),
        (scalar_tensor(0.1, dtype=2, how="double_val"), 0.1),
        (scalar_tensor(0.1, dtype=2), 0.1),
        (scalar_tensor(0.5, dtype=19), 0.5),  # half
        (scalar_tensor(7, dtype=9), 7.0),  # int64
    ],
)
def test_scalar_tensors(tensor: bytes, expected: float) -> None:
    data = tfrecord(file_version_event()) + tfrecord(
        event(4, 12.5, summary_value("epoch_loss", tensor=tensor))
    )
    result = decode_events(data, "f")
    assert result.scalars == (Scalar("epoch_loss", 4, 12.5, expected),)
    assert result.notes == ()


def test_simple_value_and_negative_step() -> None:
    data = tfrecord(event(-3, 1.0, summary_value("loss", simple=0.25, plugin=None)))
    assert decode_events(data, "f").scalars == (Scalar("loss", -3, 1.0, 0.25),)


def test_non_scalar_plugins_and_tensors_are_skipped() -> None:
    histogram = summary_value("w", tensor=scalar_tensor(1.0), plugin="histograms")
    text = summary_value("note", tensor=field_varint(1, 7) + field_bytes(8, b"hi"), plugin=None)
    vector = field_varint(1, 1) + field_bytes(2, field_bytes(2, field_varint(1, 3)))
    vector += field_bytes(4, struct.pack("<3f", 1, 2, 3))
    data = tfrecord(event(0, 1.0, histogram, text, summary_value("v", tensor=vector)))
    # metadata comes with a tag's first value only: later values of "w" stay histograms
    data += tfrecord(event(1, 2.0, summary_value("w", tensor=scalar_tensor(2.0), plugin=None)))
    assert decode_events(data, "f").scalars == ()


def test_bad_data_crc_ends_the_file_keeping_what_came_before() -> None:
    good = scalar_event("epoch_loss", 0, 0.5)
    bad = tfrecord(
        event(1, 1.0, summary_value("epoch_loss", tensor=scalar_tensor(0.4))), bad_data_crc=True
    )
    result = decode_events(good + bad + scalar_event("epoch_loss", 2, 0.3), "train/f")
    assert [s.step for s in result.scalars] == [0]
    assert len(result.notes) == 1 and "bad CRC in record 1" in result.notes[0]
    assert result.notes[0].startswith("train/f: ")


def test_truncated_last_record_is_a_live_writer() -> None:
    data = scalar_event("epoch_loss", 0, 0.5) + scalar_event("epoch_loss", 1, 0.4)
    for cut in (1, 7, 13, 30):
        result = decode_events(data[:-cut], "f")
        assert [s.step for s in result.scalars] == [0]
        assert len(result.notes) == 1 and "mid-record" in result.notes[0]


def test_garbage_records_are_notes_and_later_records_still_read() -> None:
    overflow = tfrecord(varint(2 << 3) + b"\xff" * 11)  # a varint that never ends
    lie = tfrecord(field_bytes(5, field_bytes(1, b""))[:-1] + b"\x7f")  # nested length lie
    nested = field_bytes(5, varint(1 << 3 | 2) + varint(90) + b"short")
    data = overflow + lie + tfrecord(nested) + scalar_event("epoch_loss", 0, 0.5)
    result = decode_events(data, "f")
    assert [s.step for s in result.scalars] == [0]
    assert len(result.notes) == 3 and all("is not an Event" in n for n in result.notes)


def test_record_limit_and_note_cap() -> None:
    data = b"".join(scalar_event("epoch_loss", i, 0.5) for i in range(10))
    limited = decode_events(data, "f", max_records=4)
    assert len(limited.scalars) == 4 and "stopped after 4 records" in limited.notes[0]
    junk = b"".join(tfrecord(b"\x00\x00") for _ in range(20))
    notes = decode_events(junk, "f").notes
    assert len(notes) == 6 and notes[-1] == "f: 15 more problems"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 3))
def test_hostile_bytes_never_raise(junk: bytes, framed: int) -> None:
    data = tfrecord(junk) if framed else junk  # framed junk reaches the protobuf decoder
    if framed == 2:
        data = scalar_event("epoch_loss", 0, 0.5) + data
    if framed == 3:
        data = tfrecord(field_bytes(5, junk))
    result = decode_events(data, "f")
    assert all(isinstance(s.value, float) for s in result.scalars)


# --- tags to metrics ----------------------------------------------------------------------------


def test_keras_tags_to_metric_names() -> None:
    assert metric_key("epoch_loss", "train") == ("epoch", "loss")
    assert metric_key("epoch_loss", "validation") == ("epoch", "val_loss")
    assert metric_key("epoch_learning_rate", "train") == ("epoch", "learning_rate")
    assert metric_key("batch_accuracy", "train") == ("step", "accuracy")
    assert metric_key("evaluation_loss_vs_iterations", "validation") == ("step", "val_loss")
    assert metric_key("custom/lr", "logs") == ("step", "custom/lr")
    assert metric_key("epoch_val_loss", "validation") == ("epoch", "val_loss")


def test_to_metrics_keys_epochs_one_based_and_keeps_the_latest_time() -> None:
    scalars = [
        Scalar("epoch_loss", 0, 10.0, 0.5),
        Scalar("epoch_accuracy", 0, 10.5, 0.6),
        Scalar("epoch_loss", 1, 20.0, 0.4),
        Scalar("epoch_loss", -1, 30.0, 9.0),
        Scalar("batch_loss", 7, 15.0, 0.45),
        Scalar("epoch_loss", 1, 25.0, 0.35),  # a resumed writer's later value wins
    ]
    metrics = to_metrics(scalars, "train")
    assert metrics.by_epoch == {1: {"loss": 0.5, "accuracy": 0.6}, 2: {"loss": 0.35}}
    assert metrics.by_step == {7: {"loss": 0.45}}
    assert metrics.epoch_times == {1: 10.5, 2: 25.0}
    assert metrics.epochs == 2
