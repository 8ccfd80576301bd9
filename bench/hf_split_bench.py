"""What the split of a Hugging Face Trainer folder costs against a plain copy of the same files.

`transforms.hf_split.split` (in a fresh interpreter: no catalog, the transform alone) of a real
Trainer `checkpoint-1/` (one AdamW step of a BERT built from a config, made once in bench/out/ by
bench/index_cost.py's torch generator) into a fresh folder, against `cp -p` of the files it keeps
(config.json, model.safetensors) into a fresh folder, and against that copy made durable (`cp`
then `sync` of the files and the folder: the split fsyncs each file), interleaved, page cache
warm; each in a fresh process. The ratios take the split call alone (timed inside its process:
Python's start and our import, ~0.8 s under load, are a fixed cost shown apart). The split
hashes the source, copies (in-kernel `copy_file_range`; a reflink clone where the filesystem
shares blocks), then hashes the copy against the source and for the catalog in one pass and
reads the weights' headers back, so it reads each byte about three times where `cp` reads it
once: the targets are under 5x `cp` and under 3x `cp` + `sync` on a filesystem without reflinks.
Also: the inference folder's size against the checkpoint's, and the split's peak RSS (bounded:
files are streamed, never loaded).

    python3 bench/hf_split_bench.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path

from _common import CHILD_ENV, OUT, PYTHON, Check, Timing, interleaved, median, report, table
from index_cost import HF_BIG, HF_QUICK_BIG, make_hf_folder, warm

SPLIT = r"""
import json, sys, time
from pathlib import Path
from ckpt_daemon.transforms import hf_split
root, source, out = map(Path, sys.argv[1:4])
start = time.perf_counter()
hf_split.split(root, source, out=out)
with open(sys.argv[4], "w") as f:
    json.dump({"seconds": time.perf_counter() - start}, f)
"""
KEPT = ("config.json", "model.safetensors")


def _fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def _timed(cmd: list[str], timing: Timing) -> None:
    import os
    import time

    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=CHILD_ENV)
    _pid, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed")
    timing.add(time.perf_counter() - start, usage.ru_utime + usage.ru_stime)
    timing.peak_rss.append(usage.ru_maxrss * 1024.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a ~80 MB model (default ~530 MB)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    source = make_hf_folder(
        "hf_quick" if args.quick else "hf_big_2layers", HF_QUICK_BIG if args.quick else HF_BIG
    )
    work = OUT / "hf_split"
    split_out, copy_out = work / "split", work / "copy"

    inside: list[float] = []  # the split call itself, without the interpreter's start

    def split(timing: Timing) -> None:
        target = _fresh(split_out)
        warm(source)
        said = work / "split.json"
        _timed([PYTHON, "-c", SPLIT, str(OUT), str(source), str(target), str(said)], timing)
        assert (target / "inference-1" / "model.safetensors").is_file()
        inside.append(float(json.loads(said.read_text())["seconds"]))

    def copy(timing: Timing) -> None:
        target = _fresh(copy_out) / "inference-1"
        target.mkdir()
        warm(source)
        files = [str(source / name) for name in KEPT]
        _timed(["cp", "-p", "--reflink=never", *files, str(target)], timing)

    def copy_sync(timing: Timing) -> None:  # durable, as the split is (it fsyncs each file)
        target = _fresh(copy_out) / "inference-1"
        target.mkdir()
        warm(source)
        files = " ".join(f"'{source / name}'" for name in KEPT)
        script = f"cp -p --reflink=never {files} '{target}' && sync '{target}'/* '{target}'"
        _timed(["sh", "-c", script], timing)

    jobs = {"split": split, "cp": copy, "cp+sync": copy_sync}
    timings = interleaved(jobs, args.repeats)
    checkpoint = sum(p.stat().st_size for p in source.iterdir())
    inference = sum(p.stat().st_size for p in (split_out / "inference-1").iterdir())
    wall = {name: median(t.wall) for name, t in timings.items()}
    call = median(inside)
    ratio, durable = call / wall["cp"], call / wall["cp+sync"]
    rss = median(timings["split"].peak_rss)
    table(
        ["job", "wall s (median)", "cpu s (median)", "peak RSS MB"],
        [
            [name, wall[name], median(t.cpu), median(t.peak_rss) / 1e6]
            for name, t in timings.items()
        ],
    )
    print(f"the split call alone (median): {call:.3f} s")
    print(f"checkpoint {checkpoint / 1e6:.1f} MB -> inference folder {inference / 1e6:.1f} MB")
    shutil.rmtree(work, ignore_errors=True)
    share = inference / checkpoint
    checks = [
        Check("split call / cp of the kept files", ratio, "< 5", "x", ratio < 5),
        Check("split call / (cp + sync) of the kept files", durable, "< 3", "x", durable < 3),
        Check("inference folder / checkpoint", share, "< 0.45", "", share < 0.45),
    ]
    facts = {
        "checkpoint_bytes": checkpoint,
        "inference_bytes": inference,
        "split_call_seconds": call,
        "split_process_seconds": wall["split"],
        "cp_seconds": wall["cp"],
        "cp_sync_seconds": wall["cp+sync"],
        "split_peak_rss": rss,
        "repeats": args.repeats,
    }
    return report("hf_split", checks, facts)


if __name__ == "__main__":
    raise SystemExit(main())
