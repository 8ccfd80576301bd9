"""Crash campaign (issue 8): SIGKILLs at random moments, then what the next command leaves.

The commands killed: `ckpt split`, `compress`, `prune`, `trash restore`, and a prune racing a
`ckpt pin` (pin-during-prune).

A workspace like tests/support's (config, root, SQLite catalog) holds several runs of real
Keras checkpoints copied from $CKPT_TEST_FIXTURES (`.keras`, Keras 3 `.weights.h5`, legacy `.h5`
with and without optimizer state), 7 epochs each, named by the configured filename templates,
mtimes in epoch order. The pristine state: scanned, epochs 1-2 of every run trashed (by `ckpt
prune`, so that restore trials have something to restore), epoch 3 pinned.

Each trial starts one command as its own process group and SIGKILLs the group after a random
delay, anchored at the command's start (drawn uniformly in [0, 1.2 x its measured duration]) or
at its first catalog write, seen by polling the catalog every ~2 ms (drawn in [0, 1.2 x (duration
- first write)]): most of a short command's life is the interpreter starting and importing, so
start-anchored kills rarely hit the acting. `--anchor both` (default) alternates per round of
kinds. Durations are medians of normal runs on the pristine state, measured first. Then it runs
the next command (`ckpt scan`, or `--next serve`: `ckpt serve --once`), then, after a kill, the
same command again (the user's retry, the lease probe), for pin-during-prune `ckpt trash purge
--older-than 0s`, and checks, counting items:

  corrupt         a checkpoint file at its path or in the trash, or an inference artifact at its
                  final name, that does not decode fully or holds other content than the
                  original (decoded equality: compress changes bytes, not content); checked
                  right after the kill too
  lost            a checkpoint neither at its path, nor in the trash with a `trashed` row whose
                  trash paths exist, nor purged legitimately
  wrong_deletion  a checkpoint gone from its path that the policy protects (pinned, the run's
                  newest by epoch, kept by the prune's own flags, or any in a non-prune trial),
                  a pin acknowledged (exit 0) before the trash move was planned, or purged pinned
  orphaned_trash  a file under `<root>/.ckpt-trash/` that no `trashed` row points at
  stale_lease     after the next command, a held `leases` row (unexpired: no command runs
                  then, so its holder is dead); or the retry exiting 4 (lease held)
  leftover_temp   a `.ckpt-tmp-*` entry in the root after the next command
  planned_event   an audit event still `planned` after the next command

The workspace is put back between trials cheaply: files moved by the trial (trash, restore) are
renamed back (same inode, so the catalog still matches; before a purge the trash is hard-linked
outside the root for that), rewritten or deleted ones are copied back and rescanned, everything
else is removed, the catalog file is restored from its pristine copy.

    python3 bench/crash_campaign.py [--kills 300] [--seed 8] [--quick] [--anchor both]
                                    [--next scan] [--workdir DIR]

Exit 1 if any invariant count is not 0.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from random import Random

from _common import (
    CHILD_ENV,
    OUT,
    PYTHON,
    REPO,
    Check,
    Launcher,
    Process,
    machine,
    report,
    table,
)
from _crash_checks import (
    ARTIFACT_MARK,
    TRASH_DIR,
    Catalog,
    alive,
    artifact_problem,
    content_problem,
    lease_pid,
    original_of_trashed,
    read_catalog,
    temps,
    trash_files,
    walk_files,
)

KINDS = ("split", "compress", "prune-last", "prune-best", "restore", "pin-during-prune")
INVARIANTS = (
    "corrupt",
    "lost",
    "wrong_deletion",
    "orphaned_trash",
    "stale_lease",
    "leftover_temp",
    "planned_event",
)
# run folder: (filename template, fixture files copied round-robin into its epochs)
RUNS: dict[str, tuple[str, tuple[str, ...]]] = {
    "zip": (
        "e{epoch:02d}-vl{val_loss:.3f}.keras",
        ("k3/run_zip/e01-vl1.683.keras", "k3/run_zip/e02-vl1.663.keras"),
    ),
    "legacy": (
        "weights.{epoch:02d}-{val_loss:.2f}.hdf5",
        ("tfk/run_h5/weights.01-1.69.hdf5", "tfk/run_h5/weights.02-1.68.hdf5", "k3/legacy/full.h5"),
    ),
    "wstore": (
        "w.{epoch:02d}.weights.h5",
        ("k3/run_weights/w.01.weights.h5", "k3/run_weights/w.02.weights.h5"),
    ),
    "model": (
        "model.{epoch:02d}-{val_loss:.2f}.keras",
        ("k3/run_zip/e03-vl1.643.keras", "k3/schedule/lr_schedule.keras"),
    ),
    "wonly": (
        "weights.{epoch:02d}-{val_loss:.2f}.hdf5",
        ("tfk/weights_only.h5", "k3/legacy/noopt.h5"),
    ),
}
QUICK_RUNS = ("zip", "legacy", "wstore")
VAL_LOSS = (1.70, 1.52, 1.61, 1.47, 1.58, 1.55, 1.63)  # not monotonic: best != newest
TRASHED_EPOCHS = 2  # the oldest ones, trashed in the pristine state
PINNED_EPOCH = 3
SPLITTABLE = ("keras-v3-zip", "keras-v3-weights-h5", "keras-legacy-h5")  # usecases.artifacts
COMPRESSIBLE = (*SPLITTABLE, "keras-legacy-weights-h5")
KILL_SPREAD = 1.2  # kill delays are drawn in [0, KILL_SPREAD x measured duration]
CMD_TIMEOUT = 300.0
# "The next command" after a kill: a scan, or the daemon's start (reconcile, due jobs, exit).
NEXT_COMMANDS = {"scan": ("scan",), "serve": ("serve", "--once")}


@dataclass(frozen=True)
class Ckpt:
    """A checkpoint of the pristine state, and the fixture file it is a copy of."""

    id: int
    path: str
    run: str
    epoch: int
    val_loss: float | None
    status: str  # ok | trashed
    pinned: bool
    format: str
    optimizer: bool
    truth: Path  # the fixture it was copied from


# ---- the workspace and its pristine state ----


class Workspace:
    """A root, a config naming it (conftest's templates), a catalog, and a pristine copy."""

    def __init__(self, base: Path, launcher: Launcher) -> None:
        self.launcher = launcher
        self.base = base
        self.root = base / "runs"
        self.state = base / "state"
        self.db = self.state / "catalog.db"
        self.config = base / "config.yaml"
        self.pristine = base / "pristine"
        self.log = base / "command.log"
        self.stash = base / "stash"
        self.files: dict[str, tuple[int, int, int, str]] = {}  # rel: (inode, size, mtime, sha)
        self.dirs: set[str] = set()
        self.rescans = 0
        self.last_event = 0

    def args(self, *args: str) -> list[str]:
        return ["--config", str(self.config), *args]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.launcher.run(
            self.args(*args), env=CHILD_ENV, cwd=self.base, timeout=CMD_TIMEOUT
        )

    def must(self, *args: str) -> str:
        done = self.cli(*args)
        if done.returncode != 0:
            raise SystemExit(f"ckpt {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
        return done.stdout

    def start(self, *args: str) -> Process:
        """A command in its own process group (so that the whole group can be killed)."""
        with open(self.log, "ab") as log:
            return self.launcher.start(
                self.args(*args), env=CHILD_ENV, cwd=self.base, stderr=log.fileno()
            )

    def snapshot(self) -> None:
        """Remember the current state as pristine: the files (with inodes) and the catalog."""
        if self.pristine.exists():
            shutil.rmtree(self.pristine)
        shutil.copytree(self.root, self.pristine / "runs", symlinks=True)
        _copy_db(self.db, self.pristine / "catalog.db")
        self.last_event = read_catalog(self.db).last_event
        self.files, self.dirs = {}, set()
        for dirpath, dirnames, filenames in os.walk(self.root):
            for name in dirnames:
                self.dirs.add(os.path.relpath(os.path.join(dirpath, name), self.root))
            for name in filenames:
                path = Path(dirpath) / name
                info = path.lstat()
                rel = str(path.relative_to(self.root))
                self.files[rel] = (info.st_ino, info.st_size, info.st_mtime_ns, _sha(path))

    def files_changed(self) -> bool:
        now = {str(p.relative_to(self.root)): p.lstat().st_ino for p in walk_files(self.root)}
        return now != {rel: info[0] for rel, info in self.files.items()}

    def stash_trash(self) -> None:
        """Hard links to the trashed files, outside the root: what a purge deletes comes back
        with its inode (and the catalog still matches, no rescan)."""
        self.stash.mkdir(exist_ok=True)
        for n, path in enumerate(trash_files(self.root)):
            if path.is_file() and not path.is_symlink():
                os.link(path, self.stash / str(n))

    def reset(self) -> None:
        """Back to the pristine state, cheaply (see the module docstring)."""
        found = [*walk_files(self.root), *(self.stash.iterdir() if self.stash.exists() else [])]
        by_inode = {p.lstat().st_ino: p for p in found if p.is_file()}
        recopied = []
        for rel, (inode, size, mtime, sha) in self.files.items():
            target = self.root / rel
            if _same_file(target, inode, size, mtime):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            moved = by_inode.get(inode)
            if moved is not None and _same_file(moved, inode, size, mtime) and _sha(moved) == sha:
                os.replace(moved, target)
            else:
                if os.path.lexists(target):
                    target.unlink()
                shutil.copy2(self.pristine / "runs" / rel, target)
                recopied.append(rel)
        for path in walk_files(self.root):
            if str(path.relative_to(self.root)) not in self.files:
                path.unlink()
        for dirpath, dirnames, _files in os.walk(self.root, topdown=False):
            for name in dirnames:
                folder = Path(dirpath) / name
                if str(folder.relative_to(self.root)) not in self.dirs:
                    shutil.rmtree(folder)
        for rel in self.dirs:
            (self.root / rel).mkdir(parents=True, exist_ok=True)
        _copy_db(self.pristine / "catalog.db", self.db)
        if self.stash.exists():
            shutil.rmtree(self.stash)
        if recopied:  # new inodes: the catalog must learn them, or every act would refuse
            if any(not rel.startswith(TRASH_DIR) for rel in recopied):
                self.must("scan")
                self.rescans += 1
            self.snapshot()


def _same_file(path: Path, inode: int, size: int, mtime: int) -> bool:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return False
    return (info.st_ino, info.st_size, info.st_mtime_ns) == (inode, size, mtime)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _copy_db(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite database (WAL included) to a fresh file."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    src.close()
    dst.close()


def build(
    base: Path, fixtures: Path, runs: tuple[str, ...], launcher: Launcher
) -> tuple[Workspace, dict[int, Ckpt]]:
    """The pristine workspace and the ground truth of every checkpoint in it."""
    if base.exists():
        shutil.rmtree(base)
    ws = Workspace(base, launcher)
    ws.root.mkdir(parents=True)
    templates = "".join(f'\n      - "{RUNS[r][0]}"' for r in runs)
    ws.config.write_text(
        f"state_dir: {ws.state}\n"
        f"roots:\n  - path: {ws.root}\n    filename_template:{templates}\n"
        "completion:\n  settle_seconds: 0\n"
    )
    start = time.time() - 86400
    names: dict[str, tuple[str, int, float | None, Path]] = {}
    for r in runs:
        template, sources = RUNS[r]
        (ws.root / r).mkdir()
        for epoch in range(1, len(VAL_LOSS) + 1):
            val_loss = VAL_LOSS[epoch - 1]
            file = ws.root / r / template.format(epoch=epoch, val_loss=val_loss)
            source = fixtures / sources[(epoch - 1) % len(sources)]
            shutil.copyfile(source, file)
            moment = start + epoch * 600  # the trainer wrote them in epoch order
            os.utime(file, (moment, moment))
            metric = val_loss if "val_loss" in template else None
            names[str(file)] = (r, epoch, metric, source)  # the source: its ground truth
    ws.must("scan")
    ws.must("prune", "--keep-last", str(len(VAL_LOSS) - TRASHED_EPOCHS))
    catalog = read_catalog(ws.db)
    for path, row in catalog.rows.items():
        if names[path][1] == PINNED_EPOCH:
            ws.must("pin", str(row.id))
    ws.snapshot()
    with sqlite3.connect(f"file:{ws.db}?mode=ro", uri=True) as conn:
        facts = {
            path: (fmt, bool(opt))
            for path, fmt, opt in conn.execute(
                "SELECT path, format, optimizer_bytes FROM checkpoints"
            )
        }
    conn.close()
    truth: dict[int, Ckpt] = {}
    for path, row in read_catalog(ws.db).rows.items():
        run, epoch, metric, source = names[path]
        fmt, optimizer = facts[path]
        truth[row.id] = Ckpt(
            row.id, path, run, epoch, metric, row.status, row.pinned, fmt, optimizer, source
        )
        expected = ("trashed" if epoch <= TRASHED_EPOCHS else "ok", epoch == PINNED_EPOCH)
        if (row.status, row.pinned) != expected:
            raise SystemExit(
                f"pristine state: {path} is {row.status}, pinned {row.pinned}; expected "
                f"{expected} (the setup's scan, prune --keep-last {len(VAL_LOSS) - TRASHED_EPOCHS}"
                " and pin did not do what they should)"
            )
    if len(truth) != len(names):
        raise SystemExit(f"pristine state: {len(truth)} catalogued of {len(names)} checkpoints")
    return ws, truth


# ---- what each trial runs, and what it may trash ----


@dataclass(frozen=True)
class Plan:
    kind: str
    args: tuple[str, ...]
    what: str
    allowed: frozenset[int]  # the ids this command may trash (the policy's doomed ones)
    pin: int | None = None  # pin-during-prune: the doomed checkpoint pinned meanwhile


def make_plan(kind: str, truth: dict[int, Ckpt], rng: Random) -> Plan:
    ok = [c for c in sorted(truth.values(), key=lambda c: c.id) if c.status == "ok"]
    if kind == "split":
        c = rng.choice([c for c in ok if c.format in SPLITTABLE and c.optimizer])
        return Plan(kind, ("split", str(c.id)), f"split {_name(c)}", frozenset())
    if kind == "compress":
        c = rng.choice([c for c in ok if c.format in COMPRESSIBLE])
        return Plan(kind, ("compress", str(c.id)), f"compress {_name(c)}", frozenset())
    if kind == "restore":
        c = rng.choice([c for c in sorted(truth.values(), key=lambda c: c.id) if c.status != "ok"])
        return Plan(kind, ("trash", "restore", str(c.id)), f"restore {_name(c)}", frozenset())
    if kind == "prune-best":
        args: tuple[str, ...] = (
            "prune",
            "--keep-last",
            "1",
            "--keep-best",
            "1",
            "--metric",
            "val_loss",
        )
        return Plan(kind, args, "prune " + " ".join(args[1:]), allowed_to_trash(ok, 1, 1))
    keep = rng.choice((1, 2) if kind == "pin-during-prune" else (1, 2, 3))
    args = ("prune", "--keep-last", str(keep))
    allowed = allowed_to_trash(ok, keep, None)
    if kind == "prune-last":
        return Plan(kind, args, f"prune --keep-last {keep}", allowed)
    c = truth[rng.choice(sorted(allowed))]
    return Plan(kind, args, f"prune --keep-last {keep} + pin {_name(c)}", allowed, pin=c.id)


def allowed_to_trash(ok: list[Ckpt], keep_last: int, keep_best: int | None) -> frozenset[int]:
    """What the policy may trash, computed here, not by the code under test: not pinned, not
    the run's newest by epoch, not among the last `keep_last` epochs, not among the best
    `keep_best` by val_loss (min); a checkpoint without the metric is kept by a best rule."""
    allowed: set[int] = set()
    for run in sorted({c.run for c in ok}):
        items = sorted((c for c in ok if c.run == run), key=lambda c: c.epoch)
        keep = {c.id for c in items[-keep_last:]} | {c.id for c in items if c.pinned}
        if keep_best:
            scored = sorted((c.val_loss, c.id) for c in items if c.val_loss is not None)
            keep |= {key for _loss, key in scored[:keep_best]}
            keep |= {c.id for c in items if c.val_loss is None}
        allowed |= {c.id for c in items} - keep
    return frozenset(allowed)


def _name(c: Ckpt) -> str:
    return f"{c.run}/{Path(c.path).name} (id {c.id})"


# ---- one trial ----


@dataclass
class Trial:
    n: int
    plan: Plan
    delay: float  # seconds after the command's start (anchored: after its first catalog write)
    anchored: bool = False
    killed: bool = False
    exit: int | None = None  # when it finished before the kill
    pin_exit: int | None = None
    scan_exit: int | None = None
    retry_exit: int | None = None
    trace: set[str] = field(default_factory=set)  # what the kill left behind, before any repair
    found: dict[tuple[str, str], str] = field(default_factory=dict)  # (invariant, item): detail

    def add(self, invariant: str, item: str, detail: str) -> None:
        self.found.setdefault((invariant, item), detail)

    def describe(self) -> str:
        at = f"{self.delay:.3f} s" + (" after its first catalog write" if self.anchored else "")
        how = f"SIGKILL at {at}" if self.killed else f"exited {self.exit} before the kill at {at}"
        pin = "" if self.pin_exit is None else f", pin exit {self.pin_exit}"
        return f"trial {self.n} ({self.plan.what}; {how}{pin})"


def run_trial(
    ws: Workspace,
    truth: dict[int, Ckpt],
    n: int,
    plan: Plan,
    delay: float,
    pin_offset: float,
    anchored: bool = False,
    next_command: tuple[str, ...] = ("scan",),
) -> Trial:
    trial = Trial(n, plan, delay, anchored)
    _launch(ws, trial, pin_offset)
    by_path = {c.path: c for c in truth.values()}
    # Right after the crash: nothing may be corrupt; note what the kill left to be repaired.
    crash = read_catalog(ws.db)
    _check_content(ws, by_path, trial)
    trial.trace |= _leftovers(ws, crash)
    # The next command, then everything must be in order.
    trial.scan_exit = ws.cli(*next_command).returncode
    after_scan = read_catalog(ws.db)
    if any(ARTIFACT_MARK in Path(path).name for path in after_scan.rows):
        trial.trace.add("artifact-indexed")  # our own output catalogued as a checkpoint
    _check_all(ws, truth, by_path, after_scan, trial)
    # No command of ours runs now: every lease row left is held by a dead process.
    for run_id, holder, expires in after_scan.leases:
        pid = lease_pid(holder)
        state = "unknown pid" if pid is None else "alive?!" if alive(pid) else "dead"
        trial.add("stale_lease", f"run {run_id}", f"lease row of {holder} ({state}) to {expires}")
    # The user's retry after a kill (the lease probe), then everything again.
    if trial.killed:
        retry = ws.cli(*plan.args)
        trial.retry_exit = retry.returncode
        if retry.returncode == 4 and not any(inv == "stale_lease" for inv, _ in trial.found):
            trial.add("stale_lease", "retry", f"retry exited 4: {_last_line(retry.stderr)}")
    if plan.pin is not None:
        ws.stash_trash()  # purge deletes: keep the inodes, for a cheap reset
        ws.cli("trash", "purge", "--older-than", "0s")
    _check_all(ws, truth, by_path, read_catalog(ws.db), trial)
    ws.reset()
    return trial


def _launch(ws: Workspace, trial: Trial, pin_offset: float) -> None:
    """Start the command (and the pin, `pin_offset` s after it; before it if negative), and
    SIGKILL the command's process group `trial.delay` s after its start, or with
    `trial.anchored`, `trial.delay` s after its first catalog write (polled every ~2 ms)."""
    command_at = max(0.0, -pin_offset) if trial.plan.pin is not None else 0.0
    steps = [(command_at, "start")]
    if trial.plan.pin is not None:
        steps.append((max(0.0, pin_offset), "pin"))
    steps.sort(key=lambda step: (step[0], step[1] != "start"))
    kill_at = None if trial.anchored else command_at + trial.delay
    proc = pin = None
    with sqlite3.connect(f"file:{ws.db}?mode=ro", uri=True, timeout=30) as conn:
        before = conn.execute(_ACTING).fetchone()
        t0 = time.perf_counter()
        while True:
            now = time.perf_counter() - t0
            while steps and steps[0][0] <= now:
                if steps.pop(0)[1] == "start":
                    proc = ws.start(*trial.plan.args)
                else:
                    pin = ws.start("pin", str(trial.plan.pin))
            if proc is not None:
                if proc.poll() is not None:
                    break
                if kill_at is None and conn.execute(_ACTING).fetchone() != before:
                    kill_at = now + trial.delay
                if kill_at is not None and now >= kill_at:
                    _killpg(proc.pid)
                    break
            time.sleep(0.002)
    conn.close()
    assert proc is not None
    code = proc.wait(timeout=CMD_TIMEOUT)
    _killpg(proc.pid)  # anything of the group still alive (children) goes too
    trial.killed = code == -signal.SIGKILL
    trial.exit = None if trial.killed else code
    if pin is not None:
        trial.pin_exit = pin.wait(timeout=CMD_TIMEOUT)


# The command's own first catalog write: a lease taken (every take adds one to its run's fencing
# token; released leases keep their row) or an event other than the racing pin's.
_ACTING = (
    "SELECT (SELECT coalesce(sum(token), 0) FROM leases),"
    " (SELECT coalesce(max(id), 0) FROM events WHERE action != 'pin')"
)


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _leftovers(ws: Workspace, cat: Catalog) -> set[str]:
    left = set()
    if cat.last_event > ws.last_event or cat.leases or ws.files_changed():
        left.add("acted")  # the kill landed after the command began to change something
    if cat.leases:
        left.add("lease")
    if cat.planned:
        left.add("planned")
    if temps(ws.root):
        left.add("temp")
    if _orphans(ws, cat):
        left.add("orphan")
    return left


# ---- the invariants ----


def _check_content(ws: Workspace, by_path: dict[str, Ckpt], trial: Trial) -> None:
    for c in by_path.values():
        if os.path.lexists(c.path) and (problem := content_problem(Path(c.path), c.truth)):
            trial.add("corrupt", c.path, problem)
    for item in trash_files(ws.root):
        was = by_path.get(str(original_of_trashed(ws.root, item)))
        if was is not None and (problem := content_problem(item, was.truth)):
            trial.add("corrupt", str(item), problem)
    for path in walk_files(ws.root):
        if ARTIFACT_MARK not in path.name or TRASH_DIR in path.parts or _is_temp(path):
            continue
        source = by_path.get(str(path.with_name(path.name.replace(ARTIFACT_MARK, ".", 1))))
        if source is not None and (problem := artifact_problem(path, source.truth)):
            trial.add("corrupt", str(path), f"artifact: {problem}")


def _check_all(
    ws: Workspace, truth: dict[int, Ckpt], by_path: dict[str, Ckpt], cat: Catalog, trial: Trial
) -> None:
    _check_content(ws, by_path, trial)
    plan = trial.plan
    for c in truth.values():
        row = cat.rows.get(c.path)
        at_path = os.path.lexists(c.path)
        in_trash = bool(
            row
            and row.status == "trashed"
            and row.trash_paths
            and all(os.path.lexists(p) for p in row.trash_paths)
        )
        purged = bool(row and row.status == "purged")
        state = row.status if row else "no row"
        if not (at_path or in_trash or (purged and (c.status != "ok" or c.id in plan.allowed))):
            trial.add("lost", c.path, f"not at its path, catalog row {state}")
        if c.status == "ok" and not at_path and c.id not in plan.allowed:
            why = "pinned" if c.pinned else "kept by the policy or not a prune"
            trial.add("wrong_deletion", c.path, f"{why}; now {state}")
        if purged and row is not None and row.pinned:
            trial.add("wrong_deletion", c.path, "purged while pinned")
        if c.id == plan.pin and trial.pin_exit == 0:
            pinned_at = cat.event_ids("pin", c.id, "done")
            trashed_at = cat.event_ids("trash", c.id)
            if pinned_at and any(t > pinned_at[-1] for t in trashed_at):
                trial.add("wrong_deletion", c.path, "trashed after its pin was acknowledged")
            elif trashed_at and not at_path:
                trial.trace.add("pin-late")  # the pin landed on an item already being trashed
    for item in _orphans(ws, cat):
        trial.add("orphaned_trash", str(item.relative_to(ws.root)), "no trashed row points here")
    for item in temps(ws.root):
        trial.add("leftover_temp", str(item.relative_to(ws.root)), "left after the next command")
    for key, action, path in cat.planned:
        trial.add("planned_event", f"event {key}", f"{action} {path} still planned")


def _orphans(ws: Workspace, cat: Catalog) -> list[Path]:
    claimed = {
        Path(p) for row in cat.rows.values() if row.status == "trashed" for p in row.trash_paths
    }
    return [
        item
        for item in trash_files(ws.root)
        if item not in claimed and not any(parent in claimed for parent in item.parents)
    ]


def _is_temp(path: Path) -> bool:
    return path.name.startswith(".ckpt-tmp-")


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


# ---- the campaign ----


@dataclass
class Campaign:
    seed: int
    anchor: str
    next_command: str
    timing: Timing
    trials: list[Trial]
    seconds: float
    rescans: int

    @property
    def kills(self) -> int:
        return sum(t.killed for t in self.trials)

    def count(self, invariant: str, kind: str | None = None) -> int:
        return sum(
            1
            for t in self.trials
            if kind in (None, t.plan.kind)
            for inv, _item in t.found
            if inv == invariant
        )

    def failures(self) -> list[str]:
        """One line per finding: which trial, which invariant, which item, why."""
        return [
            f"{t.describe()}: {inv}: {item}: {detail}"
            for t in self.trials
            for (inv, item), detail in sorted(t.found.items())
        ]


@dataclass(frozen=True)
class Timing:
    """Medians over normal runs on the pristine state: the whole command, and when it first
    wrote to the catalog (a lease or an event: where its acting begins)."""

    wall: dict[str, float]
    act: dict[str, float]


def measure(
    ws: Workspace, truth: dict[int, Ckpt], rng: Random, repeats: int, *, warm_up: bool = True
) -> Timing:
    """Each kind (and `pin` alone) `repeats` times, round-robin (after one uncounted warm-up
    round with `warm_up`), so that a load spike from elsewhere hits all kinds alike."""
    kinds = (*KINDS, "pin")
    walls: dict[str, list[float]] = {k: [] for k in kinds}
    acts: dict[str, list[float]] = {k: [] for k in kinds}
    ok = sorted(c.id for c in truth.values() if c.status == "ok" and not c.pinned)
    first = 0 if warm_up else 1
    for round_ in range(first, repeats + 1):
        for kind in kinds:
            args = (
                ("pin", str(rng.choice(ok))) if kind == "pin" else make_plan(kind, truth, rng).args
            )
            wall, act = _timed(ws, args)
            if round_:
                walls[kind].append(wall)
                acts[kind].append(act)
            ws.reset()
    median = statistics.median
    return Timing({k: median(v) for k, v in walls.items()}, {k: median(v) for k, v in acts.items()})


def _timed(ws: Workspace, args: tuple[str, ...]) -> tuple[float, float]:
    """(wall seconds, seconds until its first catalog write), polling the catalog read-only."""
    query = (
        "SELECT (SELECT coalesce(sum(token), 0) FROM leases),"
        " (SELECT coalesce(max(id), 0) FROM events)"
    )
    with sqlite3.connect(f"file:{ws.db}?mode=ro", uri=True, timeout=30) as conn:
        before = conn.execute(query).fetchone()
        start = time.perf_counter()
        proc = ws.start(*args)
        act = None
        while proc.poll() is None:
            if act is None and conn.execute(query).fetchone() != before:
                act = time.perf_counter() - start
            time.sleep(0.002)
        wall = time.perf_counter() - start
    conn.close()
    if proc.returncode not in (0, 3):
        raise SystemExit(f"a normal `ckpt {' '.join(args)}` exited {proc.returncode}: {ws.log}")
    return wall, wall if act is None else act


def run_campaign(
    base: Path,
    fixtures: Path,
    *,
    kills: int,
    seed: int,
    quick: bool = False,
    anchor: str = "both",
    next_command: str = "scan",
    repeats: int | None = None,
    log: Callable[[str], None] = print,
    launcher: Launcher | None = None,
) -> Campaign:
    """`anchor`: "start" kills `delay` s after the command's start, drawn in [0, 1.2 x its
    duration]; "write" kills `delay` s after its first catalog write (seen by polling), drawn
    in [0, 1.2 x (duration - first write)]: most of a short command's life is the interpreter
    starting and importing, so "start" alone rarely hits the acting; "both" alternates, per
    kind, one round of trials each. `launcher`: how each `ckpt` command runs (default: a fresh
    interpreter, as a user runs it)."""
    start = time.perf_counter()
    rng = Random(seed)
    ws, truth = build(base, fixtures, QUICK_RUNS if quick else tuple(RUNS), launcher or Launcher())
    # --quick: one timing round, no warm-up (the kill delays are drawn from those medians;
    # the top-up trials aim earlier when a kind finished before its kill).
    timing = measure(ws, truth, rng, repeats or (1 if quick else 3), warm_up=not quick)
    log(
        "measured (first catalog write / whole run): "
        + ", ".join(f"{k} {timing.act[k]:.2f}/{timing.wall[k]:.2f} s" for k in timing.wall)
    )
    trials: list[Trial] = []

    def never_killed() -> list[str]:
        done = {t.plan.kind for t in trials if t.killed}
        return [k for k in KINDS if k not in done]

    # Until `kills` kills, and every kind killed at least once: a loaded machine may finish a
    # short act (a split) before each of its first draws; the extra trials aim earlier.
    while (sum(t.killed for t in trials) < kills or never_killed()) and len(
        trials
    ) < 5 * kills + 20:
        topping_up = sum(t.killed for t in trials) >= kills
        kind = never_killed()[0] if topping_up else KINDS[len(trials) % len(KINDS)]
        plan = make_plan(kind, truth, rng)
        span = KILL_SPREAD * timing.wall[kind]
        acting = KILL_SPREAD * max(0.0, timing.wall[kind] - timing.act[kind])
        anchored = anchor == "write" or (anchor == "both" and len(trials) // len(KINDS) % 2 == 1)
        delay = rng.uniform(0.0, acting if anchored else span)
        if topping_up:
            # A kind that keeps finishing before its kill aims earlier each time it missed
            # (a loaded machine's timing round may have measured it slow): 1/2, 1/4 ... 1/32.
            missed = sum(t.plan.kind == kind and not t.killed for t in trials)
            delay /= 2 ** min(max(missed, 1), 5)
        # The pin writes (`act` s after its start) around the prune's acting: from a little
        # before its first catalog write to a little after its usual end.
        pin_lands = rng.uniform(0.8 * timing.act[kind], 1.1 * timing.wall[kind])
        pin_offset = pin_lands - timing.act["pin"]
        n = len(trials) + 1
        trials.append(
            run_trial(ws, truth, n, plan, delay, pin_offset, anchored, NEXT_COMMANDS[next_command])
        )
        if len(trials) % 20 == 0:
            found = sum(len(t.found) for t in trials)
            log(
                f"  {len(trials)} trials, {sum(t.killed for t in trials)} kills, {found} findings, "
                f"{time.perf_counter() - start:.0f} s"
            )
    return Campaign(
        seed, anchor, next_command, timing, trials, time.perf_counter() - start, ws.rescans
    )


def print_tables(c: Campaign) -> None:
    anchors = {
        "start": "after the command's start, up to 1.2 x its duration",
        "write": "after its first catalog write, up to 1.2 x (duration - first write)",
    }
    print(f"\nseed {c.seed}; {len(c.trials)} trials, {c.kills} SIGKILLs; {c.seconds:.0f} s wall")
    for name, text in anchors.items():
        if c.anchor in (name, "both"):
            print(f"kills anchored at {name}: delay drawn uniformly {text}")
    print("\nmeasured on the pristine state (medians):")
    table(
        ["kind", "first catalog write s", "whole run s"],
        [[k, c.timing.act[k], c.timing.wall[k]] for k in c.timing.wall],
    )
    short = ("corrupt", "lost", "wrong del", "orphan trash", "stale lease", "temp", "planned")
    rows: list[list[object]] = []
    for kind in (*KINDS, None):
        mine = [t for t in c.trials if kind in (None, t.plan.kind)]
        rows.append(
            [
                kind or "total",
                len(mine),
                sum(t.killed for t in mine),
                sum(t.killed and "acted" in t.trace for t in mine),
                *(c.count(inv, kind) for inv in INVARIANTS),
                sum(bool(t.found) for t in mine),
            ]
        )
    next_args = " ".join(NEXT_COMMANDS[c.next_command])
    print(f"\nfindings (items) per command kind, after the next command ({next_args}) and a retry:")
    table(["kind", "trials", "kills", "after acting", *short, "trials w/ findings"], rows)
    traces = ("lease", "planned", "temp", "orphan", "pin-late", "artifact-indexed")
    rows = []
    for kind in KINDS:
        mine = [t for t in c.trials if t.plan.kind == kind]
        retry = Counter(t.retry_exit for t in mine if t.retry_exit is not None)
        scan = Counter(t.scan_exit for t in mine if t.scan_exit != 0)
        rows.append(
            [
                kind,
                sum(t.killed and t.anchored for t in mine),
                *(sum(name in t.trace for t in mine) for name in traces),
                " ".join(f"{k}:{v}" for k, v in sorted(retry.items())),
                " ".join(f"{k}:{v}" for k, v in sorted(scan.items())) or "-",
            ]
        )
    print("\nwhat the kills left before any repair (trials), exit codes (code:trials) of the")
    print("retries after kills and of the next command when not 0:")
    headers = [*(f"{t} left" for t in traces[:4]), "pin late", "artifact as ckpt"]
    table(["kind", "write-anchored kills", *headers, "retry exits", "next≠0"], rows)
    pins = [t for t in c.trials if t.plan.pin is not None]
    acked = sum(t.pin_exit == 0 for t in pins)
    print(f"\npin-during-prune: {acked} of {len(pins)} pins acknowledged (exit 0)")
    print(f"workspace resets needing a rescan (rewritten files): {c.rescans}")
    lines = c.failures()
    if lines:
        print(f"\nfindings ({len(lines)}; first 40):")
        for line in lines[:40]:
            print("  " + line)


def _fixtures() -> Path:
    """$CKPT_TEST_FIXTURES, or a set generated once into bench/out/ as the tests do."""
    reuse = os.environ.get("CKPT_TEST_FIXTURES")
    fixtures = Path(reuse) if reuse else OUT / "keras-fixtures"
    if not (fixtures / "manifest.json").is_file():
        if reuse:
            raise SystemExit(f"CKPT_TEST_FIXTURES={reuse} holds no manifest.json")
        print(f"generating the Keras fixtures into {fixtures} (once) ...", flush=True)
        generator = REPO / "tests" / "support" / "keras_fixtures.py"
        subprocess.run([PYTHON, str(generator), str(fixtures)], check=True, env=CHILD_ENV)
    return fixtures.resolve()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, help="SIGKILLs to deliver (300; --quick: 20)")
    parser.add_argument("--seed", type=int, default=8, help="random seed (8)")
    parser.add_argument(
        "--quick", action="store_true", help="20 kills, 3 runs, 1 timing round (no warm-up)"
    )
    parser.add_argument("--workdir", type=Path, default=OUT / "crash", help="wiped first")
    parser.add_argument(
        "--anchor",
        choices=("start", "write", "both"),
        default="both",
        help="kill delays after the command's start, after its first catalog write, or "
        "alternating (default)",
    )
    parser.add_argument(
        "--next",
        choices=tuple(NEXT_COMMANDS),
        default="scan",
        help="the next command after a kill: `ckpt scan` (default) or `ckpt serve --once`",
    )
    parser.add_argument("--repeats", type=int, help="timing rounds (3; --quick: 1)")
    args = parser.parse_args()
    kills = args.kills if args.kills is not None else (20 if args.quick else 300)
    fixtures = _fixtures()
    print(f"machine: {machine()}\nseed {args.seed}, {kills} kills", flush=True)
    campaign = run_campaign(
        args.workdir.resolve(),
        fixtures,
        kills=kills,
        seed=args.seed,
        quick=args.quick,
        anchor=args.anchor,
        next_command=args.next,
        repeats=args.repeats,
        log=lambda line: print(line, flush=True),
    )
    print_tables(campaign)
    checks = [
        Check(inv, campaign.count(inv), "== 0", "items", campaign.count(inv) == 0)
        for inv in INVARIANTS
    ]
    checks.append(Check("SIGKILLs", campaign.kills, f">= {kills}", "", campaign.kills >= kills))
    facts: dict[str, object] = {
        "seed": campaign.seed,
        "trials": len(campaign.trials),
        "kills": campaign.kills,
        "seconds": round(campaign.seconds, 1),
        "anchor": campaign.anchor,
        "next_command": campaign.next_command,
        "wall": campaign.timing.wall,
        "first_write": campaign.timing.act,
        "findings": campaign.failures()[:200],
    }
    return report("crash_campaign", checks, facts)


if __name__ == "__main__":
    sys.exit(main())
