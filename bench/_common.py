"""Shared bits of the benchmarks: paths, timing subprocesses, tables, results for run_all."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OUT = BENCH / "out"
# The interpreter running this script, not a pyenv shim: a shim adds ~0.1 s per process.
PYTHON = sys.executable
CHILD_ENV = {
    **os.environ,
    "PYTHONPATH": str(REPO),
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "CUDA_VISIBLE_DEVICES": "",
}


class Process(Protocol):
    """What the campaigns use of a started command (a Popen, or a forked one in the tests)."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, number: int) -> None: ...


class Launcher:
    """How a campaign runs `python -m ckpt_daemon ARGS`: each command a fresh interpreter, as
    a user runs it. The test suite's small campaigns pass one that forks the commands from a
    pre-imported interpreter instead (tests/support/forked_cli.py: the same code, without the
    second of imports each command would spend)."""

    def run(
        self, args: Sequence[str], *, env: dict[str, str], cwd: Path | None, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """The command to its end; stdin /dev/null, stdout and stderr captured as text."""
        return subprocess.run(
            [PYTHON, "-m", "ckpt_daemon", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
        )

    def start(
        self, args: Sequence[str], *, env: dict[str, str], cwd: Path | None, stderr: int
    ) -> Process:
        """The command started in a process group of its own (its pid the group's id), stdin
        and stdout /dev/null, stderr into the file descriptor `stderr`: a handle with Popen's
        pid, poll, wait(timeout) and send_signal."""
        return subprocess.Popen(
            [PYTHON, "-m", "ckpt_daemon", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )


@dataclass
class Check:
    name: str
    value: float
    target: str  # e.g. "< 2"
    unit: str
    passed: bool


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


@dataclass
class Timing:
    """Wall and CPU (user + system) seconds, and peak RSS bytes of child runs, per repeat."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    peak_rss: list[float] = field(default_factory=list)

    def add(self, wall: float, cpu: float) -> None:
        self.wall.append(wall)
        self.cpu.append(cpu)


def run_cmd(cmd: Sequence[str], timing: Timing) -> None:
    """Run `cmd` once (stdout discarded, failure fatal); add its wall, CPU and peak RSS."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=CHILD_ENV, cwd=REPO
    )
    _pid, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with exit code {proc.returncode}")
    timing.add(elapsed, usage.ru_utime + usage.ru_stime)
    timing.peak_rss.append(usage.ru_maxrss * 1024.0)


def run_fn(fn: Callable[[], object], timing: Timing) -> None:
    """Call `fn` once in this process; add its wall and CPU (all threads) seconds."""
    before = os.times()
    start = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - start
    after = os.times()
    timing.add(elapsed, after.user + after.system - before.user - before.system)


def interleaved(jobs: dict[str, Callable[[Timing], None]], repeats: int) -> dict[str, Timing]:
    """Round-robin the jobs `repeats` times, so that load spikes hit all of them alike."""
    timings = {name: Timing() for name in jobs}
    for _ in range(repeats):
        for name, job in jobs.items():
            job(timings[name])
    return timings


def child_json(code: str, *args: str) -> dict[str, Any]:
    """Run `python -c code args` in a fresh interpreter; its last stdout line is JSON."""
    done = subprocess.run(
        [PYTHON, "-c", code, *args], capture_output=True, text=True, env=CHILD_ENV, cwd=REPO
    )
    if done.returncode != 0:
        raise SystemExit(f"child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print(
            "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if n == 0:
            print("  ".join("-" * w for w in widths))


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def machine() -> str:
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"nproc {os.cpu_count()}, CPU {model}, load avg {load}, Python {sys.version.split()[0]}"


def report(bench: str, checks: list[Check], facts: dict[str, object]) -> int:
    """Print the verdicts, save them for run_all, and return the exit status (1 if any missed)."""
    print()
    for c in checks:
        print(
            f"{'PASS' if c.passed else 'MISS'}  {c.name}: {c.value:.4g} {c.unit} "
            f"(target {c.target})"
        )
    OUT.mkdir(parents=True, exist_ok=True)
    doc = {
        "bench": bench,
        "machine": machine(),
        "facts": facts,
        "checks": [asdict(c) for c in checks],
    }
    (OUT / f"result-{bench}.json").write_text(json.dumps(doc, indent=2))
    return 0 if all(c.passed for c in checks) else 1
