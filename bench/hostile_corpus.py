"""A hostile-file corpus through `ckpt scan`, `ckpt serve --once` and a live `ckpt serve`.

Builds every kind of tests/support/hostile_files.py (empty, truncated, random bytes, a 20 MB
attribute, 101,000 attributes, 210,000 links, 20,000 tiny datasets, 20,000 nested groups,
external links to a FIFO and to a file outside the root, external raw storage, a virtual
dataset, zip bombs in config.json and in model.weights.h5, a 100,000-member zip, path-traversal
member names, a deflated inner weights file, a FIFO named .h5, symlink loops, a symlink out, a
non-UTF-8 name, a rich-markup name), one run folder each, plus one normal checkpoint that must
still index.

Reads outside the root are observed, not assumed: inotify (IN_OPEN) watches the outside folder
for the whole run, and outside link targets are FIFOs, whose open would hang the reader (seen
as a timeout). Peak RSS: of each CLI run and its reader child (wait4), and of the live daemon
plus all its children (sampled from /proc every 0.1 s).

    python3 bench/hostile_corpus.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import CHILD_ENV, OUT, PYTHON, REPO, Check, report, table

sys.path.insert(0, str(REPO))
from tests.support import hostile_files as hf

HANG_SECONDS = 60.0
MB = 1 << 20


def write_config(base: Path, root: Path, state: str) -> Path:
    config = base / f"{state}.yaml"
    config.write_text(
        f"state_dir: {base / state}\nroots:\n  - path: {root}\n"
        "completion:\n  settle_seconds: 0.5\n  min_age_seconds: 0.2\n"
        "service:\n  heartbeat: 1s\nschedule:\n  rescan: 0\n"
    )
    return config


def run_cli(config: Path, *args: str) -> tuple[int | None, float, int, str]:
    """(exit code or None if it hung, wall seconds, peak RSS bytes incl. children, stdout)."""
    start = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            [PYTHON, "-m", "ckpt_daemon", "--config", str(config), *args],
            stdout=out,
            stderr=subprocess.DEVNULL,
            env=CHILD_ENV,
        )
        deadline, hung = start + HANG_SECONDS, False
        while True:  # wait4, not poll(): it reaps, and gives the peak RSS of the whole tree
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                _pid, status, usage = os.wait4(proc.pid, 0)
                hung = True
                break
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode()
    code = None if hung else os.waitstatus_to_exitcode(status)
    return code, time.monotonic() - start, usage.ru_maxrss * 1024, text


def catalog(config: Path) -> dict[str, dict[str, object]]:
    done = subprocess.run(
        [PYTHON, "-m", "ckpt_daemon", "--config", str(config), "list", "--json"],
        capture_output=True,
        text=True,
        env=CHILD_ENV,
        check=True,
    )
    return {r["path"]: r for r in json.loads(done.stdout)}


def tree_rss(pid: int) -> int:
    """RSS of `pid` and all its descendants, in bytes."""
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        rss = next((ln for ln in status.splitlines() if ln.startswith("VmRSS:")), "VmRSS: 0 kB")
        total += int(rss.split()[1]) * 1024
        stack += [int(c) for c in children]
    return total


def display(path: Path) -> str:
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def live(base: Path, staging: Path, root: Path, expected: dict[str, Path]) -> dict[str, object]:
    """Start `ckpt serve` on an empty root, move the corpus in, wait for every row."""
    config = write_config(base, root, "live")
    log = open(base / "live.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [PYTHON, "-m", "ckpt_daemon", "--config", str(config), "serve"],
        stdout=log,
        stderr=log,
        env=CHILD_ENV,
    )
    peak = 0
    deadline = time.monotonic() + HANG_SECONDS
    while "event=ready" not in (base / "live.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    for folder in sorted(staging.iterdir()):
        os.rename(folder, root / folder.name)
    wanted = {display(root / p.relative_to(staging)) for p in expected.values()}
    rows: dict[str, dict[str, object]] = {}
    deadline = time.monotonic() + HANG_SECONDS
    last_check = 0.0
    while proc.poll() is None and time.monotonic() < deadline:
        peak = max(peak, tree_rss(proc.pid))
        if time.monotonic() - last_check > 1.0:
            rows = catalog(config)
            last_check = time.monotonic()
            if wanted <= set(rows):
                break
        time.sleep(0.1)
    died = proc.poll() is not None
    if not died:
        proc.terminate()
        proc.wait(timeout=60)
    log.close()
    return {
        "rows": rows,
        "missing": sorted(wanted - set(rows)),
        "died": died,
        "exit": proc.returncode,
        "peak": peak,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the kinds slow to build")
    args = parser.parse_args()

    base = OUT / "hostile"
    shutil.rmtree(base, ignore_errors=True)
    root, outside, staging = base / "runs", base / "outside", base / "staging"
    for folder in (root, outside, staging):
        folder.mkdir(parents=True)
    start = time.monotonic()
    built = hf.build_corpus(staging, outside, slow=not args.quick)
    (staging / "normal").mkdir()
    built["normal"] = hf.keras_weights(staging / "normal" / "w.01.weights.h5")
    print(f"built {len(built)} kinds in {time.monotonic() - start:.1f} s")
    expected = {k: p for k, p in built.items() if k == "normal" or hf.KINDS[k].expect != "skipped"}

    results: dict[str, dict[str, object]] = {}
    with hf.OpenWatch(outside) as watch:
        live_run = live(base, staging, root, expected)  # moves the corpus into the root
        for name, verb in (("scan", ("scan", "--json")), ("once", ("serve", "--once"))):
            config = write_config(base, root, name)
            code, wall, rss, out = run_cli(config, *verb)
            results[name] = {"code": code, "wall": wall, "rss": rss, "out": out}
            results[name]["rows"] = catalog(config)
    opened = list(watch.opened)

    skipped = {s["path"]: s["reason"] for s in json.loads(results["scan"]["out"])["skipped"]}
    lines, unexplained = [], []
    for kind, path in built.items():
        text = display(root / path.relative_to(staging))
        cells = [kind]
        for source in (results["scan"]["rows"], results["once"]["rows"], live_run["rows"]):
            row = source.get(text)  # type: ignore[union-attr]
            if row is None:
                reason = skipped.get(text)
                cells.append(f"skipped: {reason}" if reason else "NO ROW")
                if not reason:
                    unexplained.append(kind)
            else:
                status, reason = row["status"], row.get("reason") or ""
                if status != "ok" and not reason:
                    unexplained.append(kind)
                cells.append(f"{status}: {reason}"[:56] if reason else str(status))
        lines.append(cells)
    table(["kind", "ckpt scan", "serve --once", "live serve"], lines)

    hangs = [n for n in ("scan", "once") if results[n]["code"] is None]
    hangs += ["live"] * bool(live_run["missing"])
    timed_out = [
        k for k, cells in zip(built, lines, strict=True) if any("timed out" in c for c in cells)
    ]
    peak = max(int(results["scan"]["rss"]), int(results["once"]["rss"]), int(live_run["peak"]))
    print(
        f"\nscan: exit {results['scan']['code']} in {results['scan']['wall']:.1f} s, "
        f"peak RSS {int(results['scan']['rss']) / MB:.0f} MiB; serve --once: exit "
        f"{results['once']['code']} in {results['once']['wall']:.1f} s, peak RSS "
        f"{int(results['once']['rss']) / MB:.0f} MiB; live serve: peak RSS (daemon + children) "
        f"{int(live_run['peak']) / MB:.0f} MiB, exit {live_run['exit']}"
    )
    print(f"opens outside the root (inotify): {opened or 'none'}")
    print(f"reads timed out (a blocked open would show here): {timed_out or 'none'}")
    checks = [
        Check("daemon deaths", float(bool(live_run["died"])), "== 0", "", not live_run["died"]),
        Check("hangs over 60 s", float(len(hangs)), "== 0", "", not hangs),
        Check("peak RSS", peak / MB, "< 300", "MiB", peak < 300 * MB),
        Check(
            "reads outside roots",
            float(len(opened) + len(timed_out)),
            "== 0",
            "",
            not opened and not timed_out,
        ),
        Check("files without a reason", float(len(unexplained)), "== 0", "", not unexplained),
    ]
    return report("hostile_corpus", checks, {"kinds": len(built), "unexplained": unexplained})


if __name__ == "__main__":
    raise SystemExit(main())
