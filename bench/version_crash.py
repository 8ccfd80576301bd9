"""Versions crash campaign (issue 20): SIGKILLs of version capture and of `ckpt restore
--version`, the trainer saving meanwhile; then what the next start or command leaves.

Both acts use one fixed name, `job/best.weights.h5`, a Keras 3 weights file (the layout Keras
writes; its kernel filled with the generation's number, so every generation has other bytes),
rewritten in place as a trainer does (the same inode, truncated, written).

- `capture`: `ckpt serve` runs; the trainer saves a generation; the daemon is SIGKILLed after a
  delay anchored at the save (drawn in [0, 1.2 x the measured save-to-version time]: detection,
  settling, indexing, the copy) or at the copy's start (its temp file seen in `.ckpt-versions/`;
  drawn in [0, 1.2 x the measured copy time]: the copy, its fsync and hash check, the rename,
  the row), alternately, then started again; the trainer's next save waits until the newest
  generation is kept (the start's reconcile finishes a capture the kill interrupted). In 30%
  of the trials the trainer saves once more meanwhile: a generation it overwrites before anyone
  could keep it is counted apart (`overwritten`: the window README "Versions" documents).
- `restore`: no daemon; every trial runs `ckpt restore PATH --version N` (a kept generation
  other than the file's) and SIGKILLs its process group after a delay anchored at its start
  (drawn in [0, 1.2 x its measured duration]) or at its first catalog write (drawn in [0, 1.2
  x (duration - first write)]), alternately; in half the trials the trainer saves a new
  generation at a random moment of that window, which nobody indexed. Then `ckpt scan` (the
  next command: reconcile, index, capture). Both commands run in a child forked from the bench
  that calls the `ckpt` entry point with the same argv (`--cli`: a new interpreter each, ~3 s
  more per command on a loaded machine, most of it before the command acts).

Counted, after each trial and at the end:

  lost            a generation the trainer wrote that is neither at its path nor in a version
                  file (nor set aside as `*.ckpt-kept-*` by a swap that had to undo itself)
  corrupt         a version file, or the file at its path, that holds none of the generations
                  written (torn, mixed), or a version whose catalog hash is not its file's
  orphan          a version file without a live catalog row, a live version row without its
                  file, or a file in the trash without a trashed row pointing at it
  leftover_temp   a `.ckpt-tmp-*` entry in the root after the next start or command
  planned_event   an audit event still `planned` after it

    python3 bench/version_crash.py [--kills 100] [--act both|capture|restore] [--seed 20]
                                   [--quick] [--workdir DIR]

Exit 1 if any count is not 0 or fewer kills than asked landed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from random import Random

import h5py
import numpy as np
from _common import CHILD_ENV, OUT, PYTHON, Check, Launcher, machine, report, table
from _crash_checks import TEMP_PREFIX, temps, trash_files

from ckpt_daemon.fs.hashing import hash_files

INVARIANTS = ("lost", "corrupt", "orphan", "leftover_temp", "planned_event")
KILL_SPREAD = 1.2
VERSIONS = ".ckpt-versions"
CAPTURE_FLOATS, RESTORE_FLOATS = 4 << 20, 2 << 20  # 16 MB and 8 MB generations
QUICK_FLOATS = 1 << 20
START_DEADLINE = 180.0
Log = Callable[[str], None]


# ---- the workspace, the trainer, the commands ----


@dataclass
class Workspace:
    base: Path
    floats: int
    truths: dict[str, int] = field(default_factory=dict)  # sha256 of a generation -> its number
    written: int = 0
    excused: set[int] = field(default_factory=set)  # overwritten by the trainer before kept
    lost: set[int] = field(default_factory=set)  # found lost (counted once each)
    launcher: Launcher = field(default_factory=Launcher)  # how `ckpt` commands run

    @property
    def root(self) -> Path:
        return self.base / "runs"

    @property
    def config(self) -> Path:
        return self.base / "config.yaml"

    @property
    def db(self) -> Path:
        return self.base / "state" / "catalog.db"

    @property
    def best(self) -> Path:
        return self.root / "job" / "best.weights.h5"

    def create(self, settle: float) -> None:
        (self.root / "job").mkdir(parents=True)
        self.config.write_text(
            f"state_dir: {self.base / 'state'}\nroots:\n  - path: {self.root}\n"
            f"completion:\n  settle_seconds: {settle}\n  min_age_seconds: {settle}\n"
            "service:\n  heartbeat: 1s\nschedule:\n  rescan: 0\n"
        )

    def generation(self, n: int) -> bytes:
        """The bytes of generation `n`: a Keras 3 `.weights.h5`, written outside the root."""
        with tempfile.TemporaryDirectory(prefix="gen-", dir=self.base) as tmp:
            path = Path(tmp) / "w.weights.h5"
            with h5py.File(path, "w") as f:
                f.create_dataset("layers/dense/vars/0", data=np.full(self.floats, n, "float32"))
                f["layers/dense/vars"].create_dataset("1", data=np.zeros(2, "float32"))
                f.create_group("vars")
            data = path.read_bytes()
        self.truths[hashlib.sha256(data).hexdigest()] = n
        return data

    def save(self) -> int:
        """The trainer's next save, in place (the same inode, truncated, rewritten)."""
        self.written += 1
        data = self.generation(self.written)
        with open(self.best, "r+b" if self.best.exists() else "wb") as out:
            out.truncate(0)
            out.write(data)
        return self.written

    def argv(self, *args: str) -> list[str]:
        return [PYTHON, "-m", "ckpt_daemon", "--config", str(self.config), *args]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = ["--config", str(self.config), *args]
        return self.launcher.run(command, env=CHILD_ENV, cwd=None, timeout=600)


