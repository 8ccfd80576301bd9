"""Object-storage throughput: `ckpt tier` and `ckpt fetch` of a ~300 MB checkpoint against boto3's
own plain `upload_file` and `download_file` of the same file, in the same run, on the same S3 API
server (moto's server mode on loopback, in this process; every client is a child process, so
each pays its interpreter and imports alike).

`ckpt tier` does more than a plain upload: it starts its catalog, hashes the bytes it sends
(BLAKE3, in the same pass as it reads the parts), sends a SHA-256 per part, reads the copy back,
records it and moves the local file to the trash; `ckpt fetch` hashes what it writes and fsyncs
it. Targets: each >= 0.9x the plain transfer's throughput, and the `ckpt` process's peak RSS
< 150 MB (ru_maxrss of the children, read after each one).

`python3 bench/s3_throughput.py [--size-mb 300] [--repeats 2]`
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from _common import Check, report  # noqa: E402

from tests.support.s3_server import CREDENTIALS, S3Server  # noqa: E402

PYTHON = sys.executable
BUCKET = "throughput"
PLAIN = """
import sys, boto3
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1")
if sys.argv[2] == "up":
    s3.upload_file(sys.argv[3], "throughput", sys.argv[4])
else:
    s3.download_file("throughput", sys.argv[4], sys.argv[3])
"""


# Each measured process is started by this small launcher, which reports its child's peak RSS:
# a child forked from the bench itself would count the bench's own pages (moto keeps every
# object in this process) in its ru_maxrss, as Linux carries the forked copy's peak over exec.
LAUNCHER = """
import resource, subprocess, sys
code = subprocess.run(sys.argv[1:]).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of one child process (the launcher's child: the process
    measured, and what it ran)."""
    started = time.perf_counter()
    done = subprocess.run(
        [PYTHON, "-c", LAUNCHER, *cmd], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[-3:])} exited {done.returncode}: {done.stderr.decode()}")
    return seconds, int(done.stderr.decode().split()[-1]) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="48 MB, once")
    args = parser.parse_args()
    if args.quick:
        args.size_mb, args.repeats = 48, 1
    env = {**os.environ, **CREDENTIALS}
    server = S3Server()
    server.bucket(BUCKET)
    results: dict[str, list[float]] = {"tier": [], "plain up": [], "fetch": [], "plain down": []}
    tier_rss = fetch_rss = plain_rss = 0.0
    try:
        with tempfile.TemporaryDirectory(prefix="ckpt-s3-bench-") as tmp:
            base = Path(tmp)
            root = base / "runs" / "exp"
            root.mkdir(parents=True)
            config = base / "config.yaml"
            config.write_text(
                f"state_dir: {base / 'state'}\nroots:\n  - path: {base / 'runs'}\n"
                "completion:\n  settle_seconds: 0\n"
                f"remote:\n  url: s3://{BUCKET}/c\n  endpoint_url: {server.url}\n"
            )
            import numpy as np
            from safetensors.numpy import save_file

            path = root / "big.safetensors"
            values = np.random.default_rng(0).standard_normal((args.size_mb << 18,), np.float32)
            save_file({"w": values}, str(path))
            del values
            size = path.stat().st_size
            ckpt = [PYTHON, "-m", "ckpt_daemon", "--config", str(config)]
            subprocess.run([*ckpt, "scan"], env=env, check=True, capture_output=True)
            plain = base / "plain.safetensors"
            for i in range(args.repeats):
                seconds, rss = timed(
                    [PYTHON, "-c", PLAIN, server.url, "up", str(path), f"p{i}"], env
                )
                plain_rss = max(plain_rss, rss)
                results["plain up"].append(size / seconds)
                seconds, rss = timed(
                    [PYTHON, "-c", PLAIN, server.url, "down", str(plain), f"p{i}"], env
                )
                plain_rss = max(plain_rss, rss)
                results["plain down"].append(size / seconds)
                plain.unlink()
                seconds, rss = timed([*ckpt, "tier", str(path)], env)
                tier_rss = max(tier_rss, rss)
                results["tier"].append(size / seconds)
                subprocess.run(
                    [*ckpt, "trash", "purge", "--older-than", "0s"],
                    env=env,
                    check=True,
                    capture_output=True,
                )
                seconds, rss = timed([*ckpt, "fetch", str(path)], env)
                fetch_rss = max(fetch_rss, rss)
                results["fetch"].append(size / seconds)
    finally:
        server.stop()
    best = {k: max(v) / 1e6 for k, v in results.items()}
    for name, value in best.items():
        print(f"{name:>10}: {value:7.1f} MB/s (best of {args.repeats})")
    ckpt_rss = max(tier_rss, fetch_rss)
    print(
        f"peak RSS: ckpt tier {tier_rss:.0f} MB, ckpt fetch {fetch_rss:.0f} MB, "
        f"the plain boto3 clients {plain_rss:.0f} MB"
    )
    up, down = best["tier"] / best["plain up"], best["fetch"] / best["plain down"]
    checks = [
        Check("tier vs plain upload_file", up, ">= 0.9", "x", up >= 0.9),
        Check("fetch vs plain download_file", down, ">= 0.9", "x", down >= 0.9),
        Check("peak RSS of the ckpt processes", ckpt_rss, "< 150", "MB", ckpt_rss < 150),
    ]
    rss = {"tier_rss_mb": tier_rss, "fetch_rss_mb": fetch_rss, "plain_rss_mb": plain_rss}
    return report("s3_throughput", checks, {"size_bytes": size, **best, **rss})


if __name__ == "__main__":
    sys.exit(main())
