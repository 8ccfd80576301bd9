"""Split real Keras checkpoints into inference artifacts (transforms.split).

Every artifact is loaded by real Keras in a child process (TensorFlow is never imported here),
next to its original, and both must predict bit-identically; the original must stay byte for
byte what it was, and `.keras` originals must still resume. A crash test SIGKILLs splits of a
~50 MB model at random moments: the original survives, nothing half-written reaches the final
name, and `remove_stale_temps` cleans up.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from ckpt_daemon.core.errors import UsageError
from ckpt_daemon.fs import fsops, temp_names
from ckpt_daemon.fs.hashing import hash_files
from ckpt_daemon.transforms.split import ArtifactMismatch, SplitResult, inference_path, split
from tests.support import forked_python

REPO = Path(__file__).resolve().parents[2]
SUPPORT = REPO / "tests" / "support"  # keras_fixtures, imported by the children
CHILD_ENV = {
    **{k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"},
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "CUDA_VISIBLE_DEVICES": "",
    "KERAS_BACKEND": "tensorflow",
    "PYTHONPATH": os.pathsep.join([str(REPO), str(SUPPORT)]),
}
OPTIMIZER_GROUPS = ("optimizer", "optimizer_weights", "metrics")

# name -> (path under keras_checkpoints, glob if templated, how a child loads it)
CASES = {
    "k3_zip": ("k3/run_zip", "*.keras", "keras"),
    "k3_weights": ("k3/run_weights", "*.weights.h5", "keras-weights"),
    "k3_legacy": ("k3/legacy", "full.h5", "keras"),
    "tfk_h5": ("tfk/run_h5", "*.hdf5", "tf_keras"),
}

# Loads each file of its batch, predicts on a fixed input (saved to an .npz), and runs the
# resume / compile checks; one interpreter per library, so TF is imported twice, not per file.
LOADER = r"""
import json, sys, warnings
import numpy as np
import keras_fixtures as kf
spec = json.loads(sys.argv[1])
warnings.simplefilter("ignore")
if spec["lib"] == "tf_keras":
    import tf_keras as K
else:
    import keras as K
x = np.random.default_rng(7).normal(size=(32, kf.N_FEATURES)).astype("float32")
preds, facts = {}, {}
for job in spec["jobs"]:
    kind, path, key = job["kind"], job["path"], job["key"]
    if kind == "load":
        preds[key] = K.models.load_model(path, compile=False).predict(x, verbose=0)
    elif kind == "weights":  # the fixture's own architecture, then load_weights
        model = kf.build_model(K, "k3_weights", kf.LR_K3)
        model.load_weights(path)
        preds[key] = model.predict(x, verbose=0)
    elif kind == "resume":  # compile=True: the stored optimizer must carry on
        model = K.models.load_model(path)
        before = int(model.optimizer.iterations.numpy())
        xs, ys = kf.make_data()
        model.fit(xs[:16], ys[:16], batch_size=16, epochs=1, verbose=0, shuffle=False)
        facts[key] = {"before": before, "after": int(model.optimizer.iterations.numpy()),
                      "optimizer": type(model.optimizer).__name__}
    elif kind == "compile":
        model = K.models.load_model(path)
        opt = getattr(model, "optimizer", None)
        facts[key] = {"compiled": bool(model.compiled),
                      "optimizer": None if opt is None else type(opt).__name__}
np.savez(spec["npz"], **preds)
print(json.dumps(facts))
"""

# A ~50 MB Keras 3 model with Adam state, as `.keras` and legacy `.h5` (the .keras first:
# an .h5 save drops the optimizer from later .keras saves: a Keras bug).
BIG_MODEL = r"""
import sys
import numpy as np
import keras
out = sys.argv[1]
keras.utils.set_random_seed(0)
layers = [keras.layers.Dense(2048, name="fc1"), keras.layers.Dense(2048, name="fc2"),
          keras.layers.Dense(10, name="head")]