_SHAS: dict[tuple[str, int, int, int, int], str] = {}


def sha(path: Path) -> str | None:
    """The SHA-256 of `path`, read again only when its inode, size, mtime or ctime changed (the
    polls look at every version file many times a second)."""
    try:
        info = os.stat(path, follow_symlinks=False)
        key = (str(path), info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        if key not in _SHAS:
            _SHAS[key] = hashlib.sha256(path.read_bytes()).hexdigest()
        return _SHAS[key]
    except OSError:
        return None


def version_files(ws: Workspace) -> list[Path]:
    folder = ws.root / VERSIONS / "job"
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if not p.name.startswith(TEMP_PREFIX))


def last_event(db: Path) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return int(conn.execute("SELECT coalesce(max(id), 0) FROM events").fetchone()[0])
    except sqlite3.Error:
        return 0


# ---- the checks ----


def check(ws: Workspace, counts: Counter[str], notes: list[str], *, settled: bool) -> None:
    """Every invariant on disk and in the catalog (`settled`: after the next start/command,
    when temps, orphans and planned events count too)."""
    kept_aside = [p for p in ws.best.parent.iterdir() if ".ckpt-kept-" in p.name]
    held = {sha(p) for p in [ws.best, *version_files(ws), *kept_aside]}
    for p in [*version_files(ws), *kept_aside, ws.best]:
        if sha(p) not in ws.truths:
            counts["corrupt"] += 1
            notes.append(f"corrupt: {p.name} holds no generation written")
    if settled:
        lost = sorted(
            n for digest, n in list(ws.truths.items()) if digest not in held and n not in ws.excused
        )
        new = [n for n in lost if n not in ws.lost]  # each generation counted once
        ws.lost.update(new)
        counts["lost"] += len(new)
        notes += [f"lost: generation {n}" for n in new]
        _catalog(ws, counts, notes)
        left = temps(ws.root)
        counts["leftover_temp"] += len(left)
        notes += [f"leftover temp: {p}" for p in left]


def _catalog(ws: Workspace, counts: Counter[str], notes: list[str]) -> None:
    with sqlite3.connect(f"file:{ws.db}?mode=ro", uri=True, timeout=30) as conn:
        rows = conn.execute(
            "SELECT path, hash, status FROM checkpoints WHERE version_of IS NOT NULL"
        ).fetchall()
        trashed = conn.execute(
            "SELECT details FROM checkpoints WHERE status = 'trashed'"
        ).fetchall()
        planned = conn.execute("SELECT id, action, path FROM events WHERE state = 'planned'")
        planned_rows = planned.fetchall()
    conn.close()
    live = {path: digest for path, digest, status in rows if status not in ("trashed", "purged")}
    for p in version_files(ws):
        if str(p) not in live:
            counts["orphan"] += 1
            notes.append(f"orphan: {p.name} has no catalog row")
        elif live[str(p)] != hash_files([p]):
            counts["corrupt"] += 1
            notes.append(f"corrupt: {p.name} is not the bytes its row says")
    for path in live:
        if not Path(path).exists():
            counts["orphan"] += 1
            notes.append(f"orphan: the row of {Path(path).name} has no file")
    recorded = set()
    for (details,) in trashed:
        recorded.update((json.loads(details or "{}").get("trash") or {}).get("paths") or [])
    for p in trash_files(ws.root):
        if str(p) not in recorded:
            counts["orphan"] += 1
            notes.append(f"orphan: {p} is in the trash without a record")
    counts["planned_event"] += len(planned_rows)
    notes += [f"planned: {r}" for r in planned_rows]


