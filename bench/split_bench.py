"""Split cost and what it buys: time against `cp` of the output, the splitter's own peak RSS,
output size against the full checkpoint, and the peak RSS of `load_model` on the full
checkpoint (compile=True) against the inference artifact (compile=False).

Checkpoints (made once in bench/out/split/ by Keras 3 and tf-keras children): ResNet50 with
Adam state (~308 MB) as Keras 3 `.keras` and legacy `.h5` and as tf-keras `.h5`, plus a ~31 MB
MobileNetV2(alpha=0.75) as `.keras` and `.h5` to show the splitter's RSS does not grow with size.
`--quick`: MobileNetV2(alpha=1.0) (~42 MB) as the big model, alpha=0.35 (~20 MB) as the small.

    python3 bench/split_bench.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import (
    CHILD_ENV,
    OUT,
    PYTHON,
    Check,
    Timing,
    interleaved,
    median,
    report,
    run_cmd,
    table,
)

ROOT = OUT / "split"
MB = 1e6
ENV = {**{k: v for k, v in CHILD_ENV.items() if k != "TF_USE_LEGACY_KERAS"}}
ENV["KERAS_BACKEND"] = "tensorflow"

# argv: lib arch alpha out... ; two Adam steps on random images, then one save per `out`
# (.keras before .h5: an .h5 save drops the optimizer from later .keras saves, bug B2).
MAKE = r"""
import os, sys
from pathlib import Path
import numpy as np
lib, arch, alpha, outs = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
if lib == "tf_keras":
    import tf_keras as K
else:
    import keras as K
K.utils.set_random_seed(0)
if arch == "resnet50":
    model = K.applications.ResNet50(weights=None)
else:
    model = K.applications.MobileNetV2(weights=None, alpha=alpha)
model.compile(optimizer=K.optimizers.Adam(1e-3), loss=K.losses.SparseCategoricalCrossentropy())
rng = np.random.default_rng(0)
x = rng.random((4, 224, 224, 3), dtype=np.float32)
model.fit(x, rng.integers(0, 1000, 4), batch_size=2, epochs=1, verbose=0)
for out in outs:
    part = Path(out).with_name(".part-" + Path(out).name)
    model.save(str(part))
    os.replace(part, out)
"""

SPLIT = r"""
import json, os, resource, sys, time
from pathlib import Path
from ckpt_daemon.formats.detect import read_checkpoint
from ckpt_daemon.fs.hashing import hash_files
from ckpt_daemon.transforms.split import split
with open("/proc/self/statm") as f:
    base = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
start = time.perf_counter()
r = split(Path(sys.argv[1]), Path(sys.argv[2]))
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
heavy = sorted({"tensorflow", "keras", "tf_keras"} & set(sys.modules))
assert not heavy, heavy
start = time.perf_counter()  # two parts of the split, again, for the breakdown
read_checkpoint(r.source)
detect = time.perf_counter() - start
start = time.perf_counter()
hash_files([r.path])
hashing = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "base_rss": base, "peak_rss": peak, "bytes": r.bytes,
                  "source_bytes": r.source_bytes, "datasets": r.datasets, "path": str(r.path),
                  "detect": detect, "hash": hashing}))
