"""compress: real Keras checkpoints rewritten with gzip / lzf / zstd, then loaded back by Keras.

TensorFlow and Keras never run in the pytest process. Child processes import Keras (or
tf-keras) and then this module (`child_main`): `--make-k3 OUT` / `--make-tfk OUT` write wider
models than the session fixture (whose datasets are all under 1 KiB, so they stay raw) and a
~50 MB one for the crash test; `--load SPEC` loads files and prints digests of predictions.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from ckpt_daemon.core.errors import UsageError
from ckpt_daemon.fs import fsops, temp_names
from ckpt_daemon.fs.hashing import hash_files
from ckpt_daemon.transforms import chunk_codecs, h5_copy
from ckpt_daemon.transforms import compress as cz
from tests.support import forked_python

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SUPPORT = REPO / "tests" / "support"  # keras_fixtures, imported by the children
WIDE = {"n_in": 1001, "hidden": 1500, "n_out": 10}  # fc1 kernel 6 MB: two chunks, a padded edge
CRASH = {"n_in": 1024, "hidden": 2048, "n_out": 1024}  # ~4.2 M params + Adam: ~50 MB
CHILD_ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(REPO), str(SUPPORT)]),
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "KERAS_BACKEND": "tensorflow",
}
CHILD_ENV.pop("TF_USE_LEGACY_KERAS", None)
CHILD_ENV.pop("HDF5_PLUGIN_PATH", None)  # readers get no plugin help from the environment

# (fixture-relative path, how to load it, model builder for weights files, check resume)
K3_FIXTURES = [
    ("k3/run_zip/*.keras", "model", None, True),
    ("k3/schedule/lr_schedule.keras", "model", None, True),
    ("k3/run_weights/w.02.weights.h5", "weights", ["fixture", "k3_weights", "LR_K3"], False),
    ("k3/legacy/full.h5", "model", None, False),
]
TFK_FIXTURES = [
    ("tfk/run_h5/weights.02-*.hdf5", "model", None, False),
    ("tfk/weights_only.h5", "weights", ["fixture", "tfk_model", "LR_TFK"], False),
]
K3_WIDE = [
    ("wide.keras", "model", None, True),
    ("wide.weights.h5", "weights", ["wide", "wide_k3"], False),
    ("wide.h5", "model", None, False),
]
TFK_WIDE = [
    ("wide_tfk.hdf5", "model", None, False),
    ("wide_tfk_weights.h5", "weights", ["wide", "wide_tfk"], False),
]


# ---------------------------------------------------------------- child processes (Keras here)


def wide_model(k: Any, name: str, n_in: int, hidden: int, n_out: int) -> Any:
    inp = k.Input(shape=(n_in,), name="x")
    h = k.layers.Dense(hidden, name="fc1")(inp)
    h = k.layers.BatchNormalization(name="bn")(h)
    h = k.layers.Activation("relu", name="act")(h)
    model = k.Model(inp, k.layers.Dense(n_out, name="head")(h), name=name)
    model.compile(optimizer=k.optimizers.Adam(2.0**-9), loss=k.losses.MeanSquaredError())
    return model


def fitted(k: Any, name: str, shape: dict[str, int]) -> Any:
    model = wide_model(k, name, **shape)
    rng = np.random.default_rng(7)
    x = rng.normal(size=(8, shape["n_in"])).astype("float32")
    y = rng.normal(size=(8, shape["n_out"])).astype("float32")
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)  # Adam slots and iterations exist
    return model


def make_k3(out: Path) -> None:
    import keras

    keras.utils.set_random_seed(1)
    wide, crash = fitted(keras, "wide_k3", WIDE), fitted(keras, "crash", CRASH)
    wide.save(out / "wide.keras")
    crash.save(out / "crash.keras")
    wide.save_weights(out / "wide.weights.h5")
    wide.save(out / "wide.h5")  # .h5 saves last: they drop the optimizer of later .keras (B2)
    crash.save(out / "crash.h5")


def make_tfk(out: Path) -> None:
    import tf_keras

    tf_keras.utils.set_random_seed(1)
    wide = fitted(tf_keras, "wide_tfk", WIDE)
    wide.save(str(out / "wide_tfk.hdf5"))
    wide.save_weights(str(out / "wide_tfk_weights.h5"))


def load_all(spec: dict[str, Any]) -> dict[str, Any]:
    """Load every file; zstd files first without hdf5plugin (must fail), then with it."""
    import importlib

    k = importlib.import_module(spec["lib"])
    import keras_fixtures

    def load(item: dict[str, Any]) -> dict[str, Any]:
        if item["load"] == "model":
            model = k.models.load_model(item["path"])
        else:
            kind, name, *rest = item["build"]
            if kind == "fixture":
                lr = getattr(keras_fixtures, rest[0])
                model = keras_fixtures.build_model(k, name, lr)
            else:
                model = wide_model(k, name, **WIDE)
            model.load_weights(item["path"])
        x = np.random.default_rng(3).normal(size=(4, model.input_shape[-1])).astype("float32")
        pred = np.asarray(model(x, training=False)).tobytes()
        row: dict[str, Any] = {"pred": hashlib.sha256(pred).hexdigest()}
        if item["resume"]:
            state = b"".join(np.asarray(v).tobytes() for v in model.optimizer.variables)
            row["iterations"] = int(np.asarray(model.optimizer.iterations))
            row["optimizer"] = hashlib.sha256(state).hexdigest()
        return row

    rows = {item["path"]: load(item) for item in spec["plain"]}
    rows["plugin_before"] = "hdf5plugin" in sys.modules
    for item in spec["zstd"]:
        try:
            load(item)
            rows[item["path"] + "#without"] = "loaded"
        except Exception as exc:
            rows[item["path"] + "#without"] = f"{type(exc).__name__}: {exc}"[:300]
    import hdf5plugin  # noqa: F401

    rows |= {item["path"]: load(item) for item in spec["zstd"]}
    return rows


def child_main(argv: list[str]) -> int:
    flag, arg = argv
    if flag == "--load":
        print(json.dumps(load_all(json.loads(Path(arg).read_text()))))
    else:
        (make_k3 if flag == "--make-k3" else make_tfk)(Path(arg))
    return 0


# ---------------------------------------------------------------- helpers


# A child imports its Keras first, as a consumer would: TensorFlow sets HDF5_PLUGIN_PATH to
# "disable" only if it is imported before h5py; this module imports h5py.
CHILD = (
    "import importlib, sys; importlib.import_module(sys.argv[1]); "
    "from tests.integration import test_compress; test_compress.child_main(sys.argv[2:])"
)


def run_children(argvs: list[list[str]], timeout: float = 300) -> list[str]:
    """Run this file's child modes at once (two cores); their stdouts. argv[0]: what to import
    first ("keras" or "tf_keras")."""
    procs = [
        forked_python.popen(
            [sys.executable, "-c", CHILD, *argv],
            env=CHILD_ENV,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for argv in argvs
    ]
    outs = []
    for argv, proc in zip(argvs, procs, strict=True):
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, f"child {argv} failed:\n{err[-4000:]}"
        outs.append(out)
    return outs


def h5_bytes(path: Path) -> io.BytesIO | Path:
    """An HDF5 file's bytes: the file itself, or a .keras archive's weights member."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            return io.BytesIO(archive.read(cz.KERAS_MEMBER))
    return path