# ---- act 1: version capture under `ckpt serve` ----


class Daemon:
    def __init__(self, ws: Workspace) -> None:
        self.log_path = ws.base / "serve.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in kill()/stop()
        command = ["--config", str(ws.config), "serve"]
        self.proc = ws.launcher.start(command, env=CHILD_ENV, cwd=None, stderr=self._log.fileno())

    def ready(self) -> None:
        deadline = time.monotonic() + START_DEADLINE
        while "event=ready" not in self.log_path.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the daemon did not start:\n{self.log_path.read_text()}")
            time.sleep(0.02)

    def kill(self, signum: int = signal.SIGKILL) -> None:
        self.proc.send_signal(signum)
        self.proc.wait(timeout=120)
        self._log.close()


def kept(ws: Workspace, n: int) -> bool:
    digest = next(d for d, g in list(ws.truths.items()) if g == n)  # the trainer may add one
    return any(sha(p) == digest for p in version_files(ws)) and not temps(ws.root / VERSIONS)


def wait_kept(ws: Workspace, n: int, deadline: float) -> bool:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if kept(ws, n):
            return True
        time.sleep(0.01)
    return False


@dataclass
class Act:
    name: str
    kills: int = 0
    in_flight: int = 0  # kills that left a temp copy (caught mid-copy)
    refused: int = 0  # restore: exit 3 (refused, nothing changed)
    succeeded: int = 0  # restore: exit 0 before the kill
    trainer_saves: int = 0
    excused: int = 0  # generations the trainer overwrote before they could be kept
    seconds: float = 0.0
    timing: dict[str, float] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)