"""

LOAD = r"""
import importlib, json, resource, sys, time, warnings
warnings.simplefilter("ignore")
K = importlib.import_module(sys.argv[1])
after_import = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
start = time.perf_counter()
if sys.argv[2] != "-":
    K.models.load_model(sys.argv[2], compile=sys.argv[3] == "1")
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": seconds, "import_peak": after_import, "peak_rss": peak}))
"""


@dataclass(frozen=True)
class Model:
    lib: str
    arch: str
    alpha: float
    stem: str
    suffixes: tuple[str, ...]

    def paths(self) -> list[Path]:
        return [ROOT / f"{self.stem}{s}" for s in self.suffixes]


def models(quick: bool) -> dict[str, Model]:
    if quick:
        big = Model("keras", "mobilenetv2", 1.0, "mnv2_100", (".keras", ".h5"))
        tfk = Model("tf_keras", "mobilenetv2", 1.0, "tfk_mnv2_100", (".h5",))
        small = Model("keras", "mobilenetv2", 0.35, "mnv2_035", (".keras", ".h5"))
    else:
        big = Model("keras", "resnet50", 1.0, "resnet50", (".keras", ".h5"))
        tfk = Model("tf_keras", "resnet50", 1.0, "tfk_resnet50", (".h5",))
        small = Model("keras", "mobilenetv2", 0.75, "mnv2_075", (".keras", ".h5"))
    return {"big": big, "tfk": tfk, "small": small}


def make(model: Model) -> None:
    if all(p.exists() for p in model.paths()):
        return
    ROOT.mkdir(parents=True, exist_ok=True)
    names = ", ".join(p.name for p in model.paths())
    print(f"generating {names} ({model.lib} child, 2 Adam steps) ...", flush=True)
    cmd = [PYTHON, "-c", MAKE, model.lib, model.arch, str(model.alpha)]
    done = subprocess.run([*cmd, *map(str, model.paths())], env=ENV, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"generating {names} failed:\n{done.stderr[-3000:]}")


def child(code: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [PYTHON, "-c", code, *args], capture_output=True, text=True, env=ENV, cwd=OUT.parent
    )
    if done.returncode != 0:
        raise SystemExit(f"child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def warm(path: Path) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.read(16 << 20):
            pass


def measure_splits(files: dict[str, Path], repeats: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split children and `cp` / `cp + sync` of the output, round-robin over the files."""
    splits: dict[str, list[dict[str, Any]]] = {label: [] for label in files}
    for label, path in files.items():  # once untimed: warm caches, learn the artifact's name
        splits[label].append(child(SPLIT, str(ROOT), str(path)))
    artifacts = {label: Path(runs[0]["path"]) for label, runs in splits.items()}
    copy = ROOT / "cp-target.tmp"
    jobs: dict[str, Any] = {}
    for label, path in files.items():

        def split_job(timing: Timing, label: str = label, path: Path = path) -> None:
            splits[label].append(child(SPLIT, str(ROOT), str(path)))
            timing.add(splits[label][-1]["seconds"], 0.0)

        def cp_job(timing: Timing, label: str = label) -> None:
            run_cmd(["cp", str(artifacts[label]), str(copy)], timing)
            copy.unlink()

        def sync_job(timing: Timing, label: str = label) -> None:
            script = 'cp "$1" "$2" && sync "$2"'
            run_cmd(["sh", "-c", script, "sh", str(artifacts[label]), str(copy)], timing)
            copy.unlink()

        jobs |= {f"{label}|split": split_job, f"{label}|cp": cp_job, f"{label}|cp+sync": sync_job}
    timings = interleaved(jobs, repeats)
    last = {label: runs[-1] for label, runs in splits.items()}
    for label, runs in splits.items():
        last[label]["peak_rss"] = max(r["peak_rss"] for r in runs)
        for key in ("base_rss", "detect", "hash"):
            last[label][key] = median([r[key] for r in runs])
    return last, {name: median(t.wall) for name, t in timings.items()}


