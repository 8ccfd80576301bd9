"""Peak RSS of consolidating a sharded save without torch, flat in the model's size (issue 44).

A torch child (2 ranks on gloo, `torch.multiprocessing.spawn`) writes, for a ~100 MB and a
~1 GB model of the same 25 float32 `(rows, 1024)` matrices (only `rows` differs) sharded
`Shard(0)` as DTensors (each rank makes only its own half: `DTensor.from_local`), both a DCP
folder (`dcp.save`, 2 chunks per tensor) and verl's per-rank files
(`model_world_size_2_rank_R.pt`); made once in bench/out/. Then, each in a fresh interpreter
(no catalog): `transforms.consolidate.split`, its peak RSS and wall time taken by `wait4`, the
output checked against the writer's checksum of every tensor; and the reader of the folder
(`formats.folder_readers.read`, as the reader child indexes it), timed inside its process.

    python3 bench/sharded_consolidate_bench.py [--stack dcp|ranks|all] [--quick] [--repeats N]

Targets: consolidation peak RSS big/small < 1.5 and big < 200 MB; reading time big/small < 2
(indexing cost flat in the checkpoint's size). (`--quick`: 20 MB vs 200 MB.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
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
    table,
)

WRITE = r"""
import os, sys, json, hashlib
import torch, torch.distributed as dist, torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

