"""`ckpt describe` against `ckpt show` on the same checkpoints: a card must cost what `show`
costs, whatever the file's size (both read the catalog; describe also reads the stored model
config: a `.keras` archive's `config.json` in-process, a legacy `.h5`'s `model_config` in a
config child; weights are never read, TensorFlow never imported).

Checkpoints (made once in bench/out/describe/ by one Keras 3 child): ResNet50 with Adam state
(~308 MB) as `.keras` and legacy `.h5`, and a small MLP (Input(8) → Dense(16) → Dense(3), Adam,
~30 kB) in both formats; scanned once into a catalog there. Then, as fresh processes,
interleaved (round-robin, `--repeats`, default 7): `python -c pass`, and `ckpt show ID` and
`ckpt describe ID` for each file. Medians; ratios: describe/show per file, and big/small per
command and format (flat in file size means ~1). `--quick`: MobileNetV2 (~42 MB) as the big one.

    python3 bench/describe_bench.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

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

ROOT = OUT / "describe"
ENV = {k: v for k, v in CHILD_ENV.items() if k != "TF_USE_LEGACY_KERAS"}
ENV["KERAS_BACKEND"] = "tensorflow"

MAKE = r"""
import os, sys
from pathlib import Path
import numpy as np
import keras as K
arch, folder = sys.argv[1], Path(sys.argv[2])
K.utils.set_random_seed(0)
rng = np.random.default_rng(0)
def save(model, stem):
    for suffix in (".keras", ".h5"):  # .keras first: an .h5 save drops the optimizer (B2)
        part = folder / f".part-{stem}{suffix}"
        model.save(str(part))
        os.replace(part, folder / f"{stem}{suffix}")
if arch == "resnet50":
    big = K.applications.ResNet50(weights=None)
else:
    big = K.applications.MobileNetV2(weights=None)
big.compile(optimizer=K.optimizers.Adam(1e-3), loss=K.losses.SparseCategoricalCrossentropy())
big.fit(rng.random((4, 224, 224, 3), dtype=np.float32), rng.integers(0, 1000, 4),
        batch_size=2, epochs=1, verbose=0)
save(big, "big")
inp = K.Input((8,))
small = K.Model(inp, K.layers.Dense(3)(K.layers.Dense(16)(inp)))
small.compile(optimizer="adam", loss="mse")
small.fit(rng.random((8, 8), dtype=np.float32), rng.random((8, 3), dtype=np.float32), verbose=0)
save(small, "small")
"""


def prepare(quick: bool) -> tuple[Path, dict[str, int]]:
    arch = "mobilenetv2" if quick else "resnet50"
    folder = ROOT / arch
    runs = folder / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    if not (runs / "small.h5").exists():
        print(f"generating {arch} + small checkpoints (once) ...", flush=True)
        subprocess.run([PYTHON, "-c", MAKE, arch, str(runs)], env=ENV, check=True)
    config = folder / "config.yaml"
    config.write_text(f"state_dir: {folder / 'state'}\nroots:\n  - path: {runs}\n")
    ckpt = [PYTHON, "-m", "ckpt_daemon", "--config", str(config)]
    subprocess.run([*ckpt, "scan"], env=CHILD_ENV, check=True, stdout=subprocess.DEVNULL)
    rows = json.loads(
        subprocess.run(
            [*ckpt, "list", "--json"], env=CHILD_ENV, check=True, capture_output=True, text=True
        ).stdout
    )
    return config, {Path(r["path"]).name: r["id"] for r in rows}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int)
    args = parser.parse_args()
    repeats = args.repeats or (3 if args.quick else 7)
    config, ids = prepare(args.quick)
    ckpt = [PYTHON, "-m", "ckpt_daemon", "--config", str(config)]
    files = ["small.keras", "big.keras", "small.h5", "big.h5"]
    sizes = {name: (config.parent / "runs" / name).stat().st_size for name in files}
    jobs = {"python -c pass": lambda t: run_cmd([PYTHON, "-c", "pass"], t)}
    for name in files:
        for command in ("show", "describe"):
            cmd = [*ckpt, command, str(ids[name])]
            jobs[f"{command} {name}"] = lambda t, cmd=cmd: run_cmd(cmd, t)
    timings: dict[str, Timing] = interleaved(jobs, repeats)
    wall = {k: median(t.wall) for k, t in timings.items()}
    rss = {k: max(t.peak_rss) / 1e6 for k, t in timings.items()}
    table(
        ["job", "file MB", "wall s (median)", "CPU s", "peak RSS MB"],
        [
            [k, sizes.get(k.split()[-1], 0) / 1e6, wall[k], median(timings[k].cpu), rss[k]]
            for k in jobs
        ],
    )
    print()
    ratios = []
    for suffix in (".keras", ".h5"):
        for size in ("small", "big"):
            name = f"{size}{suffix}"
            ratios.append(
                [f"describe/show {name}", wall[f"describe {name}"] / wall[f"show {name}"]]
            )
        for command in ("show", "describe"):
            big, small = wall[f"{command} big{suffix}"], wall[f"{command} small{suffix}"]
            ratios.append([f"{command} big/small {suffix}", big / small])
    table(["ratio", "value"], ratios)
    got = dict((k, v) for k, v in ratios)
    checks = [
        Check(
            f"describe big/small {s}",
            got[f"describe big/small {s}"],
            "<= 1.25",
            "x",
            got[f"describe big/small {s}"] <= 1.25,
        )
        for s in (".keras", ".h5")
    ]
    checks.append(
        Check(
            "describe/show big.keras",
            got["describe/show big.keras"],
            "<= 1.25",
            "x",
            got["describe/show big.keras"] <= 1.25,
        )
    )
    facts = {"files_bytes": sizes, "wall_median_s": wall, "peak_rss_mb": rss, "repeats": repeats}
    return report("describe_bench", checks, facts)


if __name__ == "__main__":
    raise SystemExit(main())