def value_key(value: Any) -> tuple[str, Any, Any]:
    a = np.asarray(value)
    data = repr(a.tolist()) if a.dtype.hasobject else hashlib.sha256(a.tobytes()).hexdigest()
    return a.dtype.str, a.shape, data


def contents(path: Path) -> dict[str, Any]:
    """Every group, dataset and attribute: HDF5 types, shapes and a digest of the values."""
    import hdf5plugin  # noqa: F401  (zstd files)

    def attrs(obj: Any) -> dict[str, Any]:
        return {
            # HDF5 types compare with H5Tequal: string sets, padding and lengths count
            name: (h5py.h5a.open(obj.id, name.encode()).get_type(), value_key(obj.attrs[name]))
            for name in obj.attrs
        }

    with h5py.File(h5_bytes(path), "r", locking=False) as f:
        found: dict[str, Any] = {"/": ("group", attrs(f))}

        def visit(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Group):
                found[name] = ("group", attrs(obj))
                return
            found[name] = ("dataset", obj.id.get_type(), value_key(obj[()]), attrs(obj))

        f.visititems(visit)
    return found


def datasets(path: Path) -> list[dict[str, Any]]:
    """Storage layout of every dataset: shape, bytes, chunks, filter pipeline [(id, values)]."""
    found: list[dict[str, Any]] = []

    def visit(name: str, d: Any) -> None:
        if isinstance(d, h5py.Dataset):
            plist = d.id.get_create_plist()
            pipeline = [plist.get_filter(i)[::2] for i in range(plist.get_nfilters())]
            found.append(
                {"name": name, "shape": d.shape, "nbytes": d.nbytes, "chunks": d.chunks}
                | {"itemsize": d.dtype.itemsize, "filters": pipeline}
            )

    with h5py.File(h5_bytes(path), "r", locking=False) as f:
        f.visititems(visit)
    return found


