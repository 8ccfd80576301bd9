"""Object storage for a checkpoint of several files: `ckpt tier` and `ckpt fetch` of a sharded
Hugging Face `save_pretrained` folder (4 safetensors shards, its index and config: one tar
object generated on the fly from the files, unpacked safely on the way back) against the same
bytes as one safetensors file, in the same run, on the same S3 API server (moto's server mode on
loopback, in this process; every `ckpt` is a child process, its peak RSS its own, measured as
`s3_throughput.py` does).

Targets: the folder's tier and fetch within 0.8x the single file's throughput (the tar adds
headers, one open per member and, on the way back, a temp folder and a rename per entry), and
the same bounded memory: each `ckpt` process's peak RSS < 150 MB whatever the size.

`python3 bench/s3_folder_tier.py [--size-mb 1024] [--repeats 2] [--quick]`
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from _common import Check, report  # noqa: E402
from s3_throughput import PYTHON, timed  # noqa: E402

from tests.support.s3_server import CREDENTIALS, S3Server  # noqa: E402

BUCKET = "folders"
SHARDS = 4


def write_folder(folder: Path, size_mb: int) -> int:
    """A `save_pretrained` folder of SHARDS shards: its bytes (the members')."""
    import numpy as np
    from safetensors.numpy import save_file

    folder.mkdir(parents=True)
    weight_map = {}
    for i in range(SHARDS):
        name = f"model-{i + 1:05d}-of-{SHARDS:05d}.safetensors"
        values = np.random.default_rng(i).standard_normal(((size_mb << 18) // SHARDS,), np.float32)
        save_file({f"w{i}": values}, str(folder / name))
        weight_map[f"w{i}"] = name
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": size_mb << 20}, "weight_map": weight_map})
    )
    (folder / "config.json").write_text(
        json.dumps({"model_type": "bert", "architectures": ["BertModel"]})
    )
    return sum(p.stat().st_size for p in folder.iterdir())


def write_file(path: Path, size_mb: int) -> int:
    import numpy as np
    from safetensors.numpy import save_file

    values = np.random.default_rng(9).standard_normal((size_mb << 18,), np.float32)
    save_file({"w": values}, str(path))
    return path.stat().st_size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="64 MB, once")
    args = parser.parse_args()
    if args.quick:
        args.size_mb, args.repeats = 64, 1
    env = {**os.environ, **CREDENTIALS}
    server = S3Server()
    server.bucket(BUCKET)
    speed: dict[str, list[float]] = {k: [] for k in ("folder tier", "folder fetch", "file tier")}
    speed["file fetch"] = []
    rss: dict[str, float] = {k: 0.0 for k in speed}
    try:
        with tempfile.TemporaryDirectory(prefix="ckpt-s3-folders-") as tmp:
            base = Path(tmp)
            config = base / "config.yaml"
            config.write_text(
                f"state_dir: {base / 'state'}\nroots:\n  - path: {base / 'runs'}\n"
                "completion:\n  settle_seconds: 0\n"
                f"remote:\n  url: s3://{BUCKET}/c\n  endpoint_url: {server.url}\n"
            )
            folder = base / "runs" / "hf" / "model"
            size = write_folder(folder, args.size_mb)
            single = base / "runs" / "one" / "model.safetensors"
            single.parent.mkdir(parents=True)
            file_size = write_file(single, args.size_mb)
            ckpt = [PYTHON, "-m", "ckpt_daemon", "--config", str(config)]
            subprocess.run([*ckpt, "scan"], env=env, check=True, capture_output=True)
            for _ in range(args.repeats):
                for kind, path, nbytes in (("folder", folder, size), ("file", single, file_size)):
                    seconds, peak = timed([*ckpt, "tier", str(path)], env)
                    if path.exists():
                        raise SystemExit(f"{path} was not tiered (skipped?)")
                    speed[f"{kind} tier"].append(nbytes / seconds)
                    rss[f"{kind} tier"] = max(rss[f"{kind} tier"], peak)
                    subprocess.run(
                        [*ckpt, "trash", "purge", "--older-than", "0s"],
                        env=env,
                        check=True,
                        capture_output=True,
                    )
                    seconds, peak = timed([*ckpt, "fetch", str(path)], env)
                    speed[f"{kind} fetch"].append(nbytes / seconds)
                    rss[f"{kind} fetch"] = max(rss[f"{kind} fetch"], peak)
    finally:
        server.stop()
    best = {k: max(v) / 1e6 for k, v in speed.items()}
    for name, value in best.items():
        print(
            f"{name:>12}: {value:7.1f} MB/s (best of {args.repeats}), peak RSS {rss[name]:.0f} MB"
        )
    up = best["folder tier"] / best["file tier"]
    down = best["folder fetch"] / best["file fetch"]
    peak = max(rss.values())
    checks = [
        Check("folder tier vs file tier", up, ">= 0.8", "x", up >= 0.8),
        Check("folder fetch vs file fetch", down, ">= 0.8", "x", down >= 0.8),
        Check("peak RSS of the ckpt processes", peak, "< 150", "MB", peak < 150),
    ]
    return report("s3_folder_tier", checks, {"size_bytes": size, **best, "rss_mb": rss})


if __name__ == "__main__":
    sys.exit(main())
