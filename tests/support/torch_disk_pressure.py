"""Issue 39's disk-guard scenario, rerun: a plain PyTorch loop on a 40 MB filesystem.

The user's loop writes `ckpt_epochNNN.pt`, then `last.pt`, then `best.pt` (when val_loss
improves) each epoch, each a `torch.save` of the model and Adam's state (~0.9 MB): 25 epochs need
~24 MB, so without us the run ends with ~17 MB of its 40 MB free. Each must run in a private mount
namespace (`unshare -m --propagation private`, as root), with a tmpfs of FS_MB over OUT/disk:

    python torch_disk_pressure.py --control OUT   # the loop alone (no daemon)
    python torch_disk_pressure.py --driver OUT    # the loop under `ckpt serve`
    python torch_disk_pressure.py --full OUT      # the catalog on a disk filled to its last byte

`--driver` runs `ckpt serve` on the BUNDLED config.yaml with only the root and `min_free`
(MIN_FREE_MB) set, from OUT/disk as the user did (so `state_dir: ./.ckpt`, the catalog, is on
the same small filesystem). `--full` serves with the catalog on the tmpfs too, lets the loop run
a few epochs (kept copies of `last.pt` and `best.pt` pile up), then fills the filesystem to its
last byte with another program's file, and waits until the guard, its catalog on that full disk,
is back above `min_free` or says it cannot free more (`ckpt status`). Each writes
OUT/results.json: the loop's exit code, output and truth (its epochs, val_loss, the free space
it saw after its saves), the files left, `ckpt list`/`log`/`status` as JSON and the service's
log. The tmpfs goes away with the namespace; the results stay.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
FS_MB = 40
MIN_FREE_MB = 12
EPOCHS = 25
BEST_UNTIL = 12  # val_loss improves up to this epoch, then worsens: best.pt v1-v12
WIDTH = 256  # 32 -> 256 -> 256 -> 1: ~74.5k params, ~0.9 MB with Adam's two slots
# An epoch's "work": the service sees each save before the next, as with a real model.
PAUSE_S = 0.3
DEADLINE_S = 240
SETTLE_S = 90  # after the loop: the guard done (else reported, not waited)
FULL_EPOCHS = 8  # --full: the epochs before the filler takes the rest of the disk


def train(run_dir: Path, epochs: int, pause: float = PAUSE_S) -> None:
    """The user's loop. Records each epoch's val_loss and the free space after its saves."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, WIDTH),
        torch.nn.ReLU(),
        torch.nn.Linear(WIDTH, WIDTH),
        torch.nn.ReLU(),
        torch.nn.Linear(WIDTH, 1),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(64, 32)
    y = x[:, :1] * 2
    run_dir.mkdir(parents=True, exist_ok=True)
    truth: list[dict[str, Any]] = []
    best = float("inf")
    with open(run_dir / "metrics.csv", "w") as log:
        log.write("epoch,val_loss\n")
        for epoch in range(epochs):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            # A schedule that makes the best epoch known: better up to BEST_UNTIL, then worse.
            val_loss = round(1.0 / (epoch + 1) if epoch < BEST_UNTIL else 0.1 + epoch / 100, 6)
            state = {
                "epoch": epoch,
                "model_state_dict": model.state_dict(),
                "optimizer_state_dict": optimizer.state_dict(),
                "val_loss": val_loss,
            }
            torch.save(state, run_dir / f"ckpt_epoch{epoch:03d}.pt")
            torch.save(state, run_dir / "last.pt")
            if val_loss < best:
                best = val_loss
                torch.save(state, run_dir / "best.pt")
            log.write(f"{epoch},{val_loss}\n")
            log.flush()
            st = os.statvfs(run_dir)
            truth.append({"epoch": epoch, "val_loss": val_loss, "free": st.f_bavail * st.f_frsize})
            # Outside the root: the service must not read it as a metrics file.
            (run_dir.parent.parent / "truth.json").write_text(json.dumps(truth))
            time.sleep(pause)


def _mount(out: Path) -> Path:
    disk = out / "disk"
    disk.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_MB}m", "tmpfs", str(disk)], check=True)
    return disk


def _loop(disk: Path, epochs: int, pause: float = PAUSE_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, __file__, "--train", str(disk / "runs" / "exp"), str(epochs), str(pause)],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )


def _files(disk: Path) -> dict[str, int]:
    return {str(p.relative_to(disk)): p.stat().st_size for p in disk.rglob("*") if p.is_file()}


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def control(out: Path) -> None:
    disk = _mount(out)
    job = _loop(disk, EPOCHS, pause=0.0)  # nobody to wait for
    truth = disk / "truth.json"
    results = {
        "job": {"returncode": job.returncode, "output": job.stdout + job.stderr},
        "truth": json.loads(truth.read_text()) if truth.exists() else [],
        "files": _files(disk),
        "free_bytes": _free(disk),
    }
    (out / "results.json").write_text(json.dumps(results))


