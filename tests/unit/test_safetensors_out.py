"""The one safetensors writer (transforms.safetensors_out): header first, bytes streamed in
order, shards with an index above a size, nothing at the final name unless it verifies."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from ckpt_daemon.core.errors import CorruptCheckpoint, UsageError
from ckpt_daemon.formats import safetensors_file
from ckpt_daemon.transforms import safetensors_out
from ckpt_daemon.transforms.safetensors_out import Tensor

RNG = np.random.default_rng(0)
VALUES = {
    "a.weight": RNG.standard_normal((7, 16)).astype(np.float32),
    "a.bias": RNG.standard_normal(16).astype(np.float32),
    "head.weight": RNG.integers(0, 1 << 16, (5, 32)).astype(np.uint16),  # bf16 bit patterns
    "scale": np.array(3.5, dtype=np.float64),
}
TENSORS = [
    Tensor("a.weight", "F32", (7, 16)),
    Tensor("a.bias", "F32", (16,)),
    Tensor("head.weight", "BF16", (5, 32)),
    Tensor("scale", "F64", ()),
]


def _pieces(t: Tensor) -> list[bytes]:
    data = VALUES[t.name].tobytes()
    return [data[i : i + 100] for i in range(0, len(data), 100)]  # streamed in small pieces


def _tensors_of(path: Path) -> dict[str, tuple[str, list[int], bytes]]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    out = {}
    for name, entry in header.items():
        if name != "__metadata__":
            begin, end = entry["data_offsets"]
            out[name] = (entry["dtype"], entry["shape"], raw[8 + n + begin : 8 + n + end])
    return out


def _source(tmp_path: Path) -> Path:
    """A file of the run's folder below the root: the output takes its (folder's) mode."""
    source = tmp_path / "run" / "source.bin"
    source.parent.mkdir(exist_ok=True)
    source.write_bytes(b"x")
    return source


def test_one_file_holds_every_tensor_in_order_with_its_metadata(tmp_path: Path) -> None:
    final = tmp_path / "m.safetensors"
    written = safetensors_out.write(
        tmp_path, final, TENSORS, _pieces, like=_source(tmp_path), metadata={"k": "v"}
    )
    assert written.path == final and written.files == (final,) and written.tensors == 4
    with open(final, "rb") as f:
        info = safetensors_file.read(f)
        f.seek(0)
        assert safetensors_file.header_metadata(f) == {"format": "pt", "k": "v"}
    assert info.n_params == sum(v.size for v in VALUES.values())
    found = _tensors_of(final)
    assert list(found) == [t.name for t in TENSORS]
    for t in TENSORS:
        assert found[t.name] == (t.dtype, list(t.shape), VALUES[t.name].tobytes())
    assert (8 + struct.unpack("<Q", final.read_bytes()[:8])[0]) % 8 == 0  # data 8-aligned


def test_above_the_shard_size_a_folder_of_shards_with_its_index(tmp_path: Path) -> None:
    final = tmp_path / "run" / "m.safetensors"
    written = safetensors_out.write(
        tmp_path, final, TENSORS, _pieces, like=_source(tmp_path), shard_bytes=500
    )
    folder = tmp_path / "run" / "m"
    assert written.path == folder and not final.exists()
    names = sorted(p.name for p in folder.iterdir())
    assert names == [*safetensors_out.shard_names(2), safetensors_out.INDEX_NAME]
    index = json.loads((folder / safetensors_out.INDEX_NAME).read_text())
    assert index["metadata"]["total_size"] == sum(v.nbytes for v in VALUES.values())
    seen = {}
    for shard in safetensors_out.shard_names(2):
        for name, found in _tensors_of(folder / shard).items():
            assert index["weight_map"][name] == shard
            seen[name] = found[2]
    assert seen == {k: v.tobytes() for k, v in VALUES.items()}


def test_a_stream_short_or_long_leaves_nothing_at_the_final_name(tmp_path: Path) -> None:
    source = _source(tmp_path)
    final = tmp_path / "run" / "m.safetensors"

    def short(t: Tensor) -> list[bytes]:
        return _pieces(t)[:-1] if t.name == "head.weight" else _pieces(t)

    def long(t: Tensor) -> list[bytes]:
        return [*_pieces(t), b"\0"]

    for stream, word in ((short, "missing"), (long, "more bytes")):
        with pytest.raises(CorruptCheckpoint, match=word):
            safetensors_out.write(tmp_path, final, TENSORS, stream, like=source)
        assert sorted(p.name for p in source.parent.iterdir()) == ["source.bin"]
        with pytest.raises(CorruptCheckpoint, match=word):
            safetensors_out.write(tmp_path, final, TENSORS, stream, like=source, shard_bytes=500)
        assert sorted(p.name for p in source.parent.iterdir()) == ["source.bin"]


def test_two_tensors_of_one_name_or_an_unknown_dtype_are_refused(tmp_path: Path) -> None:
    source = _source(tmp_path)
    with pytest.raises(UsageError, match="two tensors named"):
        safetensors_out.write(
            tmp_path, tmp_path / "m.safetensors", [*TENSORS, TENSORS[0]], _pieces, like=source
        )
    with pytest.raises(UsageError, match="not a safetensors dtype"):
        safetensors_out.write(
            tmp_path, tmp_path / "m.safetensors", [Tensor("q", "Q8", (2,))], _pieces, like=source
        )


def test_a_save_of_many_files_keeps_only_a_few_open(tmp_path: Path) -> None:
    """transforms.tensor_blocks.OpenFiles: opened when first read, the least recently used
    closed beyond its limit, each reopened when read again, all closed at the end."""
    from ckpt_daemon.transforms.tensor_blocks import OpenFiles

    class TwoOpen(OpenFiles):
        LIMIT = 2

    folder = tmp_path / "save"
    folder.mkdir()
    for i in range(5):
        (folder / f"__{i}_0.distcp").write_bytes(bytes([i]) * 8)
    with TwoOpen(folder, tmp_path) as files:
        for i in [0, 1, 2, 0, 3, 4, 1]:
            assert os.pread(files.fd(f"__{i}_0.distcp"), 1, 3) == bytes([i])
            assert len(files.open) <= 2
        assert list(files.open) == ["__4_0.distcp", "__1_0.distcp"]  # the last two read
    assert files.open == {}
