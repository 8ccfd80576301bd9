"""The trainer's contract, tested as a harness (issue 39, item 4).

`run(Scenario(...), out)` trains a real model (support/contract_trainers.py: a plain PyTorch
loop, the Hugging Face Trainer, Lightning or Keras) in a child process under a live `ckpt serve`,
with a retention policy, optionally on a small filesystem (a tmpfs of `fs_mb` in a private mount
namespace: the whole scenario then runs in `unshare -m`) with `min_free`, and optionally SIGKILLs
the trainer after a save and resumes it from what `ckpt latest --resumable` answers. The trainer
reports each save and waits; the harness lets the service catch up (the save indexed, a
retention pass, the guard back above `min_free`), checks every invariant on a disk that stands
still, then lets it train on:

- I1 the trainer never fails for lack of space unless it would without us (a control run of the
  same trainer on the same filesystem, without the service, first);
- I2 the newest training moment's files, the newest resumable checkpoint and the files the
  trainer keeps itself (`last.pt`, `best.pt`, `last.ckpt`, HF's best and last) are at their
  paths, with the bytes the trainer wrote;
- I3 the best by the policy's metric (the trainer's own values) is kept at a path of the run;
- I4 every reason the service gives is true of the files: each trash in `ckpt log` and each
  keep/trash in `ckpt prune --dry-run` (`newest`, `last #k`, `best M #k (V)`, `matched no keep
  rule`);
- I5 `ckpt latest --resumable`, `ckpt best` and `ckpt wait` agree with the trainer's own record
  (the newest moment, its best value), and never answer one of our copies;
- I6 our copies (`.ckpt-versions`) stay within their budget (by default two of the run's biggest
  checkpoints: issue 39's "under two checkpoints' size").

Files are identified by content: a unit's sha256 (a folder's over its files) as the trainer
recorded it right after the save. The outcome (`Outcome`) has the counts and each violation with
the save, the files and the audit entries behind it. Usage as a program (what `run` starts)::

    python3 -m tests.support.trainer_contract SCENARIO.json OUT
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import contract_trainers
from .contract_trainers import METRIC, digest

REPO = Path(__file__).resolve().parents[2]
RUN = "job"
COPIES = ".ckpt-versions"
CATCH_UP_S = 20.0
CLI_TIMEOUT_S = 60.0
WAIT_S = 10  # `ckpt wait` for a save the service indexes in ~1 s
# What each trainer's zygote imports once (TensorBoard's writer is not: with TensorFlow
# installed it imports it, which the torch loop avoids).
PRELOAD = {
    "torch": "torch",
    "hf": "torch,transformers,transformers.trainer",
    "lightning": "torch,lightning.pytorch",
    "keras": "tensorflow,keras",
    "hf-deepspeed": "torch,transformers,transformers.trainer,deepspeed",
}
INVARIANTS = ("I1", "I2", "I3", "I4", "I5", "I6")


@dataclass
class Scenario:
    trainer: str  # torch | hf | lightning | keras
    epochs: int = 5
    size: int = 64  # the model's hidden width
    policy: dict[str, Any] | None = None  # `retention:` as in config.yaml
    fs_mb: int | None = None  # a tmpfs of this size for the root
    min_free: str | None = None  # e.g. "4MB"
    kill_after: int | None = None  # SIGKILL the trainer after this save, then resume it
    seed: int = 0
    budget_bytes: int | None = None  # I6; default: two of the run's biggest checkpoints
    extra_config: str = ""

    @property
    def metric(self) -> str:
        best = (self.policy or {}).get("keep_best")
        if isinstance(best, dict):
            return str(best["metric"])
        if isinstance(best, list) and best:
            return str(best[0]["metric"])
        return METRIC[self.trainer]


@dataclass
class Outcome:
    scenario: dict[str, Any]
    saves: int = 0
    kills: int = 0
    checks: int = 0
    violations: list[dict[str, Any]] = field(default_factory=list)
    trainer_exits: list[int] = field(default_factory=list)
    control_exit: int | None = None
    seconds: float = 0.0
    check_seconds: float = 0.0
    timeline: list[tuple[float, str]] = field(default_factory=list)
    trainer_tails: list[str] = field(default_factory=list)  # each phase's last lines
    error: str | None = None

    def by_invariant(self) -> dict[str, int]:
        return {i: sum(v["invariant"] == i for v in self.violations) for i in INVARIANTS}

    def failed(self, invariant: str) -> list[dict[str, Any]]:
        return [v for v in self.violations if v["invariant"] == invariant]


def run(scenario: Scenario, out: Path, timeout: float = 600) -> Outcome:
    """The scenario in a driver process of its own (in a private mount namespace when it has a
    filesystem size); its outcome."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "scenario.json").write_text(json.dumps(asdict(scenario)))
    argv = [sys.executable, "-m", "tests.support.trainer_contract", str(out / "scenario.json")]
    if scenario.fs_mb:
        argv = ["unshare", "-m", "--propagation", "private", *argv]
    # A session of its own: a driver past its timeout goes with its service and trainers.
    proc = subprocess.Popen(
        [*argv, str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        start_new_session=True,
    )
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        stderr = f"the scenario did not end in {timeout:.0f} s\n{stderr}"
    found = out / "outcome.json"
    if not found.exists():
        return Outcome(asdict(scenario), error=f"driver exited {proc.returncode}\n{stderr}")
    doc = json.loads(found.read_text())
    return Outcome(**doc)


class Driver:
    """One scenario, inside its namespace: control run, service, trainer, checks."""

    def __init__(self, scenario: Scenario, out: Path) -> None:
        from .workspace import Workspace

        self.s, self.out = scenario, out
        self.ws = Workspace(out)
        self.root = self.ws.root
        self.run_dir = self.root / RUN
        self.outcome = Outcome(asdict(scenario))
        self.records: list[dict[str, Any]] = []
        self.log_seen = 0  # audit events already judged
        self.daemon: Any = None
        self.zygote: Any = None  # the trainers' (forked_cli._Zygote with PRELOAD's modules)
        self.zygote_env: dict[str, str] = {}
        self.phase = 0
        self.t0 = time.monotonic()
        self.biggest = 0  # the run's biggest checkpoint seen (I6's default budget)

    # -- the scenario ---------------------------------------------------------------------

    def drive(self) -> Outcome:
        start = time.monotonic()
        if self.s.fs_mb:
            size = f"size={self.s.fs_mb}m"
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", size, "tmpfs", str(self.root)], check=True
            )
            self.outcome.control_exit, _ = self.control()
        self.configure()
        from .daemon import Daemon

        self.daemon = Daemon(self.ws)
        try:
            self.daemon.wait_for_log("event=ready")
            self.mark("service ready")
            self.train()
            self.final_check()
        finally:
            self.daemon.stop()
            if self.zygote is not None:
                self.zygote.stop()
            self.outcome.seconds = round(time.monotonic() - start, 1)
        return self.outcome

    def control(self) -> tuple[int, str]:
        """The same trainer on the same filesystem without the service (I1's yardstick)."""
        code, output = self.trainer(self.out / "control.jsonl", lockstep=False, resume=None)
        for child in self.root.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        return code, output

    def configure(self) -> None:
        lines = self.ws.config.read_text().splitlines()
        text = "\n".join(lines) + "\n"
        if self.s.min_free:
            text = text.replace(
                f"  - path: {self.root}\n",
                f"  - path: {self.root}\n    min_free: {self.s.min_free}\n",
            )
        text = text.replace("settle_seconds: 0", "settle_seconds: 1\n  min_age_seconds: 0.2")
        text += "service:\n  heartbeat: 1s\nschedule:\n  rescan: 0\n"
        if self.s.policy:
            text += "  retention: 1s\nretention: " + json.dumps(self.s.policy) + "\n"
        self.ws.config.write_text(text + self.s.extra_config)

    def trainer(self, record: Path, *, lockstep: bool, resume: str | None) -> tuple[int, str]:
        proc, log = self.start_trainer(record, lockstep=lockstep, resume=resume)
        return proc.wait(timeout=600), log.read_text()

    def start_trainer(
        self, record: Path, *, lockstep: bool, resume: str | None
    ) -> tuple[Any, Path]:
        """The trainer, forked from a zygote that imported its framework once (the control run,
        the first run and the resumed one pay for one import); its output in a log file."""
        self.phase += 1
        self.mark(f"trainer phase {self.phase}")
        spec = {
            "trainer": self.s.trainer,
            "root": str(self.root),
            "run": str(self.run_dir),
            "record": str(record),
            "epochs": self.s.epochs,
            "size": self.s.size,
            "seed": self.s.seed,
            "phase": self.phase,
            "lockstep": str(self.out / "acks") if lockstep else None,
            "resume": resume,
        }
        (self.out / "acks").mkdir(exist_ok=True)
        path = self.out / f"trainer-{self.phase}.json"
        path.write_text(json.dumps(spec))
        log = self.out / f"trainer-{self.phase}.log"
        argv = [contract_trainers.__file__, str(path)]
        if self.zygote is None:
            from .forked_cli import _Zygote

            env = {
                **os.environ,
                "OMP_NUM_THREADS": "1",
                "TF_CPP_MIN_LOG_LEVEL": "3",
                "KERAS_BACKEND": "tensorflow",
            }
            env.pop("TF_USE_LEGACY_KERAS", None)
            self.zygote_env = env
            self.zygote = _Zygote(PRELOAD[self.s.trainer], env)
        with open(os.devnull) as stdin, open(log, "w") as out:
            fds = [stdin.fileno(), out.fileno(), out.fileno()]
            proc = self.zygote.start_with(argv, self.zygote_env, str(self.out), fds)
        return proc, log

    def train(self) -> None:
        record = self.out / "record.jsonl"
        resume: str | None = None
        while True:
            proc, log = self.start_trainer(record, lockstep=True, resume=resume)
            killed = False
            while proc.poll() is None:
                new = self.read_records(record)
                if not new:
                    time.sleep(0.05)
                    continue
                for rec in new:
                    self.mark(f"save {rec['save']}")
                    self.check(rec)
                    self.mark(f"checked {rec['save']}")
                    self.outcome.saves += 1
                if self.s.kill_after == self.records[-1]["save"] and not self.outcome.kills:
                    proc.send_signal(signal.SIGKILL)
                    killed = True
                    break
                (self.out / "acks" / f"ack-{self.records[-1]['save']}").touch()
            code = proc.wait(timeout=600)
            output = log.read_text()
            self.outcome.trainer_exits.append(code)
            self.mark(f"trainer phase {self.phase} exited {code}")
            self.outcome.trainer_tails.append(_tail(output))
            for rec in self.read_records(record):  # saved just before it ended
                self.check(rec)
                self.outcome.saves += 1
            if not killed:
                self.judge_exit(code, output)
                return
            self.outcome.kills += 1
            answer = self.cli_json("latest", "--run", RUN, "--resumable")
            resume = answer.get("path") if isinstance(answer, dict) else None
            self.mark(f"resume from {resume}")
            if resume is None:
                self.violate("I5", "after the kill `latest --resumable` answered nothing")
                return

    def read_records(self, record: Path) -> list[dict[str, Any]]:
        if not record.exists():
            return []
        lines = [line for line in record.read_text().splitlines() if line.strip()]
        new = [json.loads(line) for line in lines[len(self.records) :]]
        self.records += new
        return new

    def judge_exit(self, code: int, output: str) -> None:
        """I1: ENOSPC with the service, none without it."""
        # torch's zip writer says a short write on a full disk as "unexpected pos N vs M".
        marks = ("No space left", "Errno 28", "ENOSPC", "unexpected pos")
        nospace = any(mark in output for mark in marks)
        control = self.outcome.control_exit
        if code != 0 and nospace and control == 0:
            last = output.strip().splitlines()[-1:] or [""]
            self.violate(
                "I1",
                f"the trainer died of a full disk (exit {code}: {last[0][:200]}),"
                " the control run without the service finished",
                files=self.disk(),
            )
        elif code != 0:
            self.violate("I1", f"the trainer exited {code}: {output[-400:]}", files=self.disk())

    # -- catching up ----------------------------------------------------------------------

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A `ckpt` command (forked from the driver's CLI zygote); one that hangs a minute is
        a finding of its own, said in the outcome's error."""
        from .forked_cli import ckpt_process

        argv = ["--config", str(self.ws.config), *args]
        return ckpt_process(argv, timeout=CLI_TIMEOUT_S, env=dict(os.environ), cwd=self.out)

    def cli_json(self, *args: str) -> Any:
        done = self.cli(*args, "--json")
        try:
            return json.loads(done.stdout) if done.stdout.strip() else None
        except ValueError:
            return None

    def catch_up(self, rec: dict[str, Any]) -> Any:
        """The service's view once it has indexed this save (or after CATCH_UP_S): the answer
        of `latest --resumable`, after the next retention pass and the guard's relief."""
        deadline = time.monotonic() + CATCH_UP_S
        while not self.indexed(rec):
            if time.monotonic() > deadline:
                self.violate("I5", f"epoch {rec['epoch']}'s save not indexed in {CATCH_UP_S:.0f} s")
                break
            time.sleep(0.3)
        if self.s.policy:
            passes = self.daemon.log.count("event=retention ")
            self.wait(lambda: self.daemon.log.count("event=retention ") > passes, 20)
        if self.s.min_free:
            need = _bytes(self.s.min_free)
            self.wait(lambda: _free(self.root) >= need, 15)
        return self.cli_json("latest", "--run", RUN, "--resumable")

    def indexed(self, rec: dict[str, Any]) -> bool:
        """Every unit of the save still on disk has its catalog row, of this generation."""
        rows = self.cli_json("list", "--all", "--run", RUN) or []
        by_path = {r["path"]: r for r in rows if r.get("status") == "ok"}
        for unit in rec["wrote"]:
            p = self.root / unit
            try:
                mtime = p.stat().st_mtime
            except FileNotFoundError:
                continue
            row = by_path.get(str(p))
            if row is None:
                return False
            if p.is_file() and abs(_epoch_seconds(row["mtime"]) - mtime) > 0.002:
                return False
        return True

    def wait(self, condition: Any, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if condition():
                return True
            time.sleep(0.2)
        return False

    # -- the truth --------------------------------------------------------------------------

    def moments(self) -> dict[Any, dict[str, Any]]:
        """The trainer's saves by training moment (one saved again after a resume: its last)."""
        by: dict[Any, dict[str, Any]] = {}
        for rec in self.records:
            by[rec["moment"]] = rec
        return by

    def which(self, path: str | None) -> dict[str, Any] | None:
        """The save whose content `path` holds now (any unit the trainer recorded with these
        bytes; a copy of ours is matched by its bytes too), with `copy` and `unit` added."""
        if not path:
            return None
        p = Path(path)
        if not p.exists():
            return None
        rel = str(p.relative_to(self.root)) if p.is_relative_to(self.root) else str(p)
        sha = digest(p)
        for rec in reversed(self.records):
            for unit, held in rec["holds"].items():
                if held == sha and (unit in rec["wrote"] or unit == rel):
                    origin = self.written_by(unit, sha) or rec
                    return {**origin, "copy": rel.startswith(COPIES), "unit": rel}
        return None

    def written_by(self, unit: str, sha: str) -> dict[str, Any] | None:
        for rec in self.records:
            if unit in rec["wrote"] and rec["holds"].get(unit) == sha:
                return rec
        return None

    def best_value(self) -> float | None:
        values = [r["metric"] for r in self.moments().values() if r.get("metric") is not None]
        if not values:
            return None
        return max(values) if _higher_is_better(self.s.metric) else min(values)

    def disk(self) -> dict[str, int]:
        return {
            str(p.relative_to(self.root)): p.stat().st_size
            for p in sorted(self.root.rglob("*"))
            if p.is_file()
        }

    def mark(self, what: str) -> None:
        self.outcome.timeline.append((round(time.monotonic() - self.t0, 2), what))

    def violate(self, invariant: str, detail: str, **extra: Any) -> None:
        save = self.records[-1]["save"] if self.records else 0
        self.outcome.violations.append(
            {
                "invariant": invariant,
                "trainer": self.s.trainer,
                "save": save,
                "detail": detail,
                **extra,
            }
        )

    # -- the checks -------------------------------------------------------------------------

    def check(self, rec: dict[str, Any]) -> None:
        before, started = len(self.outcome.violations), time.monotonic()
        prior = [r["step"] for r in self.records if r["moment"] < rec["moment"]]
        waited = self.cli_json(
            "wait",
            "--run",
            RUN,
            "--newer-than",
            str(max(prior, default=0)),
            "--timeout",
            f"{WAIT_S}s",
        )
        latest = self.catch_up(rec)
        self.outcome.checks += 1
        audit = self.cli_json("log", "--limit", "100000") or []
        self.check_files(rec, audit)
        self.check_answers(rec, latest, waited)
        self.check_reasons(rec, audit)
        self.check_copies(rec)
        if len(self.outcome.violations) > before:
            self.outcome.violations[before].setdefault("files", self.disk())
        self.outcome.check_seconds += time.monotonic() - started

    def final_check(self) -> None:
        if self.records and self.outcome.trainer_exits and self.outcome.trainer_exits[-1] == 0:
            self.check({**self.records[-1], "phase": -1})

    def gone(self, unit: str, audit: list[dict[str, Any]]) -> str:
        acts = [
            f"{e['action']} by {e.get('actor')}: {e.get('reason')}"
            for e in audit
            if e.get("path", "").endswith(unit) and e["action"] in ("trash", "split", "purge")
        ]
        return "; ".join(acts[-2:]) or "no audit entry"

    def check_files(self, rec: dict[str, Any], audit: list[dict[str, Any]]) -> None:
        """I2 and I3."""
        newest = self.records[-1]
        must = {u: "the newest moment" for u in newest["wrote"]}
        must.update({u: "the trainer keeps it" for u in newest["kept"] if u in newest["holds"]})
        must.update({u: "newest resumable" for u in newest["resumable"]})
        for unit, why in must.items():
            p = self.root / unit
            if not p.exists():
                self.violate(
                    "I2",
                    f"{unit} ({why}, epoch {newest['epoch']}) is gone: {self.gone(unit, audit)}",
                )
            elif digest(p) != newest["holds"].get(unit):
                self.violate("I2", f"{unit} ({why}) no longer holds what the trainer wrote")
        best = self.best_value()
        if best is None:
            return
        moments = self.moments()
        best_recs = [r for r in moments.values() if r.get("metric") == best]
        live = {
            u: sha
            for r in best_recs
            for u in r["wrote"]
            if (sha := r["holds"].get(u)) and newest["holds"].get(u) == sha
        }
        if not live:
            return  # the trainer itself let go of its best (rotated or rewrote it)
        kept = [
            u
            for u, sha in live.items()
            if (self.root / u).exists() and digest(self.root / u) == sha
        ]
        if not kept:
            names = ", ".join(f"{u} ({self.gone(u, audit)})" for u in live)
            self.violate(
                "I3",
                f"the best {self.s.metric} {best:.4g} (epoch "
                f"{best_recs[0]['epoch']}) is kept nowhere: {names}",
            )

    def check_answers(self, rec: dict[str, Any], latest: Any, waited: Any) -> None:
        """I5."""
        newest = self.records[-1]
        path = latest.get("path") if isinstance(latest, dict) else None
        found = self.which(path)
        if path is None:
            self.violate("I5", "`latest --resumable` answered nothing")
        elif found is None:
            self.violate("I5", f"`latest --resumable` answered {path}, no save of the trainer")
        elif found["copy"]:
            self.violate(
                "I5",
                f"`latest --resumable` answered our copy {found['unit']} (epoch {found['epoch']})",
            )
        elif found["moment"] != newest["moment"]:
            self.violate(
                "I5",
                f"`latest --resumable` answered {found['unit']} (epoch "
                f"{found['epoch']}), the trainer's last is epoch {newest['epoch']} "
                f"({newest['last']})",
            )
        best = self.best_value()
        answer = self.cli_json("best", "--metric", self.s.metric, "--run", RUN)
        bpath = answer.get("path") if isinstance(answer, dict) else None
        bfound = self.which(bpath)
        trainer_best = newest.get("best")
        if best is not None and bfound is None:
            self.violate(
                "I5",
                f"`best --metric {self.s.metric}` answered {bpath}, no save of "
                f"the trainer (its best: {trainer_best}, {best:.4g})",
            )
        elif bfound is not None and bfound["copy"]:
            self.violate(
                "I5",
                f"`best` answered our copy {bfound['unit']} (epoch "
                f"{bfound['epoch']}); the trainer's best is {trainer_best}",
            )
        elif bfound is not None and best is not None and bfound["metric"] != best:
            self.violate(
                "I5",
                f"`best` answered {bfound['unit']} ({self.s.metric} "
                f"{bfound['metric']:.4g}), the trainer's best is {best:.4g} "
                f"({trainer_best})",
            )
        if rec["phase"] < 0:
            return
        wpath = waited.get("path") if isinstance(waited, dict) else None
        wfound = self.which(wpath)
        if wpath is None:
            self.violate("I5", f"`wait` answered nothing for epoch {rec['epoch']} in {WAIT_S} s")
        elif wfound is not None and wfound["copy"]:
            self.violate("I5", f"`wait` answered our copy {wfound['unit']}")
        elif wfound is not None and wfound["moment"] != rec["moment"]:
            self.violate(
                "I5",
                f"`wait` answered {wfound['unit']} (epoch {wfound['epoch']}), "
                f"the trainer had just saved epoch {rec['epoch']}",
            )

    def check_reasons(self, rec: dict[str, Any], audit: list[dict[str, Any]]) -> None:
        """I4: the audit log's new acts and a dry-run plan of the policy."""
        new = [e for e in audit if e.get("id", 0) > self.log_seen] if audit else []
        if audit:
            self.log_seen = max([self.log_seen, *(e.get("id", 0) for e in audit)])
        for e in new:
            # A purge follows its trash (judged then); a split demotes the file it names.
            if e["action"] in ("trash", "split") and str(e.get("actor", "")).startswith("daemon"):
                self.judge_reason(e.get("path", ""), "trash", [str(e.get("reason", ""))], e)
        if not self.s.policy:
            return
        plan = self.cli_json("prune", "--run", RUN, "--dry-run") or {}
        for run in plan.get("runs", []):
            for d in run["decisions"]:
                self.judge_reason(d["path"], d["action"], d["reasons"], d)

    def judge_reason(self, path: str, action: str, reasons: list[str], entry: Any) -> None:
        p = Path(path) if Path(path).is_absolute() else self.root / path
        rel = str(p.relative_to(self.root)) if p.is_relative_to(self.root) else path
        rec = self.which(str(p)) if p.exists() else self.held_before(rel)
        if rec is None:
            return  # not a file the trainer wrote (an artifact, a trashed copy...)
        moments = sorted(self.moments())
        said = "; ".join(reasons)
        where = f"{action} {rel} (really epoch {rec['epoch']}, {self.s.metric} " + (
            f"{rec['metric']:.4g})" if rec.get("metric") is not None else "?)"
        )
        before = len(self.outcome.violations)
        for reason in reasons:
            if len(self.outcome.violations) > before:
                return  # one false reason per decision is enough
            if (
                reason.startswith("newest")
                and "mtime" not in reason
                and rec["moment"] != moments[-1]
            ):
                self.violate(
                    "I4",
                    f"{where}: says {said!r}, the newest is epoch {self.records[-1]['epoch']}",
                    entry=entry,
                )
            m = re.match(r"last #(\d+)", reason)
            if m and rec["moment"] not in self.held_moments()[-int(m.group(1)) :]:
                self.violate("I4", f"{where}: says {said!r}", entry=entry)
            m = re.match(r"best (\S+) #(\d+) \(([-+0-9.e]+)", reason)
            if m and rec.get("metric") is not None and not _close(float(m.group(3)), rec["metric"]):
                self.violate("I4", f"{where}: says {said!r}", entry=entry)
            if "matched no keep rule" in reason or reason.startswith("disk pressure"):
                if rec["moment"] == moments[-1]:
                    self.violate("I4", f"{where}: says {said!r} of the newest moment", entry=entry)
                best = self.best_value()
                if (
                    "matched no keep rule" in reason
                    and rec.get("metric") == best
                    and self.keeps_best()
                ):
                    self.violate("I4", f"{where}: says {said!r} of the best", entry=entry)

    def held_moments(self) -> list[Any]:
        """The moments the trainer still holds a file of (HF's and Lightning's rotations drop
        some): what `last #k` ranks."""
        newest = self.records[-1]["holds"]
        return sorted(
            {
                r["moment"]
                for r in self.moments().values()
                if any(newest.get(u) == r["holds"].get(u) for u in r["wrote"])
            }
        )

    def keeps_best(self) -> bool:
        return bool((self.s.policy or {}).get("keep_best"))

    def held_before(self, unit: str) -> dict[str, Any] | None:
        for r in reversed(self.records):
            if unit in r["holds"]:
                return self.written_by(unit, r["holds"][unit]) or r
        return None

    def check_copies(self, rec: dict[str, Any]) -> None:
        """I6."""
        ours = self.root / COPIES
        used = sum(p.stat().st_size for p in ours.rglob("*") if p.is_file()) if ours.exists() else 0
        for unit in self.records[-1]["holds"]:
            if (self.root / unit).exists():
                self.biggest = max(self.biggest, _size(self.root / unit))
        budget = self.s.budget_bytes or 2 * self.biggest
        if used > budget:
            n = len([p for p in ours.rglob("*") if p.is_file()])
            self.violate(
                "I6",
                f"{COPIES} holds {used} bytes in {n} files, over the budget of "
                f"{budget} (two of the run's biggest checkpoints)",
            )


def _tail(output: str, lines: int = 12) -> str:
    """A trainer's last lines of output, without the frameworks' warnings and progress bars."""
    noise = ("warn", "\r", "%|", "tip:", "litlogger")
    kept = [x for x in output.splitlines() if x.strip() and not any(n in x.lower() for n in noise)]
    return "\n".join(kept[-lines:])


def _size(p: Path) -> int:
    return (
        sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        if p.is_dir()
        else p.stat().st_size
    )


def _epoch_seconds(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _bytes(size: str) -> int:
    m = re.fullmatch(r"([0-9.]+)\s*([KMG]?)B?", size.strip(), re.I)
    assert m, size
    return int(float(m.group(1)) * {"": 1, "K": 10**3, "M": 10**6, "G": 10**9}[m.group(2).upper()])


def _higher_is_better(metric: str) -> bool:
    return any(k in metric for k in ("acc", "auc", "precision", "recall", "f1"))


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-3 * max(1.0, abs(b)) or f"{b:.3g}" == f"{a:.3g}"


def main(scenario_path: str, out: str) -> int:
    scenario = Scenario(**json.loads(Path(scenario_path).read_text()))
    driver = Driver(scenario, Path(out))
    try:
        outcome = driver.drive()
    except Exception as exc:  # the outcome says so; counts so far stay
        import traceback

        driver.outcome.error = traceback.format_exc()
        outcome = driver.outcome
        print(exc, file=sys.stderr)
    (Path(out) / "outcome.json").write_text(json.dumps(asdict(outcome), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