def one(folder: Path, pattern: str) -> Path:
    return sorted(folder.glob(pattern))[-1]


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def wide_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wide")
    run_children([["keras", "--make-k3", str(out)], ["tf_keras", "--make-tfk", str(out)]])
    return out


@pytest.fixture(scope="module")
def cases(
    tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path, wide_dir: Path
) -> dict[tuple[str, str], tuple[Path, Path, cz.CompressResult, dict[str, Any]]]:
    """(codec, name) -> (original, compressed copy, result, load item), for every test file."""
    root = tmp_path_factory.mktemp("root")
    sources = [
        (one(keras_checkpoints, p), lib, load, build, resume)
        for lib, table in (("keras", K3_FIXTURES), ("tf_keras", TFK_FIXTURES))
        for p, load, build, resume in table
    ] + [
        (wide_dir / p, lib, load, build, resume)
        for lib, table in (("keras", K3_WIDE), ("tf_keras", TFK_WIDE))
        for p, load, build, resume in table
    ]
    found = {}
    for original, lib, load, build, resume in sources:
        is_wide = original.parent == wide_dir
        for codec in ("gzip", "lzf", "zstd") if is_wide else ("gzip", "lzf"):
            copy = root / codec / lib / original.name
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(original, copy)
            result = cz.compress(root, copy, codec=codec)
            item = {"lib": lib, "load": load, "build": build, "resume": resume, "wide": is_wide}
            found[(codec, f"{lib}:{original.name}")] = (original, copy, result, item)
    return found


