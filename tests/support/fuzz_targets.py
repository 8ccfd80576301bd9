"""The readers of hostile bytes as fuzz targets, each held to a budget of CPU time and memory
per input size (issue 40 item 4: a reader must bound a cost before paying it).

`TARGETS[name](data, scratch)` lays `data` out as the reader finds it (a file, a folder with
the file in it) under `scratch` and reads it. A `CkptError` (corrupt, not a checkpoint, not
ready, refused) is a reader's answer; any other exception is a finding, so is exceeding
`budget`. Used by the CI replay of tests/fuzz_corpus/ (tests/integration/test_fuzz_corpus.py)
and by the long atheris run (bench/fuzz_readers.py).
"""

from __future__ import annotations

import contextlib
import random
import shutil
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ckpt_daemon.core.errors import CkptError, WireError
from ckpt_daemon.core.model import Format
from ckpt_daemon.formats import (
    dcp_folder,
    detect,
    hf_weights,
    metric_files,
    orbax_step,
    pickle_safe,
    rank_files,
    tb_events,
    tf_protos,
    torch_state,
)

CORPUS = Path(__file__).resolve().parents[1] / "fuzz_corpus"
BASE_CPU_S = 1.0  # any input: imports warm, a small file read
CPU_S_PER_MB = 4.0  # opcode decoding in pure Python is the slowest reader: ~2 s per 1M ops
BASE_MEMORY = 64 << 20
MEMORY_PER_BYTE = 64  # an unpickled structure can be ~50x its pickle (small objects)


def _pickle(data: bytes, _scratch: Path) -> None:
    obj, _ops = pickle_safe.read(data)
    torch_state.interpret(obj, Format.TORCH_ZIP)


def _dcp(data: bytes, scratch: Path) -> None:
    dcp_folder.foreign_globals(data)
    (scratch / dcp_folder.METADATA).write_bytes(data)
    dcp_folder.info_of(dcp_folder.read_folder(scratch, scratch))


def _file(data: bytes, scratch: Path) -> None:
    for name in ("model.pt", "model.safetensors"):  # by content, whatever the extension
        (scratch / name).write_bytes(data)
        detect.read_checkpoint(scratch / name, scratch)


def _index(data: bytes, scratch: Path) -> None:
    name = hf_weights.INDEX_FILES[0]
    (scratch / name).write_bytes(data)
    hf_weights.read_weights(scratch, frozenset({name}), scratch)


def _orbax(data: bytes, scratch: Path) -> None:
    step = scratch / "1"
    (step / "default").mkdir(parents=True)
    (step / orbax_step.STEP_METADATA).write_bytes(data)
    (step / "default" / orbax_step.ITEM_METADATA).write_bytes(data)
    (step / orbax_step.COMMIT_MARKER).write_bytes(b"")
    orbax_step.info_of(orbax_step.read_step(step, scratch))


def _events(data: bytes, _scratch: Path) -> None:
    tb_events.decode_events(data, "fuzz")  # a bad record ends the read with a note


def _protos(data: bytes, _scratch: Path) -> None:
    for decode in (tf_protos.object_graph, tf_protos.savedmodel_facts):
        with contextlib.suppress(CkptError, WireError):  # what its callers turn into a reason
            decode(data)


def _json(data: bytes, scratch: Path) -> None:
    path = scratch / "trainer_state.json"
    path.write_bytes(data)
    metric_files.read_sidecar(path, scratch)
    from ckpt_daemon.formats import hf_folder

    hf_folder.trainer_state(hf_weights.read_json(path, scratch))


def _rank_file(data: bytes, scratch: Path) -> None:
    """One rank's file of a world of one: its DTensors through the restricted unpickler, the
    placements and pieces checked (core.tiling)."""
    (scratch / "model_world_size_1_rank_0.pt").write_bytes(data)
    rank_files.read(scratch, scratch)


TARGETS: dict[str, Callable[[bytes, Path], None]] = {
    "pickle": _pickle,
    "dcp_metadata": _dcp,
    "torch_file": _file,  # torch zip, legacy torch, safetensors: detected by content
    "safetensors_index": _index,
    "orbax_metadata": _orbax,
    "tb_events": _events,
    "tf_protos": _protos,
    "json_sidecar": _json,
    "rank_file": _rank_file,  # FSDP2 / verl per-rank DTensor state dicts
}


def budget(size: int) -> tuple[float, int]:
    """(CPU seconds, bytes of memory) an input of `size` bytes may cost a reader."""
    return BASE_CPU_S + CPU_S_PER_MB * size / 1e6, BASE_MEMORY + MEMORY_PER_BYTE * size


@dataclass
class Outcome:
    answer: str  # "read", the CkptError's text, or the finding
    cpu_s: float
    peak: int
    finding: str | None = None  # an unexpected exception, or a budget exceeded


def run(target: str, data: bytes, scratch: Path, *, measure_memory: bool = True) -> Outcome:
    """One input through one reader in a fresh `scratch` folder, measured."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    if measure_memory:
        tracemalloc.start()
    started = time.process_time()
    answer, finding = "read", None
    try:
        TARGETS[target](data, scratch)
    except CkptError as exc:
        answer = str(exc)
    except Exception as exc:  # what a reader must never raise: a finding
        answer = finding = f"{type(exc).__name__}: {exc}"[:300]
    cpu_s = time.process_time() - started
    peak = 0
    if measure_memory:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    max_cpu, max_memory = budget(len(data))
    if finding is None and cpu_s > max_cpu:
        finding = f"{cpu_s:.1f} s of CPU for {len(data)} bytes (budget {max_cpu:.1f} s)"
    if finding is None and peak > max_memory:
        finding = f"{peak >> 20} MiB for {len(data)} bytes (budget {max_memory >> 20} MiB)"
    return Outcome(answer, cpu_s, peak, finding)


def seeds(target: str) -> dict[str, bytes]:
    folder = CORPUS / target
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One deterministic mutation of the kinds that find cost bugs: a byte flipped, a range cut
    or deleted, a slice repeated many times over (counts, nesting), a big integer planted."""
    if not data:
        return bytes([rng.randrange(256)])
    at = rng.randrange(len(data))
    end = min(len(data), at + rng.randrange(1, 64))
    kind = rng.randrange(6)
    if kind == 0:
        return data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1 :]
    if kind == 1:
        return data[:at]
    if kind == 2:
        return data[:at] + data[end:]
    if kind == 3:
        return data[:at] + data[at:end] * rng.choice((2, 16, 1000)) + data[end:]
    if kind == 4:
        planted = rng.choice((b"\xff" * 8, b"\x7f" + b"\xff" * 7, b"99999999999999999999"))
        return data[:at] + planted + data[at + len(planted) :]
    other = data[rng.randrange(len(data)) :][:64]
    return data[:at] + other + data[at:]
