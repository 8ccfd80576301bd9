"""`core.units.iso_utc` (every time in the catalog and the JSON documents) and the listing's
finite-metrics rule (`core.views.checkpoint_json`), against their plain definitions."""

from __future__ import annotations

import math
import time

from hypothesis import given
from hypothesis import strategies as st

from ckpt_daemon.core.model import Checkpoint, CheckpointStatus
from ckpt_daemon.core.units import iso_utc
from ckpt_daemon.core.views import checkpoint_json


def reference_iso_utc(epoch_seconds: float) -> str:
    """The definition: strftime of gmtime, then the milliseconds truncated."""
    whole = int(epoch_seconds // 1)
    millis = int((epoch_seconds - whole) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"


# From 1900 to 2200: times before 1970 (an mtime can be set so) and ns-resolution fractions.
SECONDS = st.floats(min_value=-2_208_988_800.0, max_value=7_258_118_400.0, allow_nan=False)


@given(SECONDS)
def test_iso_utc_is_strftime_of_gmtime(seconds: float) -> None:
    assert iso_utc(seconds) == reference_iso_utc(seconds)


@given(st.integers(min_value=-2_208_988_800 * 10**9, max_value=7_258_118_400 * 10**9))
def test_iso_utc_of_an_mtime_in_nanoseconds_is_strftime_of_gmtime(mtime_ns: int) -> None:
    assert iso_utc(mtime_ns / 1e9) == reference_iso_utc(mtime_ns / 1e9)


def test_iso_utc_at_day_and_epoch_edges() -> None:
    for seconds in (0.0, -0.0005, -1.0, 86_399.999, 86_400.0, 951_782_400.0, 1e9, 4_102_444_799.5):
        assert iso_utc(seconds) == reference_iso_utc(seconds), seconds
    assert iso_utc(951_868_799.25) == "2000-02-29T23:59:59.250Z"
    assert iso_utc(-1.0) == "1969-12-31T23:59:59.000Z"


METRIC = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))


@given(st.dictionaries(st.text(max_size=8), METRIC, max_size=6))
def test_listed_metrics_are_the_finite_values_and_null_for_the_rest(
    values: dict[str, float | None],
) -> None:
    c = Checkpoint(
        id=1, path="/r/x.keras", run="r", root="/r", format=None, kind=None,
        status=CheckpointStatus.OK, reason=None, size_bytes=0, mtime=0.0, inode=None, hash=None,
        indexed_at=None, metrics=values,
    )  # fmt: skip
    listed = checkpoint_json(c)["metrics"]
    finite = {k: v if v is not None and math.isfinite(v) else None for k, v in values.items()}
    assert listed == finite
    assert listed is not values  # the document's own dict, never the checkpoint's
