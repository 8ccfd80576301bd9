"""The long fuzzing run (issue 40 item 4): atheris (libFuzzer, coverage-guided) on every reader
of hostile bytes of tests/support/fuzz_targets.py, one child process a target, each input held
to the harness's budget of CPU time for its size (memory: libFuzzer's `-rss_limit_mb` and
`-malloc_limit_mb`, per process and per allocation). A finding (an exception other than a
reader's `CkptError`, a budget exceeded, a crash) is saved under
`bench/out/fuzz/<target>/findings/` with its reason: copy it into tests/fuzz_corpus/<target>/
as `regress-*` and fix the reader (the CI replay, tests/unit/test_fuzz_corpus.py, then keeps it).

    python3 bench/fuzz_readers.py [--seconds 120] [--target pickle] [--quick]

Prints per target: inputs run, seconds, coverage corpus size, findings; PASS when none.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _common import CHILD_ENV, OUT, PYTHON, REPO, Check, report, table

sys.path.insert(0, str(REPO))
FUZZ = OUT / "fuzz"
MALLOC_LIMIT_MB = 512  # one allocation: a reader must never size a buffer by a claim
RSS_LIMIT_MB = 2048
# The package the caller imports (a worktree's shim on PYTHONPATH), then the repository.
ENV = {
    **CHILD_ENV,
    "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(REPO)])),
}


def child(target: str, seconds: int, out: Path) -> None:
    """Runs in the child: atheris on one target until `seconds` pass."""
    import atheris

    with atheris.instrument_imports(include=["ckpt_daemon"]):
        from tests.support import fuzz_targets as ft

    findings, scratch = out / "findings", out / "scratch"
    findings.mkdir(parents=True, exist_ok=True)
    counts = {"inputs": 0, "findings": 0, "started": time.monotonic()}

    def save() -> None:
        counts["seconds"] = round(time.monotonic() - counts["started"], 1)
        (out / "counts.json").write_text(json.dumps(counts))

    def one(data: bytes) -> None:
        counts["inputs"] += 1
        outcome = ft.run(target, data, scratch, measure_memory=False)
        if outcome.finding:
            name = hashlib.sha1(data).hexdigest()[:16]
            (findings / name).write_bytes(data)
            (findings / f"{name}.why").write_text(outcome.finding + "\n")
            counts["findings"] += 1
        if counts["inputs"] % 100 == 0:
            save()

    import atexit

    atexit.register(save)
    corpus = out / "corpus"
    if not corpus.exists():
        shutil.copytree(ft.CORPUS / target, corpus)
    argv = [sys.argv[0], f"-max_total_time={seconds}", "-timeout=120", str(corpus)]
    argv += [f"-rss_limit_mb={RSS_LIMIT_MB}", f"-malloc_limit_mb={MALLOC_LIMIT_MB}"]
    argv += ["-max_len=262144", f"-artifact_prefix={findings}/crash-"]
    atheris.Setup(argv, one)
    atheris.Fuzz()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=120, help="per target")
    parser.add_argument("--target", action="append", help="only these (default: all)")
    parser.add_argument("--quick", action="store_true", help="10 s a target")
    parser.add_argument("--repeats", type=int, default=1, help="ignored (bench convention)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    seconds = 10 if args.quick else args.seconds
    if args.child:
        child(args.child, seconds, FUZZ / args.child)
        return 0
    from tests.support import fuzz_targets as ft

    targets = args.target or sorted(ft.TARGETS)
    rows, checks, facts = [], [], {}
    for target in targets:
        out = FUZZ / target
        shutil.rmtree(out / "findings", ignore_errors=True)
        out.mkdir(parents=True, exist_ok=True)
        cmd = [PYTHON, __file__, "--child", target, "--seconds", str(seconds)]
        done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, check=False)
        counts = json.loads((out / "counts.json").read_text())
        crashes = list((out / "findings").glob("crash-*"))
        found = counts["findings"] + len(crashes)
        corpus = len(os.listdir(out / "corpus"))
        rows.append((target, counts["inputs"], counts["seconds"], corpus, found, done.returncode))
        facts[target] = {**counts, "corpus": corpus, "crashes": len(crashes)}
        checks.append(Check(f"{target} findings", found, "= 0", "", found == 0))
    table(["target", "inputs", "seconds", "corpus", "findings", "exit"], rows)
    print(f"\nfindings (inputs and reasons): {FUZZ}/<target>/findings/")
    return report("fuzz_readers", checks, facts)


if __name__ == "__main__":
    sys.exit(main())
