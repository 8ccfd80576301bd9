"""transforms.split.inference_path: the name an inference artifact gets beside (or away from)
its checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt_daemon.transforms.split import inference_path


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("e03.keras", "e03.inference.keras"),
        ("w.02.weights.h5", "w.02.inference.weights.h5"),
        ("m.h5", "m.inference.h5"),
        ("m.hdf5", "m.inference.hdf5"),
        ("M.HDF5", "M.inference.HDF5"),
        ("weights.01-1.69.hdf5", "weights.01-1.69.inference.hdf5"),
        ("model", "model.inference"),
    ],
)
def test_inference_path(name: str, expected: str) -> None:
    assert inference_path(Path("/r/run") / name) == Path("/r/run") / expected
    assert inference_path(Path("/r/run") / name, Path("/r/out")) == Path("/r/out") / expected