@pytest.fixture(scope="module")
def loads(cases: dict[Any, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Keras 3 and tf-keras children, at once, load originals and compressed files."""
    tmp = tmp_path_factory.mktemp("loads")
    argvs = []
    for lib in ("keras", "tf_keras"):
        spec: dict[str, Any] = {"lib": lib, "plain": [], "zstd": []}
        for (codec, _name), (original, copy, _result, item) in sorted(cases.items()):
            if item["lib"] != lib:
                continue
            base = {k: item[k] for k in ("load", "build", "resume")}
            spec["zstd" if codec == "zstd" else "plain"].append({**base, "path": str(copy)})
            if codec == "gzip":
                spec["plain"].append({**base, "path": str(original)})
        (tmp / f"{lib}.json").write_text(json.dumps(spec))
        argvs.append([lib, "--load", str(tmp / f"{lib}.json")])
    rows: dict[str, Any] = {}
    for lib, out in zip(("keras", "tf_keras"), run_children(argvs), strict=True):
        rows[lib] = json.loads(out.strip().splitlines()[-1])
    return rows


# ---------------------------------------------------------------- tests


def test_every_dataset_and_attribute_reads_back_as_the_original(cases: dict[Any, Any]) -> None:
    for (codec, name), (original, copy, result, _item) in cases.items():
        assert contents(copy) == contents(original), (codec, name)
        assert result.datasets == len(datasets(original)), (codec, name)


def test_result_describes_the_new_file(cases: dict[Any, Any]) -> None:
    labels = {"gzip": "gzip-4+shuffle", "lzf": "lzf+shuffle", "zstd": "zstd-3+shuffle"}
    for (codec, name), (original, copy, result, item) in cases.items():
        assert result.path == copy
        assert result.codec == labels[codec]
        assert result.needs == ("import hdf5plugin" if codec == "zstd" else None)
        assert result.bytes_before == original.stat().st_size
        assert result.bytes_after == copy.stat().st_size
        assert result.hash == hash_files([copy])
        if item["wide"] and codec != "lzf":  # float weights: shuffle + gzip/zstd save ~15 %
            assert result.bytes_after < 0.9 * result.bytes_before, (codec, name)
    root = copy.parent.parent.parent  # root/codec/lib/name
    assert not list(root.rglob(f"{temp_names.TEMP_PREFIX}*"))


def test_big_datasets_chunked_with_the_codec_small_ones_raw(cases: dict[Any, Any]) -> None:
    codec_filter = {
        "gzip": (1, (4,)),
        "lzf": (32000, None),
        "zstd": (chunk_codecs.ZSTD_FILTER, (3,)),
    }
    checked = 0
    for (codec, name), (_original, copy, _result, _item) in cases.items():
        for d in datasets(copy):
            where = (codec, name, d["name"])
            if not d["shape"] or d["nbytes"] < h5_copy.TINY_BYTES:
                assert d["chunks"] is None and d["filters"] == [], where
                continue
            chunk_bytes = np.prod(d["chunks"]) * d["itemsize"]
            if d["nbytes"] <= h5_copy.SLAB_BYTES:
                assert d["chunks"] == d["shape"], where  # one chunk: the whole dataset
            else:
                assert 0.5 * h5_copy.SLAB_BYTES < chunk_bytes <= h5_copy.SLAB_BYTES, where
            (shuffle_id, shuffle_opts), (filter_id, opts) = d["filters"]
            assert (shuffle_id, shuffle_opts) == (2, (d["itemsize"],)), where
            assert filter_id == codec_filter[codec][0], where
            assert codec == "lzf" or opts == codec_filter[codec][1], where
            checked += 1
    assert checked >= 30


def test_keras_archive_keeps_members_in_order_all_stored(cases: dict[Any, Any]) -> None:
    for (codec, name), (original, copy, _result, _item) in cases.items():
        if not name.endswith(".keras"):
            continue
        with zipfile.ZipFile(original) as old, zipfile.ZipFile(copy) as new:
            assert [i.filename for i in new.infolist()] == [i.filename for i in old.infolist()]
            assert {i.compress_type for i in new.infolist()} == {zipfile.ZIP_STORED}
            assert new.testzip() is None
            for info in old.infolist():
                if info.filename != cz.KERAS_MEMBER:
                    assert new.read(info.filename) == old.read(info.filename), (codec, name)
                    assert new.getinfo(info.filename).date_time == info.date_time


def test_keras_loads_compressed_files_bit_identical_without_extra_import(
    cases: dict[Any, Any], loads: dict[str, Any]
) -> None:
    for (codec, name), (original, copy, _result, item) in cases.items():
        rows = loads[item["lib"]]
        assert rows[str(copy)]["pred"] == rows[str(original)]["pred"], (codec, name)
        if item["resume"]:  # .keras: the optimizer comes back, iterations and slots equal
            assert rows[str(copy)]["iterations"] == rows[str(original)]["iterations"] > 0
            assert rows[str(copy)]["optimizer"] == rows[str(original)]["optimizer"]
    assert loads["keras"]["plugin_before"] is False
    assert loads["tf_keras"]["plugin_before"] is False


def test_keras_resume_from_compressed_archive_matches_the_manifest(
    cases: dict[Any, Any], loads: dict[str, Any], manifest: dict[str, Any], keras_checkpoints: Path
) -> None:
    for (_codec, _name), (original, copy, _result, item) in cases.items():
        if item["resume"] and not item["wide"]:
            truth = manifest[original.relative_to(keras_checkpoints).as_posix()]
            assert loads["keras"][str(copy)]["iterations"] == truth["iterations"]


def test_zstd_loads_only_after_import_hdf5plugin(
    cases: dict[Any, Any], loads: dict[str, Any]
) -> None:
    seen = 0
    for (codec, name), (original, copy, _result, item) in cases.items():
        if codec != "zstd":
            continue
        rows = loads[item["lib"]]
        failure = rows[str(copy) + "#without"]
        assert failure != "loaded", name
        assert failure.split(":")[0] in ("OSError", "ValueError"), failure
        assert rows[str(copy)]["pred"] == rows[str(original)]["pred"], name
        seen += 1
    assert seen == len(K3_WIDE) + len(TFK_WIDE)


def test_refuses_tensorflow_checkpoints_and_savedmodels(
    tmp_path: Path, keras_checkpoints: Path
) -> None:
    for part in ("k3", "tfk"):
        shutil.copytree(keras_checkpoints / part, tmp_path / part)
    targets = ["k3/tfckpt/ckpt-1", "k3/tfckpt/ckpt-1.index", "k3/export/sm", "tfk/savedmodel"]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    for rel in targets:
        with pytest.raises(UsageError, match=r"not HDF5|neither HDF5") as err:
            cz.compress(tmp_path, tmp_path / rel)
        assert "\n" not in str(err.value)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_bad_options_are_usage_errors(tmp_path: Path, wide_dir: Path) -> None:
    target = tmp_path / "wide.h5"
    shutil.copyfile(wide_dir / "wide.h5", target)
    for kwargs in ({"codec": "bz2"}, {"codec": "gzip", "level": 10}, {"codec": "lzf", "level": 1}):
        with pytest.raises(UsageError):
            cz.compress(tmp_path, target, **kwargs)
    assert target.read_bytes() == (wide_dir / "wide.h5").read_bytes()


def test_level_no_shuffle_and_recompressing_a_compressed_file(
    tmp_path: Path, wide_dir: Path
) -> None:
    target = tmp_path / "wide.h5"
    shutil.copyfile(wide_dir / "wide.h5", target)
    result = cz.compress(tmp_path, target, codec="gzip", level=1, shuffle=False, workers=1)
    assert result.codec == "gzip-1"
    big = [d["filters"] for d in datasets(target) if d["chunks"]]
    assert big and all(pipeline == [(1, (1,))] for pipeline in big)  # deflate 1, no shuffle
    again = cz.compress(tmp_path, target, codec="zstd", level=5)
    assert again.codec == "zstd-5+shuffle" and again.bytes_before == result.bytes_after
    assert contents(target) == contents(wide_dir / "wide.h5")


def test_odd_objects_and_attribute_types_are_kept_exactly(tmp_path: Path, wide_dir: Path) -> None:
    """Strings, compounds, links, empty attributes, ordered groups, incompressible chunks."""
    target = tmp_path / "wide.h5"
    shutil.copyfile(wide_dir / "wide.h5", target)
    noise = np.random.default_rng(0).integers(0, 256, 200_000, dtype=np.uint8)
    with h5py.File(target, "a") as f:
        extra = f.create_group("extra", track_order=True)
        for name in ("z", "b", "a"):
            extra.create_group(name)
        extra["noise"] = noise  # lzf cannot shrink it: stored with lzf skipped (filter mask)
        extra["big_endian"] = np.arange(5000, dtype=">f8")
        extra["names"] = np.array(["α", "beta"], dtype=h5py.string_dtype("utf-8"))
        extra["pairs"] = np.zeros(300, dtype=[("a", "<i4"), ("b", "<f8")])
        extra["alias"] = h5py.SoftLink("/extra/noise")
        fixed = h5py.string_dtype("utf-8", 12)
        extra.attrs.create("fixed_utf8", np.array("ünï".encode(), dtype=fixed), dtype=fixed)
        extra.attrs["vlen"] = "text"
        extra.attrs["empty"] = h5py.Empty("f4")
        extra.attrs["array"] = np.arange(6, dtype="<u2").reshape(2, 3)
    original = contents(target)
    result = cz.compress(tmp_path, target, codec="lzf")
    assert contents(target) == original
    with h5py.File(target, "r") as f:
        assert list(f["extra"]) == ["z", "b", "a", "noise", "big_endian", "names", "pairs", "alias"]
        assert f["extra"].get("alias", getlink=True).path == "/extra/noise"
        assert f["extra/noise"].id.get_chunk_info(0).filter_mask == 0b10  # lzf skipped
        assert f["extra/big_endian"].dtype == np.dtype(">f8") and f["extra/big_endian"].chunks
    assert result.datasets == original_datasets(original)


def original_datasets(found: dict[str, Any]) -> int:
    return sum(entry[0] == "dataset" for entry in found.values())


def test_hdf5_write_path_gives_the_same_data(
    tmp_path: Path, wide_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a native encoder a codec falls back to HDF5's own filters; same result."""
    monkeypatch.setattr(chunk_codecs, "_encoder", lambda codec, level: None)
    for codec in chunk_codecs.CODECS:
        for name in ("wide.h5", "wide.keras"):
            target = tmp_path / codec / name
            target.parent.mkdir(exist_ok=True)
            shutil.copyfile(wide_dir / name, target)
            cz.compress(tmp_path, target, codec=codec)
            assert contents(target) == contents(wide_dir / name), (codec, name)
            assert any(d["chunks"] for d in datasets(target))


def test_source_changed_during_compression_is_refused(
    tmp_path: Path, wide_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "wide.h5"
    shutil.copyfile(wide_dir / "wide.h5", target)
    real = cz.verify_group

    def touch_then_verify(src: Any, dst: Any) -> None:
        os.utime(target, ns=(time.time_ns(), time.time_ns() + 10**9))  # a trainer's save
        real(src, dst)

    monkeypatch.setattr(cz, "verify_group", touch_then_verify)
    with pytest.raises(fsops.Refused, match="changed while being compressed"):
        cz.compress(tmp_path, target)
    assert target.read_bytes() == (wide_dir / "wide.h5").read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["wide.h5"]


# Imports once, then forks one compress per request, so that every kill lands in compress()
# and not in the interpreter's start-up. In: "root target codec", the pid comes out; then in:
# "kill" or "wait", the exit status comes out. The forker kills its own unreaped child (at
# worst a zombie), so no other process can ever get the signal.
FORKER = """
import os, sys, traceback
from pathlib import Path
import hdf5plugin
from ckpt_daemon.transforms.compress import compress
for line in sys.stdin:
    root, target, codec = line.split()
    pid = os.fork()
    if pid == 0:
        try:
            compress(Path(root), Path(target), codec=codec)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    print(pid, flush=True)
    if sys.stdin.readline() == "kill\\n":
        os.kill(pid, 9)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


def crash_runs(original: Path, folder: Path, codec: str, runs: int, seed: int) -> dict[str, int]:
    """Compress a copy of `original` in `folder` again and again, SIGKILLed at spread-out random
    points (and a few after it finished); check the name after each kill."""
    rng = random.Random(seed)
    folder.mkdir()
    target = folder / original.name
    truth = (hash_files([original]), contents(original))
    forker = subprocess.Popen(
        [sys.executable, "-c", FORKER], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert forker.stdin is not None and forker.stdout is not None

    def send(line: str) -> int:
        forker.stdin.write(f"{line}\n".encode())  # type: ignore[union-attr]
        forker.stdin.flush()  # type: ignore[union-attr]
        return int(forker.stdout.readline())  # type: ignore[union-attr]

    def run(kill_after: float | None) -> float:
        shutil.copyfile(original, target)
        send(f"{folder} {target} {codec}")
        began = time.monotonic()
        if kill_after is not None:
            time.sleep(kill_after)
        status = send("wait" if kill_after is None else "kill")
        assert status in ((0, -signal.SIGKILL) if kill_after else (0,)), status
        return time.monotonic() - began

    try:
        whole = run(None)  # undisturbed: how long one compression takes
        assert contents(target) == truth[1]
        outcomes = {"original": 0, "compressed": 0}

        def judge(kill_after: float, i: int) -> None:
            run(kill_after)
            if hash_files([target]) == truth[0]:
                outcomes["original"] += 1
            else:  # a swapped-in file must be whole: every dataset and attribute as the original
                assert contents(target) == truth[1], (original.name, i)
                outcomes["compressed"] += 1
            fsops.remove_stale_temps(folder)
            assert [p.name for p in folder.iterdir()] == [original.name], (original.name, i)

        for i in range(runs):
            judge(whole * 1.15 * (i + rng.random()) / runs, i)
        # A loaded machine may make every run slower than the undisturbed one: then kill later
        # (and earlier, the other way), until each outcome was seen, so the test never depends
        # on how busy the machine is.
        late, early = whole * 2, whole / runs / 4
        for i in range(8):
            if outcomes["compressed"] and outcomes["original"]:
                break
            judge(late if not outcomes["compressed"] else early, runs + i)
            late, early = late * 2, early / 2
    finally:
        forker.stdin.close()
        forker.wait(timeout=60)
        forker.stdout.close()
    return outcomes


def test_sigkill_leaves_the_original_or_a_complete_compressed_file(
    tmp_path: Path, wide_dir: Path
) -> None:
    """30 SIGKILLs at random points, .h5 and .keras side by side (two cores): the name holds
    the original bytes or a complete compressed file, never a half-written one; our leftover
    temporary files go with `remove_stale_temps`."""
    jobs = [("crash.h5", "gzip"), ("crash.keras", "zstd")]
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = [
            pool.submit(crash_runs, wide_dir / name, tmp_path / codec, codec, 15, seed)
            for seed, (name, codec) in enumerate(jobs)
        ]
        results = [future.result() for future in futures]
    for outcomes in results:
        assert outcomes["original"] >= 1 and outcomes["compressed"] >= 1, results