def _bundled_config(disk: Path) -> Path:
    """The shipped config.yaml, with only its root and `min_free` set, beside the runs."""
    text = (REPO / "config.yaml").read_text()
    assert "  - path: ./runs\n" in text, "the bundled config's root moved: update this test bed"
    config = disk / "config.yaml"
    config.write_text(text + f"\nmin_free: {MIN_FREE_MB}MB\n")
    return config


def driver(out: Path, *, fill: bool = False) -> None:
    disk = _mount(out)
    (disk / "runs").mkdir()
    config = _bundled_config(disk)
    ckpt = [sys.executable, "-m", "ckpt_daemon", "--config", str(config)]
    log_path = out / "serve.log"
    log = open(log_path, "w")  # noqa: SIM115 - closed below
    serve = subprocess.Popen([*ckpt, "serve"], stdout=log, stderr=log, cwd=disk)
    results: dict[str, Any] = {}
    try:
        _wait(lambda: "event=ready" in log_path.read_text(), "the service ready")
        job = _loop(disk, FULL_EPOCHS if fill else EPOCHS)
        results["job"] = {"returncode": job.returncode, "output": job.stdout + job.stderr}
        last = disk / "runs" / "exp" / f"ckpt_epoch{(FULL_EPOCHS if fill else EPOCHS) - 1:03d}.pt"
        _wait(lambda: _indexed(ckpt, last, disk), "the last save indexed")
        if fill:
            results["before_fill"] = {"files": _files(disk), "free_bytes": _free(disk)}
            results["filled"] = _fill(disk / "other-job.bin")
            marker = log_path.stat().st_size
            # The guard frees our copies although its catalog sits on the full disk.
            # Done when back above min_free, or when the guard says it cannot free more (how
            # much it may free depends on how many copies the service had kept by then).
            results["settled"] = _wait(
                lambda: _settled(ckpt, ("ok", "cannot free")), "the guard done", deadline=SETTLE_S
            )
            results["freed_within"] = log_path.read_text()[marker:]
        else:
            # Not fatal: a guard that cannot get back above min_free is what the test reports.
            results["settled"] = _wait(
                lambda: _settled(ckpt), "free space above min_free", deadline=SETTLE_S
            )
        results["list"] = _json([*ckpt, "list", "--all", "--json"], disk)
        results["log"] = _json([*ckpt, "log", "--json"], disk)
        results["status"] = _json([*ckpt, "status", "--json"], disk)
        results["serve_alive"] = serve.poll() is None
        results["files"] = _files(disk)
        results["free_bytes"] = _free(disk)
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()
        log.close()
        truth = disk / "truth.json"
        results["truth"] = json.loads(truth.read_text()) if truth.exists() else []
        results["serve_returncode"] = serve.returncode
        results["serve_log"] = log_path.read_text()
        (out / "results.json").write_text(json.dumps(results))


def _fill(path: Path) -> int:
    """Another program's file written until the filesystem has no byte left (ENOSPC)."""
    written = 0
    chunk = b"\0" * 65536
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                written += f.write(chunk)
            except OSError:
                break
        for size in (4096, 512, 1):  # the last blocks too
            while True:
                try:
                    written += f.write(b"\0" * size)
                except OSError:
                    break
    return written


def _indexed(ckpt: list[str], path: Path, cwd: Path) -> bool:
    shown = _json([*ckpt, "show", str(path), "--json"], cwd)
    return bool(isinstance(shown, dict) and shown.get("status") == "ok")


def _settled(ckpt: list[str], states: tuple[str, ...] = ("ok",)) -> bool:
    status = _json([*ckpt, "status", "--json"], None)
    disk = (status or {}).get("disk") or [{}]
    return bool(disk[0].get("state") in states)


def _json(argv: list[str], cwd: Path | None) -> Any:
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
    return json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else None


def _wait(condition: Any, what: str, *, deadline: float = 0.0) -> bool:
    """Wait until `condition()`; past DEADLINE_S an error, past a given `deadline` False."""
    end = time.monotonic() + (deadline or DEADLINE_S)
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.3)
    if deadline:
        return False
    raise AssertionError(f"timed out waiting for {what}")


if __name__ == "__main__":
    if sys.argv[1] == "--train":
        train(Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    elif sys.argv[1] == "--control":
        control(Path(sys.argv[2]))
    elif sys.argv[1] == "--full":
        driver(Path(sys.argv[2]), fill=True)
    else:
        driver(Path(sys.argv[2]))
