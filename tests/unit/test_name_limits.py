"""Names of our own that embed a file's name fit in 255 bytes for every legal name, keep the
suffix readers key on, and stay distinct; a derived name that cannot fit is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ckpt_daemon.core.errors import NameTooLong
from ckpt_daemon.fs import temp_names
from ckpt_daemon.fs.name_limits import NAME_MAX, bounded, byte_length, check_fits

HEAD = ".ckpt-tmp-4194304hdeadbeef-0123abcd-"


@pytest.mark.parametrize("length", [1, 100, 219, 220, 254, 255])
@pytest.mark.parametrize("char", ["b", "é", "模"])
def test_a_temp_name_fits_for_every_legal_name_and_keeps_the_suffix(length: int, char: str) -> None:
    suffix = ".weights.h5"
    stem = char * ((length - len(suffix)) // len(char.encode()))
    name = stem + suffix
    assert byte_length(name) <= NAME_MAX
    temp = bounded(HEAD, name)
    assert byte_length(temp) <= NAME_MAX and temp.startswith(HEAD) and temp.endswith(suffix)
    temp.encode()  # cut on a character boundary: no lone surrogate
    if byte_length(HEAD + name) <= NAME_MAX:
        assert temp == HEAD + name  # short names stay readable as they were


def test_long_names_that_differ_only_at_the_start_stay_distinct() -> None:
    a, b = "a" + "x" * 240 + ".keras", "b" + "x" * 240 + ".keras"
    assert bounded(HEAD, a) != bounded(HEAD, b)


def test_undecodable_bytes_survive_the_round_trip() -> None:
    name = os.fsdecode(b"\xff" * 200 + b"-best.keras")
    temp = bounded(HEAD, name, ".tmp")
    assert byte_length(temp) <= NAME_MAX and temp.endswith("-best.keras.tmp")


def test_fsops_temp_names_are_bounded_and_parse_as_ours(tmp_path: Path) -> None:
    final = tmp_path / ("b" * 249 + ".keras")
    temp = temp_names.temp_name(final, "0123abcd", ".tmp")
    assert byte_length(temp.name) <= NAME_MAX and temp.name.startswith(temp_names.TEMP_PREFIX)
    assert not temp_names._writer_gone(temp.name)  # our live pid, as the cleanup reads it


def test_a_derived_name_that_cannot_fit_is_refused_with_the_reason() -> None:
    assert check_fits("b" * 255, "its version", "best") == "b" * 255
    with pytest.raises(NameTooLong, match="256 bytes, over the 255"):
        check_fits("b" * 256, "its version", "best")
