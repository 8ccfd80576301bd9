"""Footprint of `ckpt serve`: RSS after reconciling 1,000 checkpoints, TF never loaded, idle CPU.

A root of 900 small real Keras files (.h5 / .keras copies) and 100 TF checkpoints (copies of a
CheckpointManager save under distinct prefixes), made once in bench/out/service/. `ckpt serve`
starts on a fresh catalog with the reference defaults (observer auto); once it logged
event=ready, its RSS (VmRSS, VmHWM) is read from /proc and its memory map is searched for
libtensorflow. A sampler follows its children while it reconciles (TF formats are read in a
`tf_probe` child). Then the daemon idles for 60 s: utime+stime from /proc/PID/stat.

    python3 bench/daemon_footprint.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import threading
import time
from pathlib import Path

from _common import Check, child_json, median, report, table
from detection_latency import (
    SERVICE,
    fixtures,
    start_serve,
    stop_serve,
    tf_files,
    wait_ready,
    write_config,
)

MB = 1e6
PER_FOLDER = 10
TICK = os.sysconf("SC_CLK_TCK")
TF_LIBS = ("libtensorflow", "_pywrap_tensorflow", "libtfkernel", "_pywrap_tfe")

BARE = r"""
import json
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(json.dumps({k: int(status[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM")}))
"""
# The modules the daemon holds once it has indexed a Keras file (Alembic not included).
IMPORT_FLOOR = (
    "import ckpt_daemon.cli.main, ckpt_daemon.service.serve, ckpt_daemon.formats.detect\n"
    "import ckpt_daemon.fs.hashing, h5py\n"
    "import watchdog.observers, apscheduler.schedulers.background\n" + BARE
)


def build_root(total: int) -> Path:
    """`total` checkpoints, a tenth of them TF prefixes, 10 per folder; made once."""
    root = SERVICE / f"footprint-root-{total}"
    marker = root.with_name(root.name + ".built")
    if marker.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    fx = fixtures()
    tf = tf_files(fx["tf"])
    n_tf = total // 10
    for i in range(total - n_tf):
        suffix = "h5" if i % 2 else "keras"
        folder = root / f"run{i // PER_FOLDER:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(fx[suffix], folder / f"model.{i % PER_FOLDER + 1:02d}-0.{i:04d}.{suffix}")
    for i in range(n_tf):
        folder = root / f"tfrun{i // PER_FOLDER:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(fx["tf"].parent / "checkpoint", folder / "checkpoint")
        for member in tf:  # ckpt-1.index -> ckpt-7.index, ckpt-1.data-... -> ckpt-7.data-...
            shutil.copyfile(member, folder / member.name.replace("ckpt-1.", f"ckpt-{i + 1}."))
    marker.touch()
    return root


def status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM and RssAnon in bytes, and Threads, from /proc/PID/status."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "Threads"):
            found[key] = int(value.split()[0]) * (1 if key == "Threads" else 1024)
    return found


def stat_fields(pid: int | str) -> list[str]:
    """/proc/PID/stat after the command name: [0] is field 3 (state), [1] the ppid."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()


def cpu_seconds(pid: int) -> float:
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime (fields 14 and 15)


def wakeups(pid: int) -> int:
    """Context switches summed over the daemon's threads: how often it woke up."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            lines = (task / "status").read_text().splitlines()
        except OSError:
            continue
        total += sum(int(ln.split()[1]) for ln in lines if "ctxt_switches" in ln)
    return total


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and stat_fields(entry)[1] == str(pid):
                found.append(int(entry))
        except (OSError, IndexError):
            continue
    return found


class ChildSampler(threading.Thread):
    """Peak VmHWM of each child process of `pid` (the tf_probe child), sampled every 50 ms."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.done = pid, threading.Event()
        self.peaks: dict[int, tuple[str, int]] = {}

    def run(self) -> None:
        while not self.done.wait(0.05):
            for child in children(self.pid):
                try:
                    cmd = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
                    hwm = status(child)["VmHWM"]
                except (OSError, KeyError):
                    continue
                old = self.peaks.get(child, ("", 0))[1]
                self.peaks[child] = (cmd.decode().split(" -m ")[-1].strip(), max(old, hwm))


def measure(total: int, idle: float) -> dict[str, float]:
    root = build_root(total)
    base = SERVICE / f"footprint-{total}"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    cfg = write_config(base, root)  # the reference defaults: observer auto, heartbeat 10 s
    log = base / "serve.log"
    start = time.monotonic()
    proc = start_serve(cfg, log)
    sampler = ChildSampler(proc.pid)
    sampler.start()
    wait_ready(proc, log)
    ready = time.monotonic() - start
    sampler.done.set()
    sampler.join()
    reconcile_cpu = cpu_seconds(proc.pid)
    time.sleep(2)
    after_ready = status(proc.pid)
    maps = Path(f"/proc/{proc.pid}/maps").read_text()
    tf_mapped = sorted(
        {ln.split()[-1] for ln in maps.splitlines() if any(t in ln for t in TF_LIBS)}
    )
    left = children(proc.pid)
    cpu0, wake0, t0 = cpu_seconds(proc.pid), wakeups(proc.pid), time.monotonic()
    time.sleep(idle)
    cpu1, wake1, t1 = cpu_seconds(proc.pid), wakeups(proc.pid), time.monotonic()
    after_idle = status(proc.pid)
    exit_code = stop_serve(proc)
    proc = start_serve(cfg, base / "restart.log")  # same catalog: no migration, nothing new
    wait_ready(proc, base / "restart.log")
    time.sleep(2)
    restart = status(proc.pid)
    exit_code += stop_serve(proc)
    with sqlite3.connect(f"file:{base / 'state' / 'catalog.db'}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT status, format, count(*) FROM checkpoints GROUP BY status, format"
        ).fetchall()
    text = log.read_text()
    observer = text.split("event=watching", 1)[1].split("observer=", 1)[1].split()[0]
    probes = [f"{cmd}: peak {hwm / MB:.0f} MB" for cmd, hwm in sampler.peaks.values()]
    print(f"  catalog: {', '.join(f'{n} {s} {f}' for s, f, n in rows)}; observer {observer}")
    print(
        f"  ready after {ready:.1f} s, daemon CPU {reconcile_cpu:.1f} s; children seen while "
        f"reconciling: {'; '.join(probes) or 'none'}; children after ready: {len(left)}"
    )
    print(f"  TF libraries mapped in the daemon: {tf_mapped or 'none'}; exit {exit_code}")
    return {
        "ready_s": ready,
        "rss": after_ready["VmRSS"] / MB,
        "hwm": after_idle["VmHWM"] / MB,
        "rss_idle": after_idle["VmRSS"] / MB,
        "anon": after_idle["RssAnon"] / MB,
        "restart_rss": restart["VmRSS"] / MB,
        "threads": after_idle["Threads"],
        "idle_cpu_pct": 100 * (cpu1 - cpu0) / (t1 - t0),
        "wakeups_s": (wake1 - wake0) / (t1 - t0),
        "tf_mapped": float(bool(tf_mapped)),
        "probe_peak": max((hwm for _c, hwm in sampler.peaks.values()), default=0) / MB,
        "ok_rows": float(sum(n for s, _f, n in rows if s == "ok")),
        "exit": float(exit_code),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 checkpoints, 15 s idle")
    parser.add_argument("--repeats", type=int, help="daemon starts (default 1); medians")
    args = parser.parse_args()
    total, idle = (100, 15.0) if args.quick else (1000, 60.0)
    runs: list[dict[str, float]] = []
    floors: dict[str, list[float]] = {"python -c pass": [], "daemon imports": []}
    for _ in range(args.repeats or 1):  # baselines in the same run, interleaved
        floors["python -c pass"].append(child_json(BARE)["VmRSS"] / MB)
        floors["daemon imports"].append(child_json(IMPORT_FLOOR)["VmRSS"] / MB)
        print(f"ckpt serve on {total} checkpoints (1/10 TF), then {idle:g} s idle ...", flush=True)
        runs.append(measure(total, idle))
    m = {key: median([r[key] for r in runs]) for key in runs[0]}
    base = {name: median(v) for name, v in floors.items()}
    print(f"\nMB = 10^6 bytes (daemon VmRSS {m['rss']:.1f} MB = {m['rss'] * MB / 2**20:.1f} MiB)")
    table(
        ["process", "VmRSS MB", "VmHWM MB", "x daemon imports"],
        [
            ["python -c pass", base["python -c pass"], "", ""],
            ["import the daemon's modules", base["daemon imports"], "", 1.0],
            ["ckpt serve, 2 s after ready", m["rss"], "", m["rss"] / base["daemon imports"]],
            [f"ckpt serve, after {idle:g} s idle", m["rss_idle"], m["hwm"], ""],
            ["  of which anonymous (RssAnon)", m["anon"], "", ""],
            ["ckpt serve restarted, nothing new", m["restart_rss"], "", ""],
            ["tf_probe child (peak seen)", "", m["probe_peak"] or "not seen", ""],
        ],
    )
    print(
        f"\nidle {idle:g} s: CPU {m['idle_cpu_pct']:.3f} % of one core, "
        f"{m['wakeups_s']:.1f} context switches/s over {m['threads']:.0f} threads"
    )
    no_tf = m["tf_mapped"] == 0
    complete = m["ok_rows"] == total and m["exit"] == 0
    checks = [
        Check("daemon VmRSS after reconcile", m["rss"], "< 100", "MB", m["rss"] < 100),
        Check("daemon VmHWM (peak)", m["hwm"], "< 100", "MB", m["hwm"] < 100),
        Check("TensorFlow libraries in daemon", m["tf_mapped"], "= 0", "", no_tf),
        Check("idle CPU", m["idle_cpu_pct"], "< 1", "% of a core", m["idle_cpu_pct"] < 1),
        Check(f"all {total} indexed ok, exit 0", float(complete), "= 1", "", complete),
    ]
    return report("daemon_footprint", checks, {"total": total, "idle_s": idle, "median": m})


if __name__ == "__main__":
    raise SystemExit(main())
