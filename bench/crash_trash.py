"""Crash campaign for retention: SIGKILL `ckpt prune` (with a `ckpt pin` racing it),
`ckpt trash restore` and `ckpt trash purge` at random moments, then run the next command
(`ckpt scan`) and check the catalog against the disk.

Each round makes a fresh run of 15 real `.keras` checkpoints (copies of one small one),
indexes it, and kills one command 0.2-1.6 s after it started (rounds where it finished first
count as completed, not as kills). After the next command, for every run so far:
  corrupt          a file at its path or in the trash whose bytes differ from the source
  lost             a checkpoint neither at its path, nor in the trash, nor purged by a purge
  wrong deletions  a pin acknowledged as `pinned: PATH` whose checkpoint is not `ok`, or the
                   run's newest checkpoint gone
  orphans          a file in `.ckpt-trash` that no `trashed` row names
  stale leases     a lease row left; planned events left; our temp files left
Every count must be 0 (the worst round is reported).

    python3 bench/crash_trash.py [--quick] [--kills N]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

from _common import CHILD_ENV, OUT, PYTHON, REPO, Check, report
from detection_latency import fixtures

BASE = OUT / "crash-trash"
PER_RUN = 15


class Campaign:
    def __init__(self) -> None:
        shutil.rmtree(BASE, ignore_errors=True)
        self.root = BASE / "runs"
        self.root.mkdir(parents=True)
        self.config = BASE / "config.yaml"
        self.config.write_text(
            f"state_dir: {BASE / 'state'}\nroots:\n  - path: {self.root}\n"
            "    filename_template: ['e{epoch:02d}-vl{val_loss:.3f}.keras']\n"
        )
        self.source = fixtures()["keras"]  # a small real Keras 3 checkpoint
        self.digest = hashlib.sha256(self.source.read_bytes()).hexdigest()
        self.acknowledged: list[str] = []  # paths pinned while `ok`
        self.purged_by_command: set[str] = set()
        self.kills = self.completed = 0
        self.counts = dict.fromkeys(
            ("corrupt", "lost", "wrong deletions", "orphans", "stale leases", "planned", "temps"),
            0,
        )

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [PYTHON, "-m", "ckpt_daemon", "--config", str(self.config), *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=CHILD_ENV, cwd=REPO)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        cmd = [PYTHON, "-m", "ckpt_daemon", "--config", str(self.config), *args]
        return subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=CHILD_ENV
        )

    def round(self, n: int) -> None:
        run = f"r{n:03d}"
        folder = self.root / run
        folder.mkdir()
        for epoch in range(1, PER_RUN + 1):
            path = folder / f"e{epoch:02d}-vl{2 - epoch / 100:.3f}.keras"
            shutil.copyfile(self.source, path)
            os.utime(path, ns=(10**18 + epoch * 10**9,) * 2)
        self.cli("scan", str(folder))
        op = random.choice(["prune", "prune", "restore", "purge"])
        pinner = None
        if op == "prune":
            target = self.popen("prune", "--run", run, "--keep-last", "1")
            pinned = folder / f"e{random.randint(1, PER_RUN - 1):02d}"
            pinner = self.popen("pin", str(next(folder.glob(pinned.name + "-*"))))
        else:
            self.cli("prune", "--run", run, "--keep-last", "5")
            if op == "restore":
                items = [t for t in json.loads(self.cli("trash", "list", "--json").stdout)]
                target = self.popen("trash", "restore", str(items[-1]["id"]))
            else:
                due = json.loads(
                    self.cli("trash", "purge", "-n", "--json", "--older-than", "0s").stdout
                )
                self.purged_by_command |= {p["path"] for p in due["purged"]}
                target = self.popen("trash", "purge", "--older-than", "0s")
        time.sleep(random.uniform(0.2, 1.6))
        if target.poll() is None:
            target.send_signal(signal.SIGKILL)
            self.kills += 1
        else:
            self.completed += 1
        target.communicate()
        if pinner is not None:
            out = pinner.communicate()[0]
            if out.startswith("pinned: ") and "in the trash" not in out:
                self.acknowledged.append(out.split("pinned: ", 1)[1].strip())
        self.cli("scan")  # the next command
        self.check()

    def check(self) -> None:
        rows = json.loads(self.cli("list", "--json").stdout)
        trash = {t["id"]: t for t in json.loads(self.cli("trash", "list", "--json").stdout)}
        c = dict.fromkeys(self.counts, 0)  # this round's state; the worst round is reported
        for row in rows:
            path = Path(row["path"])
            if row["status"] == "ok":
                c["corrupt"] += not path.exists() or self._sha(path) != self.digest
            elif row["status"] == "trashed":
                files = [Path(p) for p in trash[row["id"]]["paths"]]
                c["lost"] += not all(p.exists() for p in files)
                c["corrupt"] += any(p.exists() and self._sha(p) != self.digest for p in files)
            elif row["status"] == "purged":
                c["lost"] += row["path"] not in self.purged_by_command
            else:
                c["lost"] += 1  # missing, or anything else: not where the catalog says
        by_path: dict[str, list[str]] = {}
        for row in rows:
            by_path.setdefault(row["path"], []).append(row["status"])
        c["wrong deletions"] = sum("ok" not in by_path.get(p, []) for p in self.acknowledged)
        for run in {r["run"] for r in rows}:
            newest = max((r for r in rows if r["run"] == run), key=lambda r: r["epoch"] or 0)
            c["wrong deletions"] += newest["status"] != "ok"
        known = {p for t in trash.values() for p in t["paths"]}
        c["orphans"] = sum(
            os.path.join(d, f) not in known
            for d, _dirs, files in os.walk(self.root / ".ckpt-trash")
            for f in files
        )
        with sqlite3.connect(BASE / "state" / "catalog.db") as conn:
            c["stale leases"] = conn.execute(  # held: released ones keep their row, expired
                "SELECT count(*) FROM leases"
                " WHERE expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
            ).fetchone()[0]
            c["planned"] = conn.execute(
                "SELECT count(*) FROM events WHERE state = 'planned'"
            ).fetchone()[0]
        c["temps"] = len(list(self.root.rglob(".ckpt-tmp-*")))
        self.counts = {k: max(v, c[k]) for k, v in self.counts.items()}

    @staticmethod
    def _sha(path: Path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs to reach (default 20)")
    parser.add_argument("--quick", action="store_true", help="5 kills")
    parser.add_argument("--repeats", type=int, help="ignored")
    args = parser.parse_args()
    random.seed(0)
    goal = 5 if args.quick else args.kills
    campaign = Campaign()
    n = 0
    while campaign.kills < goal and n < goal * 3:
        campaign.round(n)
        n += 1
        print(f"round {n}: {campaign.kills} kills, {campaign.counts}", flush=True)
    print(f"\n{campaign.kills} SIGKILLs in {n} rounds ({campaign.completed} commands finished)")
    checks = [Check(name, float(v), "== 0", "items", v == 0) for name, v in campaign.counts.items()]
    return report("crash_trash", checks, {"kills": campaign.kills, "rounds": n})


if __name__ == "__main__":
    raise SystemExit(main())