def measure_loads(big: Model, tfk: Model, arts: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """Fresh child per case: import only, full checkpoint compile=True, artifact compile=False."""
    full_keras, full_tfk = big.paths()[0], tfk.paths()[0]
    cases = {
        "keras: import only": ("keras", "-", "0"),
        f"keras: {full_keras.name} compile=True": ("keras", str(full_keras), "1"),
        f"keras: {arts['big.keras'].name} compile=False": ("keras", str(arts["big.keras"]), "0"),
        "tf_keras: import only": ("tf_keras", "-", "0"),
        f"tf_keras: {full_tfk.name} compile=True": ("tf_keras", str(full_tfk), "1"),
        f"tf_keras: {arts['tfk.h5'].name} compile=False": ("tf_keras", str(arts["tfk.h5"]), "0"),
    }
    return {name: child(LOAD, *args) for name, args in cases.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="MobileNetV2 sizes, 2 repeats")
    parser.add_argument("--repeats", type=int, help="timed splits per file (default 5)")
    args = parser.parse_args()
    repeats = args.repeats or (2 if args.quick else 5)
    chosen = models(args.quick)
    for model in chosen.values():
        make(model)
    files = {f"{key}{path.suffix}": path for key, model in chosen.items() for path in model.paths()}
    for path in files.values():
        warm(path)
    splits, walls = measure_splits(files, repeats)
    rows = []
    for label, path in files.items():
        s, wall, cp = splits[label], walls[f"{label}|split"], walls[f"{label}|cp"]
        rows.append(
            [
                label,
                path.name,
                s["source_bytes"] / MB,
                s["bytes"] / MB,
                s["bytes"] / s["source_bytes"],
                s["datasets"],
                wall,
                s["detect"],
                s["hash"],
                cp,
                walls[f"{label}|cp+sync"],
                wall / cp,
                wall / walls[f"{label}|cp+sync"],
                s["base_rss"] / MB,
                s["peak_rss"] / MB,
            ]
        )
    print(f"\nsplit() in a fresh child vs cp of its output; medians of {repeats}, cache warm")
    print("(detect s, hash s: the parts of split s spent in read_checkpoint and hash_files)")
    table(
        [
            "file",
            "source",
            "MB",
            "out MB",
            "out/full",
            "datasets",
            "split s",
            "detect s",
            "hash s",
            "cp s",
            "cp+sync s",
            "split/cp",
            "split/(cp+sync)",
            "RSS@import MB",
            "peak RSS MB",
        ],
        rows,
    )
    arts = {label: Path(s["path"]) for label, s in splits.items()}
    loads = measure_loads(chosen["big"], chosen["tfk"], arts)
    print("\nload_model, fresh child per case (ru_maxrss in the child)")
    table(
        ["case", "load s", "peak RSS MB"],
        [[name, r["seconds"], r["peak_rss"] / MB] for name, r in loads.items()],
    )
    return verdicts(files, splits, walls, loads, repeats)


def verdicts(
    files: dict[str, Path],
    splits: dict[str, Any],
    walls: dict[str, float],
    loads: dict[str, dict[str, Any]],
    repeats: int,
) -> int:
    big = [label for label in files if not label.startswith("small")]
    worst = max(walls[f"{label}|split"] / walls[f"{label}|cp"] for label in big)
    peak = max(s["peak_rss"] for s in splits.values()) / MB
    growth = max(
        (splits[f"big{ext}"]["peak_rss"] - splits[f"small{ext}"]["peak_rss"]) / MB
        for ext in (".keras", ".h5")
    )
    ratios = [splits[label]["bytes"] / splits[label]["source_bytes"] for label in big]
    peaks = [r["peak_rss"] for r in loads.values()]  # keras: import, full, art; tf_keras: same
    saved = min(peaks[1] - peaks[2], peaks[4] - peaks[5]) / MB
    checks = [
        Check("split / cp of the output (worst big file)", worst, "<= 1.5", "x", worst <= 1.5),
        Check("split child peak RSS (any file)", peak, "< 100", "MB", peak < 100),
        Check("split peak RSS big - small", growth, "< 10", "MB", growth < 10),
        Check(
            "output / full, Adam (worst)",
            max(ratios),
            "0.30 .. 0.37",
            "",
            all(0.30 <= r <= 0.37 for r in ratios),
        ),
        Check(
            "load_model RSS saved by the artifact (less of the two libs)",
            saved,
            "> 0",
            "MB",
            saved > 0,
        ),
    ]
    facts = {"repeats": repeats, "splits": splits, "walls": walls, "loads": loads}
    return report("split_bench", checks, facts)


if __name__ == "__main__":
    raise SystemExit(main())