def first_temp(ws: Workspace, n: int, deadline: float) -> float | None:
    """When a temp copy first shows in `.ckpt-versions/` (None: generation `n` was kept, or
    `deadline` passed, first)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if temps(ws.root / VERSIONS):
            return time.monotonic()
        if kept(ws, n):
            return None
        time.sleep(0.001)
    return None


def capture_act(
    base: Path, kills: int, rng: Random, floats: int, log: Log, launcher: Launcher
) -> Act:
    act, started = Act("capture"), time.monotonic()
    ws = Workspace(base / "capture", floats, launcher=launcher)
    ws.base.mkdir(parents=True)
    ws.create(settle=0.2)
    daemon = Daemon(ws)
    daemon.ready()
    latencies, copies = [], []
    for _ in range(3):  # how long a save takes to become a kept version, undisturbed
        t0 = time.monotonic()
        n = ws.save()
        copying = first_temp(ws, n, START_DEADLINE)
        if not wait_kept(ws, n, START_DEADLINE):
            raise RuntimeError(f"generation {n} was never kept:\n{daemon.log_path.read_text()}")
        latencies.append(time.monotonic() - t0)
        copies.append(time.monotonic() - copying if copying else 0.0)
    window, copy = statistics.median(latencies), max(statistics.median(copies), 0.02)
    act.timing = {"save_to_version_s": window, "copy_s": copy}
    log(f"capture: a save is a kept version {window:.2f} s later, its copy {copy:.2f} s")
    for trial in range(kills):
        n = ws.save()
        act.trainer_saves += 1
        t0 = time.monotonic()
        trainer = None
        if rng.random() < 0.3:  # the trainer saves again meanwhile
            trainer = threading.Timer(rng.uniform(0, window), _save_again, (ws, n))
            trainer.start()
            act.trainer_saves += 1
        if trial % 2:  # anchored at the copy's start: kills land in the copy and its check
            copying = first_temp(ws, n, START_DEADLINE)
            time.sleep(rng.uniform(0, KILL_SPREAD * copy) if copying else 0)
        else:  # anchored at the save: detection, settling, indexing, the copy
            time.sleep(max(0.0, t0 + rng.uniform(0, KILL_SPREAD * window) - time.monotonic()))
        daemon.kill()
        act.kills += 1
        act.in_flight += bool(temps(ws.root / VERSIONS))
        if trainer is not None:
            trainer.join()
        check(ws, act.counts, act.notes, settled=False)
        daemon = Daemon(ws)
        daemon.ready()
        if not wait_kept(ws, ws.written, START_DEADLINE) and ws.written not in ws.lost:
            ws.lost.add(ws.written)
            act.counts["lost"] += 1
            act.notes.append(f"trial {trial}: generation {ws.written} not kept after the restart")
        if trial % 10 == 9:
            log(f"capture: {trial + 1} kills, {act.in_flight} mid-copy, {dict(act.counts)}")
    daemon.kill(signal.SIGTERM)
    ws.run("scan")
    check(ws, act.counts, act.notes, settled=True)
    act.excused = len(ws.excused)
    act.seconds = time.monotonic() - started
    return act


def _save_again(ws: Workspace, n: int) -> None:
    """The trainer's next save: generation `n`, if not kept by then, is overwritten before
    anyone could keep it (the window README "Versions" documents), not lost by us."""
    if not kept(ws, n):
        ws.excused.add(n)
    ws.save()


# ---- act 2: `ckpt restore --version`, the trainer saving meanwhile ----


def kept_generations(ws: Workspace) -> list[int]:
    return sorted({ws.truths[d] for p in version_files(ws) if (d := sha(p)) in ws.truths})


class Forked:
    """`ckpt ARGS` in a child forked from this process, its own session (killed as a group):
    the `ckpt` entry point (`cli.main.run`) with the same argv, the code a user's command runs,
    without the ~3 s an interpreter takes to start and import on a loaded machine. The parent
    imported it already; no thread of the parent runs while it forks (the trainer's starts
    after)."""

    def __init__(self, ws: Workspace, *args: str) -> None:
        from ckpt_daemon.cli.main import run

        self.returncode: int | None = None
        self.pid = os.fork()
        if self.pid == 0:  # the child
            code = 1
            try:
                os.setsid()
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                code = run(["--config", str(ws.config), *args])
            finally:
                os._exit(code)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            _pid, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def _preload() -> None:
    """What `ckpt restore` and `ckpt scan` import, imported once here before any fork."""
    import ckpt_daemon.api
    import ckpt_daemon.cli.main
    import ckpt_daemon.usecases.indexer
    import ckpt_daemon.usecases.versions  # noqa: F401


Proc = subprocess.Popen[bytes] | Forked


def launch(ws: Workspace, fork: bool, *args: str) -> Proc:
    if fork:
        return Forked(ws, *args)
    return subprocess.Popen(
        ws.argv(*args),
        env=CHILD_ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def launch_restore(ws: Workspace, generation: int, fork: bool) -> Proc:
    version = next(
        p for p in version_files(ws) if ws.truths.get(sha(p) or "") == generation
    ).name  # `best.v<catalog generation>.weights.h5`
    number = version.split(".v", 1)[1].split(".", 1)[0]
    return launch(ws, fork, "restore", str(ws.best), "--version", number)


def first_write_after(ws: Workspace, proc: Proc, before: int) -> float | None:
    while proc.poll() is None:
        if last_event(ws.db) > before:
            return time.monotonic()
        time.sleep(0.002)
    return None


def restore_act(
    base: Path,
    kills: int,
    rng: Random,
    floats: int,
    log: Log,
    fork: bool = True,
    launcher: Launcher | None = None,
) -> Act:
    act, started = Act("restore" if fork else "restore (cli)"), time.monotonic()
    if fork:
        _preload()
    ws = Workspace(base / "restore", floats, launcher=launcher or Launcher())
    ws.base.mkdir(parents=True)
    ws.create(settle=0)
    for _ in range(3):
        ws.save()
        ws.run("scan")
    walls, writes = [], []
    for _ in range(3):  # a restore undisturbed: its duration, and when it first writes
        current = ws.truths.get(sha(ws.best) or "")
        chosen = rng.choice([g for g in kept_generations(ws) if g != current])
        before, t0 = last_event(ws.db), time.monotonic()
        proc = launch_restore(ws, chosen, fork)
        wrote = first_write_after(ws, proc, before)
        proc.wait()
        walls.append(time.monotonic() - t0)
        writes.append((wrote or time.monotonic()) - t0)
    wall, write = statistics.median(walls), statistics.median(writes)
    act.timing = {"restore_s": wall, "first_write_s": write}
    log(f"restore: {wall:.2f} s, first catalog write at {write:.2f} s (medians of 3)")
    trial = 0
    while act.kills < kills:
        trial += 1
        current = ws.truths.get(sha(ws.best) or "")
        choices = [g for g in kept_generations(ws) if g != current]
        if not choices:
            ws.run("scan")
            continue
        anchor = "write" if trial % 2 else "start"
        before = last_event(ws.db)
        t0 = time.monotonic()
        proc = launch_restore(ws, rng.choice(choices), fork)
        trainer = None
        if rng.random() < 0.5:  # the trainer saves meanwhile, unindexed
            at = rng.uniform(0, KILL_SPREAD * wall)
            trainer = threading.Timer(at, ws.save)
            trainer.start()
            act.trainer_saves += 1
        if anchor == "write":
            wrote = first_write_after(ws, proc, before)
            delay = rng.uniform(0, KILL_SPREAD * max(wall - write, 0.05))
            deadline = (wrote or time.monotonic()) + delay
        else:
            deadline = t0 + rng.uniform(0, KILL_SPREAD * wall)
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:  # forked a moment ago: not a session leader yet
                os.kill(proc.pid, signal.SIGKILL)
            act.kills += 1
        elif proc.returncode == 0:
            act.succeeded += 1
        elif proc.returncode == 3:
            act.refused += 1
        else:
            act.notes.append(f"trial {trial}: restore exited {proc.returncode}")
        proc.wait()
        if trainer is not None:
            trainer.join()
        check(ws, act.counts, act.notes, settled=False)
        scanned = launch(ws, fork, "scan").wait()  # the next command
        if scanned != 0:
            act.notes.append(f"trial {trial}: scan exited {scanned}")
        check(ws, act.counts, act.notes, settled=True)
        if act.kills and act.kills % 10 == 0 and proc.returncode == -signal.SIGKILL:
            log(f"restore: {act.kills} kills in {trial} trials, {dict(act.counts)}")
    act.seconds = time.monotonic() - started
    return act


# ---- the campaign ----


def run_campaign(
    base: Path,
    *,
    kills: int,
    seed: int,
    acts: tuple[str, ...],
    floats: int,
    log: Log,
    fork: bool = True,
    launcher: Launcher | None = None,
) -> list[Act]:
    """`launcher`: how the capture act's daemon and commands run (default: fresh
    interpreters); `fork`: the restore act's commands forked from this process (the bench's
    `--cli` runs them as fresh interpreters)."""
    rng = Random(seed)
    done = []
    if "capture" in acts:
        done.append(capture_act(base, kills, rng, floats, log, launcher or Launcher()))
    if "restore" in acts:
        done.append(restore_act(base, kills, rng, floats // 2, log, fork, launcher))
    return done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=100, help="SIGKILLs per act (100)")
    parser.add_argument("--act", choices=("both", "capture", "restore"), default="both")
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="10 kills, 4 MB generations")
    parser.add_argument("--workdir", type=Path, help="keep the workspaces here")
    parser.add_argument(
        "--cli", action="store_true", help="restore: each command a new interpreter (slower)"
    )
    args = parser.parse_args()
    kills = 10 if args.quick else args.kills
    floats = QUICK_FLOATS if args.quick else CAPTURE_FLOATS
    acts = ("capture", "restore") if args.act == "both" else (args.act,)
    OUT.mkdir(parents=True, exist_ok=True)
    print(f"machine: {machine()}")
    # Not `tmpXXXXXX`: the watcher skips hints below a folder named like a writer's temp one.
    with tempfile.TemporaryDirectory(prefix="version-crash-", dir=args.workdir or OUT) as tmp:
        result = run_campaign(
            Path(tmp),
            kills=kills,
            seed=args.seed,
            acts=acts,
            floats=floats,
            log=print,
            fork=not args.cli,
        )
    table(
        ["act", "kills", "mid-copy", "ok", "refused", "saves", "overwritten", "s", *INVARIANTS],
        [
            [a.name, a.kills, a.in_flight, a.succeeded, a.refused, a.trainer_saves, a.excused]
            + [round(a.seconds)]
            + [a.counts[i] for i in INVARIANTS]
            for a in result
        ],
    )
    for a in result:
        for note in a.notes[:20]:
            print(f"{a.name}: {note}")
    checks = [
        Check(f"{a.name}: {inv}", a.counts[inv], "= 0", "", a.counts[inv] == 0)
        for a in result
        for inv in INVARIANTS
    ] + [Check(f"{a.name}: kills", a.kills, f">= {kills}", "", a.kills >= kills) for a in result]
    facts: dict[str, object] = {
        "seed": args.seed,
        "bytes_per_generation": floats * 4,
        "acts": {
            a.name: {
                "kills": a.kills,
                "mid_copy": a.in_flight,
                "restores_done": a.succeeded,
                "restores_refused": a.refused,
                "trainer_saves": a.trainer_saves,
                "overwritten_before_kept": a.excused,
                "seconds": round(a.seconds, 1),
                "timing": a.timing,
                "counts": {i: a.counts[i] for i in INVARIANTS},
                "notes": a.notes[:50],
            }
            for a in result
        },
    }
    return report("version_crash", checks, facts)


if __name__ == "__main__":
    raise SystemExit(main())