model = keras.Sequential([keras.Input((64,)), *layers])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.MeanSquaredError())
rng = np.random.default_rng(0)
model.fit(rng.random((4, 64), dtype=np.float32), rng.random((4, 10), dtype=np.float32), verbose=0)
model.save(out + "/big.keras")
model.save(out + "/big.h5")
"""

# A fork server: imports the splitter once, then per source path on stdin forks a child that
# says "go <pid>" right before split() and "done <seconds>" after it. The server reaps the child
# only when told to (so its pid cannot be reused before the test's SIGKILL), then says "exit".
SPLIT_SERVER = r"""
import os, sys, time
from pathlib import Path
from ckpt_daemon.transforms.split import split
root = Path(sys.argv[1])
print("ready", flush=True)
for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        print(f"go {os.getpid()}", flush=True)
        start = time.perf_counter()
        split(root, Path(line.strip()))
        print(f"done {time.perf_counter() - start}", flush=True)
        os._exit(0)
    sys.stdin.readline()  # "reap"
    print(f"exit {os.waitpid(pid, 0)[1]}", flush=True)
"""


def source_of(keras_checkpoints: Path, case: str) -> Path:
    folder, pattern, _loader = CASES[case]
    return sorted((keras_checkpoints / folder).glob(pattern))[-1]


def in_root(root: Path, original: Path, keras_checkpoints: Path) -> Path:
    copy = root / original.relative_to(keras_checkpoints)
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(original, copy)
    return copy


def top_level(path: Path) -> tuple[set[str], set[str]]:
    """Top-level members and root attributes of an HDF5 file or of a `.keras` inner store."""
    if zipfile.is_zipfile(path):
        with (
            zipfile.ZipFile(path) as archive,
            archive.open("model.weights.h5") as inner,
            h5py.File(inner, "r") as f,
        ):
            return set(f), set(f.attrs)
    with h5py.File(path, "r", locking=False) as f:
        return set(f), set(f.attrs)


def compile_config(path: Path) -> Any:
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("config.json"))["compile_config"]


def run_child(code: str, *args: str, timeout: float = 300) -> str:
    done = forked_python.run(
        [sys.executable, "-c", code, *args],
        text=True,
        env=CHILD_ENV,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


# ---- one split of every splittable format, loaded by Keras in two children ----


class Splits:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.results: dict[str, SplitResult] = {}
        self.hashes: dict[str, tuple[str, str]] = {}  # case -> (before, after) of the original
        self.predictions: dict[str, np.ndarray] = {}
        self.facts: dict[str, Any] = {}


@pytest.fixture(scope="module")
def splits(tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path) -> Splits:
    s = Splits(tmp_path_factory.mktemp("split-root"))
    (s.root / "keep").mkdir()
    for case in CASES:
        source = in_root(s.root, source_of(keras_checkpoints, case), keras_checkpoints)
        before = hash_files([source])
        s.results[case] = split(s.root, source)
        s.hashes[case] = (before, hash_files([source]))
    zip_source = s.results["k3_zip"].source
    s.results["k3_zip_keep"] = split(s.root, zip_source, out=s.root / "keep", keep_compile=True)
    legacy_source = s.results["k3_legacy"].source
    s.results["k3_legacy_keep"] = split(
        s.root, legacy_source, out=s.root / "keep", keep_compile=True
    )
    _load_all(s)
    return s


def _load_all(s: Splits) -> None:
    batches: dict[str, list[dict[str, str]]] = {"keras": [], "tf_keras": []}
    for case, (_folder, _pattern, loader) in CASES.items():
        lib, kind = ("keras", "weights") if loader == "keras-weights" else (loader, "load")
        result = s.results[case]
        for which, path in (("original", result.source), ("artifact", result.path)):
            batches[lib].append({"kind": kind, "path": str(path), "key": f"{case}.{which}"})
    zip_case, keep = s.results["k3_zip"], s.results["k3_zip_keep"]
    batches["keras"] += [
        {"kind": "resume", "path": str(zip_case.source), "key": "resume"},
        {"kind": "compile", "path": str(zip_case.path), "key": "compile.stripped"},
        {"kind": "compile", "path": str(keep.path), "key": "compile.kept"},
    ]
    procs = {}
    for lib, jobs in batches.items():  # both libraries at once: one TF import per core
        spec = {"lib": lib, "jobs": jobs, "npz": str(s.root / f"{lib}.npz")}
        procs[lib] = forked_python.popen(
            [sys.executable, "-c", LOADER, json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=CHILD_ENV,
        )
    for lib, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{lib} loader failed:\n{err[-4000:]}"
        s.facts |= json.loads(out.strip().splitlines()[-1])
        with np.load(s.root / f"{lib}.npz") as npz:
            s.predictions |= {key: npz[key] for key in npz.files}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_artifact_predicts_bit_identically(splits: Splits, case: str) -> None:
    original = splits.predictions[f"{case}.original"]
    artifact = splits.predictions[f"{case}.artifact"]
    assert original.shape == (32, 3)
    assert np.array_equal(original, artifact)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_artifact_has_no_optimizer_state_and_original_is_untouched(
    splits: Splits, case: str
) -> None:
    result = splits.results[case]
    before, after = splits.hashes[case]
    assert before == after == hash_files([result.source])
    assert result.path == inference_path(result.source)
    assert result.bytes == result.path.stat().st_size < result.source_bytes
    assert result.source_bytes == result.source.stat().st_size
    assert result.hash == hash_files([result.path])
    assert result.datasets == 8  # Dense 2 + BatchNorm 4 + Dense 2
    members, attrs = top_level(result.path)
    source_members, source_attrs = top_level(result.source)
    assert not members & set(OPTIMIZER_GROUPS)
    assert members == source_members - set(OPTIMIZER_GROUPS)
    # An HDF5 artifact carries our marker as a root attribute (a .keras one: the zip comment).
    marked = set() if result.path.suffix == ".keras" else {"ckpt_daemon_artifact"}
    assert attrs == (source_attrs - {"training_config"}) | marked
    assert not list(splits.root.rglob(f"{temp_names.TEMP_PREFIX}*"))


@pytest.mark.slow
def test_keras_archive_is_stored_like_keras_writes_it(splits: Splits) -> None:
    result = splits.results["k3_zip"]
    with zipfile.ZipFile(result.source) as src, zipfile.ZipFile(result.path) as dst:
        assert dst.namelist() == src.namelist()
        for theirs, ours in zip(src.infolist(), dst.infolist(), strict=True):
            assert ours.compress_type == zipfile.ZIP_STORED
            assert (ours.date_time, ours.external_attr) == (theirs.date_time, theirs.external_attr)
        assert dst.read("metadata.json") == src.read("metadata.json")
        assert dst.testzip() is None
    assert compile_config(result.path) is None
    assert compile_config(result.source)["optimizer"]["class_name"] == "Adam"


@pytest.mark.slow
def test_original_keras_archive_still_resumes(splits: Splits, manifest: dict[str, Any]) -> None:
    source = splits.results["k3_zip"].source
    stored = manifest[source.relative_to(splits.root).as_posix()]["iterations"]
    assert splits.facts["resume"] == {"before": stored, "after": stored + 1, "optimizer": "Adam"}


@pytest.mark.slow
def test_keep_compile_keeps_the_compile_config(splits: Splits) -> None:
    kept, stripped = splits.results["k3_zip_keep"], splits.results["k3_zip"]
    assert kept.path == splits.root / "keep" / stripped.path.name
    assert compile_config(kept.path) == compile_config(kept.source)
    assert splits.facts["compile.kept"] == {"compiled": True, "optimizer": "Adam"}
    assert splits.facts["compile.stripped"] == {"compiled": False, "optimizer": None}
    legacy = splits.results["k3_legacy_keep"]
    members, attrs = top_level(legacy.path)
    assert "training_config" in attrs and "optimizer_weights" not in members


def test_a_recompressed_archive_with_assets_comes_out_stored(
    keras_checkpoints: Path, tmp_path: Path
) -> None:
    """`zip -9` on a `.keras` (Keras loads it) and an assets/ member: copied as they were."""
    original = source_of(keras_checkpoints, "k3_zip")
    source = tmp_path / original.name
    asset = bytes(range(256)) * 4096
    with zipfile.ZipFile(original) as src, zipfile.ZipFile(source, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            info.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(info, data)
        dst.writestr("assets/lookup/vocab.bin", asset, compress_type=zipfile.ZIP_DEFLATED)
    result = split(tmp_path, source)
    assert result.datasets == 8
    with zipfile.ZipFile(result.path) as out:
        assert out.namelist() == [*zipfile.ZipFile(original).namelist(), "assets/lookup/vocab.bin"]
        assert {i.compress_type for i in out.infolist()} == {zipfile.ZIP_STORED}
        assert out.read("assets/lookup/vocab.bin") == asset
    assert compile_config(result.path) is None
    assert top_level(result.path)[0] == {"layers", "vars"}


# ---- refusals ----


@pytest.mark.parametrize(
    ("relative", "reason"),
    [
        ("k3/tfckpt/ckpt-1", "is a TensorFlow checkpoint: .* object graph and TensorFlow"),
        ("k3/tfckpt/ckpt-1.index", "is a TensorFlow checkpoint"),
        ("k3/tfckpt/ckpt-1.data-00000-of-00001", "is a TensorFlow checkpoint"),
        ("k3/export/sm", "is a SavedModel: .* object graph and TensorFlow"),
        ("tfk/savedmodel", "is a SavedModel"),
        ("tfk/weights_only.h5", "nothing to split: .* has no optimizer state"),
        ("k3/legacy/noopt.h5", "nothing to split: .* has no optimizer state"),
    ],
)
def test_refused_formats(
    keras_checkpoints: Path, tmp_path: Path, relative: str, reason: str
) -> None:
    for part in ("k3", "tfk"):
        shutil.copytree(keras_checkpoints / part, tmp_path / part)
    before = sorted(p for p in tmp_path.rglob("*"))
    with pytest.raises(UsageError, match=reason):
        split(tmp_path, tmp_path / relative)
    assert sorted(p for p in tmp_path.rglob("*")) == before


def test_an_inference_artifact_has_nothing_left_to_split(
    keras_checkpoints: Path, tmp_path: Path
) -> None:
    source = in_root(tmp_path, source_of(keras_checkpoints, "k3_zip"), keras_checkpoints)
    artifact = split(tmp_path, source).path
    with pytest.raises(UsageError, match="nothing to split"):
        split(tmp_path, artifact)


def test_paths_outside_the_root_are_refused(keras_checkpoints: Path, tmp_path: Path) -> None:
    source = in_root(
        tmp_path / "root", source_of(keras_checkpoints, "k3_legacy"), keras_checkpoints
    )
    with pytest.raises(fsops.Refused, match="outside its root"):
        split(tmp_path / "elsewhere", source)
    (tmp_path / "out").mkdir()
    with pytest.raises(fsops.Refused, match="outside its root"):
        split(tmp_path / "root", source, out=tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("case", ["k3_zip", "k3_legacy"])
def test_a_source_changed_during_the_split_is_refused(
    keras_checkpoints: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    source = in_root(tmp_path, source_of(keras_checkpoints, case), keras_checkpoints)
    digest = hash_files([source])
    copy = h5py.Group.copy

    def copy_while_a_trainer_saves(self: h5py.Group, *args: Any, **kwargs: Any) -> None:
        stamp = source.stat().st_mtime_ns + 1_000_000
        os.utime(source, ns=(stamp, stamp))  # a trainer's save, as far as the stat can tell
        copy(self, *args, **kwargs)

    monkeypatch.setattr(h5py.Group, "copy", copy_while_a_trainer_saves)
    with pytest.raises(fsops.Refused, match="changed while being split"):
        split(tmp_path, source)
    assert not inference_path(source).exists()
    assert hash_files([source]) == digest
    assert not list(tmp_path.rglob(f"{temp_names.TEMP_PREFIX}*"))


def synthetic_store(path: Path) -> Path:
    """A Keras 3 weights store made with h5py: 20 MB rows (over one 16 MiB slab), NaN and -0.0
    weights (equal only bit for bit), a variable-length string dataset, a scalar."""
    with h5py.File(path, "w") as f:
        layer = f.create_group("layers/dense/vars")
        layer.attrs["name"] = "fc"
        wide = layer.create_dataset("0", shape=(2, 5_000_000), dtype="float32")
        wide[0] = np.arange(5_000_000, dtype="float32")
        wide[1] = np.nan
        layer.create_dataset("1", data=np.array([-0.0, np.nan, 1.5], dtype="float32"))
        f.create_dataset("vars/names", data=[b"a", b"bc"], dtype=h5py.string_dtype())
        f["vars"].attrs["name"] = "model"
        state = f.create_group("optimizer/vars")
        state.create_dataset("0", data=np.int64(3))
        state.create_dataset("2", data=np.ones((2, 5_000_000), dtype="float32"))
    return path


def test_verification_covers_wide_rows_nan_strings_and_scalars(tmp_path: Path) -> None:
    source = synthetic_store(tmp_path / "s.weights.h5")
    result = split(tmp_path, source)
    assert result.datasets == 3
    assert result.bytes < 0.55 * result.source_bytes
    with h5py.File(result.path, "r") as f:
        assert sorted(f) == ["layers", "vars"]
        assert np.isnan(f["layers/dense/vars/0"][1]).all()
        assert np.signbit(f["layers/dense/vars/1"][0])
        assert list(f["vars/names"][()]) == [b"a", b"bc"]


def test_an_artifact_that_differs_from_its_source_is_never_renamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = synthetic_store(tmp_path / "s.weights.h5")
    copy = h5py.Group.copy

    def copy_then_flip_a_weight(self: h5py.Group, src: Any, dest: Any, name: Any = None) -> None:
        copy(self, src, dest, name=name)
        if name == "layers":
            dest["layers/dense/vars/1"][2] = 2.5

    monkeypatch.setattr(h5py.Group, "copy", copy_then_flip_a_weight)
    with pytest.raises(ArtifactMismatch, match="/layers/dense/vars/1 data"):
        split(tmp_path, source)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.weights.h5"]


# ---- SIGKILL at random moments ----


@pytest.fixture(scope="module")
def big_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("big")
    run_child(BIG_MODEL, str(folder))
    return folder


class SplitServer:
    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SPLIT_SERVER, str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=CHILD_ENV,
        )
        assert self._line() == "ready"

    def _line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{line}\n")
        self.proc.stdin.flush()

    def start(self, source: Path) -> int:
        """Start a split; returns its pid once split() is about to run."""
        self._send(str(source))
        word, pid = self._line().split()
        assert word == "go"
        return int(pid)

    def finish(self) -> float | None:
        """Have the child reaped (it is dead or a zombie: its pid stays ours until now); its
        split() seconds if it completed."""
        self._send("reap")
        seconds = None
        while (line := self._line()).split()[0] != "exit":
            seconds = float(line.split()[1])
        return seconds

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0
        self.proc.stdout.close()


def _reference(server: SplitServer, source: Path) -> tuple[str, float]:
    """Splits left alone: the artifact's hash (splits are deterministic) and the longest of two
    durations (a busy machine stretches them; the kills must also land after the rename)."""
    digests, seconds = set(), []
    for _ in range(2):
        server.start(source)
        took = server.finish()
        assert took is not None
        final = inference_path(source)
        digests.add(hash_files([final]))
        seconds.append(took)
        final.unlink()
    assert len(digests) == 1
    return digests.pop(), max(seconds)


def _assert_complete(final: Path) -> None:
    if final.suffix == ".keras":
        with zipfile.ZipFile(final) as archive:
            assert archive.testzip() is None
            with archive.open("model.weights.h5") as inner, h5py.File(inner, "r") as f:
                assert "optimizer" not in f and "layers" in f
    else:
        with h5py.File(final, "r", locking=False) as f:
            assert "optimizer_weights" not in f and "model_weights" in f


@pytest.mark.slow
def test_sigkill_at_random_moments_leaves_original_intact_and_no_partial_artifact(
    big_model: Path, tmp_path: Path
) -> None:
    sources = []
    for name in ("big.keras", "big.h5"):
        shutil.copy2(big_model / name, tmp_path / name)
        sources.append(tmp_path / name)
    assert all(40e6 < p.stat().st_size < 80e6 for p in sources)
    originals = {p: hash_files([p]) for p in sources}
    server = SplitServer(tmp_path)
    references = {p: _reference(server, p) for p in sources}
    rng = random.Random(20261129)
    runs, outcomes = 16, {"complete": 0, "absent": 0, "temps left": 0}
    for i in range(runs):  # stratified: kill moments spread evenly over 0 .. 2 x duration
        for source in sources:
            digest, seconds = references[source]
            pid = server.start(source)
            time.sleep(2 * seconds * (i + rng.random()) / runs)
            os.kill(pid, signal.SIGKILL)
            server.finish()
            assert hash_files([source]) == originals[source]
            final = inference_path(source)
            if final.exists():
                _assert_complete(final)
                assert hash_files([final]) == digest
                outcomes["complete"] += 1
                final.unlink()
            else:
                outcomes["absent"] += 1
            if fsops.remove_stale_temps(tmp_path):
                outcomes["temps left"] += 1
            assert not list(tmp_path.rglob(f"{temp_names.TEMP_PREFIX}*"))
    server.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.h5", "big.keras"]
    # The kills landed both mid-write and after the rename.
    assert outcomes["temps left"] > 0 and outcomes["complete"] > 0, outcomes