def rank(r, port, out, count, rows):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=r, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    sd = {}
    for i in range(count):
        g = torch.Generator().manual_seed(1000 * i + r)
        local = torch.randn(rows // 2, 1024, generator=g)
        sd[f"layers.{i}.weight"] = DTensor.from_local(local, mesh, [Shard(0)])
    dcp.save({"model": sd}, checkpoint_id=os.path.join(out, "dcp"))
    os.makedirs(os.path.join(out, "ranks"), exist_ok=True)
    torch.save(sd, os.path.join(out, "ranks", f"model_world_size_2_rank_{r}.pt"))
    sums = {k: hashlib.sha256(v.full_tensor().numpy().tobytes()).hexdigest() for k, v in sd.items()}
    if r == 0:
        with open(os.path.join(out, "sums.json"), "w") as f:
            json.dump(sums, f)
    dist.destroy_process_group()

if __name__ == "__main__":
    out, count, port, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    mp.spawn(rank, args=(port, out, count, rows), nprocs=2, join=True)
"""

SPLIT = r"""
import sys
from pathlib import Path
from ckpt_daemon.core.model import Format
from ckpt_daemon.transforms import consolidate
root, source, kind = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
fmt = Format.TORCH_RANKS if kind == "ranks" else Format.TORCH_DCP
consolidate.split(root, source, fmt)
"""
COUNT = 25  # tensors, whatever the size: only their rows grow
READ = r"""
import json, sys, time
from pathlib import Path
from ckpt_daemon.formats import folder_readers
start = time.perf_counter()
info = folder_readers.read(Path(sys.argv[1]), Path(sys.argv[1]).parent)
print(json.dumps({"seconds": time.perf_counter() - start, "params": info.n_params}))
"""


def _env() -> dict[str, str]:
    """The children import the package the caller's PYTHONPATH gives (a worktree's shim)."""
    paths = [p for p in (os.environ.get("PYTHONPATH"), CHILD_ENV["PYTHONPATH"]) if p]
    return {**CHILD_ENV, "PYTHONPATH": os.pathsep.join(paths), "OMP_NUM_THREADS": "1"}


def _child_json(code: str, *args: str) -> dict[str, float]:
    """`python -c code args` with the caller's package; its last stdout line is JSON."""
    done = subprocess.run([PYTHON, "-c", code, *args], capture_output=True, text=True, env=_env())
    if done.returncode != 0:
        raise SystemExit(f"child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def make(name: str, megabytes: int) -> Path:
    folder = OUT / "sharded" / name
    if (folder / "sums.json").is_file():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rows = max(2, megabytes * 10**6 // (COUNT * 1024 * 4) // 2 * 2)
    script = folder / "write.py"  # a file: spawn re-imports the ranks' function from it
    script.write_text(WRITE)
    cmd = [PYTHON, str(script), str(folder), str(COUNT), str(port), str(rows)]
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"writer failed:\n{done.stderr[-3000:]}")
    return folder


def _checked(artifact: Path, sums: dict[str, str]) -> None:
    """Every tensor of the artifact hashes as the writer's full tensor did (read in slices)."""
    with open(artifact, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            begin, end = entry["data_offsets"]
            f.seek(8 + n + begin)
            h, left = hashlib.sha256(), end - begin
            while left:
                piece = f.read(min(left, 1 << 22))
                h.update(piece)
                left -= len(piece)
            if h.hexdigest() != sums[name]:
                raise SystemExit(f"{artifact}: {name} differs from the writer's tensor")
    if len(header) - 1 != len(sums):
        raise SystemExit(f"{artifact}: {len(header) - 1} tensors, the writer saved {len(sums)}")


def _timed(root: Path, kind: str, timing: Timing) -> Path:
    source = root / kind
    artifact = source.with_name(source.name + ".consolidated.safetensors")
    artifact.unlink(missing_ok=True)
    start = __import__("time").perf_counter()
    proc = subprocess.Popen([PYTHON, "-c", SPLIT, str(root), str(source), kind], env=_env())
    _pid, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"consolidation of {source} failed")
    timing.add(__import__("time").perf_counter() - start, usage.ru_utime + usage.ru_stime)
    timing.peak_rss.append(usage.ru_maxrss * 1024.0)
    return artifact


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stack", choices=("dcp", "ranks", "all"), default="all")
    parser.add_argument("--quick", action="store_true", help="20 MB vs 200 MB")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sizes = {"small": 20, "big": 200} if args.quick else {"small": 100, "big": 1000}
    roots = {label: make(f"{label}-{mb}mb-{COUNT}t", mb) for label, mb in sizes.items()}
    kinds = ("dcp", "ranks") if args.stack == "all" else (args.stack,)
    jobs = {}
    for kind in kinds:
        for label, root in roots.items():

            def job(timing: Timing, root: Path = root, kind: str = kind) -> None:
                artifact = _timed(root, kind, timing)
                _checked(artifact, json.loads((root / "sums.json").read_text()))
                artifact.unlink()

            jobs[f"{kind} {label}"] = job
    reads: dict[str, list[float]] = {}
    for kind in kinds:
        for label, root in roots.items():

            def read(
                _timing: Timing, root: Path = root, kind: str = kind, label: str = label
            ) -> None:
                said = _child_json(READ, str(root / kind))
                reads.setdefault(f"{kind} {label}", []).append(float(said["seconds"]))

            jobs[f"read {kind} {label}"] = read
    timings = interleaved(jobs, args.repeats)
    timings = {k: v for k, v in timings.items() if not k.startswith("read ")}
    table(
        ["job", "wall s (median)", "cpu s (median)", "peak RSS MB (median)"],
        [[n, median(t.wall), median(t.cpu), median(t.peak_rss) / 1e6] for n, t in timings.items()],
    )
    checks, facts = [], {"sizes_mb": sizes, "repeats": args.repeats}
    for kind in kinds:
        small, big = (median(timings[f"{kind} {x}"].peak_rss) for x in ("small", "big"))
        ratio = big / small
        checks.append(Check(f"{kind}: peak RSS big/small", ratio, "< 1.5", "x", ratio < 1.5))
        checks.append(Check(f"{kind}: peak RSS big", big / 1e6, "< 200", "MB", big < 200e6))
        facts[f"{kind}_peak_rss"] = {"small": small, "big": big}
        facts[f"{kind}_wall"] = {x: median(timings[f"{kind} {x}"].wall) for x in ("small", "big")}
        read_small, read_big = (median(reads[f"{kind} {x}"]) for x in ("small", "big"))
        print(f"{kind}: read {read_small:.3f} s (small) vs {read_big:.3f} s (big)")
        slower = read_big / read_small
        checks.append(Check(f"{kind}: read time big/small", slower, "< 2", "x", slower < 2))
        facts[f"{kind}_read_seconds"] = {"small": read_small, "big": read_big}
    return report("sharded_consolidate", checks, facts)


if __name__ == "__main__":
    sys.exit(main())
