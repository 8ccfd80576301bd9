"""Detection latency of `ckpt serve` while its artifacts job compresses a ~300 MB checkpoint.

The same measurement as detection_latency.py (writer's close() to the row seen `ok`, the
SQLite catalog polled read-only every 20 ms; small real Keras files written like Keras does),
but the root also holds one cold ~300 MB Keras legacy HDF5 checkpoint, and the artifacts job
(every 1 s, compress_after 1 s) compresses it in its `nice` child while the files are written.
The files are written only once the compress has started (its temp file exists), and the
bench says how many were seen while it still ran. Issue 8 item 10: p95 < 1 s.

The big checkpoint is the real small `full.h5` layout grown by one weight of compressible
values (made with h5py in seconds); `--resnet` uses compress_bench.py's real Keras ResNet50 +
Adam checkpoint instead (made once by a Keras child: slower the first time).

    python3 bench/detection_during_artifacts.py [--quick] [--files N] [--megabytes M] [--resnet]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import time
from pathlib import Path

from _common import OUT, Check, median, report, table
from detection_latency import (
    SERVICE,
    fixtures,
    pct,
    start_serve,
    stop_serve,
    wait_ready,
    write_config,
    write_like_keras,
)

BASE = SERVICE / "during-artifacts"
BIG = OUT / "big_legacy_{}mb.h5"


def big_checkpoint(megabytes: int, resnet: bool) -> Path:
    if resnet:
        from compress_bench import checkpoint

        return checkpoint("ResNet50")
    big = Path(str(BIG).format(megabytes))
    if big.exists():
        return big
    import h5py
    import numpy as np

    print(f"writing a {megabytes} MB Keras legacy HDF5 checkpoint with h5py (once) ...")
    tiny = fixtures()["h5"]
    part = big.with_name(big.stem + ".part.h5")
    shutil.copyfile(tiny, part)
    with h5py.File(part, "r+") as f:
        layer = next(
            f["model_weights"][name]
            for name in f["model_weights"]
            if len(f["model_weights"][name].attrs.get("weight_names", [])) > 0
        )
        inner = layer[next(iter(layer))]
        values = np.round(np.random.default_rng(0).normal(size=megabytes << 18), 2)
        inner.create_dataset("big", data=values.astype("float32").reshape(-1, 1024))
        names = [n if isinstance(n, bytes) else n.encode() for n in layer.attrs["weight_names"]]
        prefix = names[0].decode().split("/")[0]
        layer.attrs["weight_names"] = np.array([*names, f"{prefix}/big".encode()], dtype="S")
    os.replace(part, big)
    return big


def temps(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.startswith(".ckpt-tmp-")]


def compress_over(log: Path) -> bool:
    """The daemon logged the end of the compress child (done or failed)."""
    text = log.read_text()
    return "event=compress " in text or "event=compress_failed" in text


def measure(files: int, runs: int, source: Path) -> dict[str, object]:
    shutil.rmtree(BASE, ignore_errors=True)
    root = BASE / "root"
    big_run = root / "big"
    big_run.mkdir(parents=True)
    for r in range(runs):
        (root / f"run{r:02d}").mkdir(parents=True)
    big = big_run / "big.h5"
    shutil.copyfile(source, big)
    old = time.time() - 7200
    os.utime(big, (old, old))  # cold: due for the artifacts job at once
    cfg = write_config(BASE, root, settle=2, min_age=0.2, rescan=0, heartbeat=1)
    text = cfg.read_text().replace(
        "schedule:\n", "schedule:\n  artifacts: 1s\n  verify: 0\n  purge: 0\n"
    )
    cfg.write_text(text + "artifacts: {compress_after: 1s}\n")
    log = BASE / "serve.log"
    proc = start_serve(cfg, log)
    try:
        wait_ready(proc, log)
        deadline = time.monotonic() + 120
        while not temps(big_run):
            if time.monotonic() > deadline or "event=compress" in log.read_text():
                raise SystemExit(f"the compress did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.05)
        started = time.monotonic()
        blobs = {s: p.read_bytes() for s, p in fixtures().items() if s != "tf"}
        conn = sqlite3.connect(f"file:{BASE / 'state' / 'catalog.db'}?mode=ro", uri=True)
        query = "SELECT path FROM checkpoints WHERE status='ok'"
        closed: dict[str, float] = {}
        seen: dict[str, float] = {}
        during: set[str] = set()  # seen while the compress still ran
        compress_ended: float | None = None
        written, next_write, next_poll = 0, time.monotonic(), time.monotonic()
        give_up = time.monotonic() + 60 + files * 0.5
        while len(seen) < files and time.monotonic() < give_up:
            now = time.monotonic()
            if written < files and now >= next_write:
                suffix = "h5" if written % 2 else "keras"
                name = f"model.{written // runs + 1:02d}-{1 / (written + 2):.3f}.{suffix}"
                path = root / f"run{written % runs:02d}" / name
                closed[str(path)] = write_like_keras(blobs[suffix], path)[0]
                written, next_write = written + 1, next_write + 0.25
                continue
            if now >= next_poll:
                running = compress_ended is None and not compress_over(log)
                if not running and compress_ended is None:
                    compress_ended = now
                after = time.monotonic()
                for (text,) in conn.execute(query):
                    if text in closed and text not in seen:
                        seen[text] = after
                        if running:
                            during.add(text)
                next_poll = now + 0.02
            time.sleep(max(0.0, min(next_poll, next_write) - time.monotonic()))
        while compress_ended is None and time.monotonic() < give_up + 300:
            if compress_over(log):
                compress_ended = time.monotonic()
            time.sleep(0.1)
        conn.close()
    finally:
        code = stop_serve(proc)
    lat = [seen[p] - closed[p] for p in seen if p in during]
    all_lat = [seen[p] - closed[p] for p in seen]
    return {
        "written": written,
        "seen": len(seen),
        "seen_during_compress": len(during),
        "latency_during": lat,
        "latency_all": all_lat,
        "compress_seconds": (compress_ended or time.monotonic()) - started,
        "compressed": "event=compress " in log.read_text(),
        "exit": code,
        "big_bytes": source.stat().st_size,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=60, help="files written (default 60)")
    parser.add_argument("--megabytes", type=int, default=300, help="big checkpoint size")
    parser.add_argument("--resnet", action="store_true", help="the real ResNet50 checkpoint")
    parser.add_argument("--quick", action="store_true", help="20 files, a 100 MB checkpoint")
    parser.add_argument("--repeats", type=int, help="ignored: one round (the compress is long)")
    args = parser.parse_args()
    if args.quick:
        args.files, args.megabytes = 20, 100
    source = big_checkpoint(args.megabytes, args.resnet)
    print(
        f"{args.files} small files, 250 ms apart, while the artifacts job compresses "
        f"{source.name} ({source.stat().st_size / 1e6:.0f} MB) ...",
        flush=True,
    )
    r = measure(args.files, 4, source)
    lat = r["latency_during"]
    assert isinstance(lat, list)
    if not lat:
        raise SystemExit(f"no file was seen while the compress ran: {r}")
    ms = [pct(lat, 50) * 1000, pct(lat, 95) * 1000, max(lat) * 1000, median(lat) * 1000]
    print("\nms from the writer's close() to the row seen `ok`, files seen during the compress:")
    table(["files", "p50", "p95", "max", "median"], [[len(lat), *ms]])
    print(
        f"written {r['written']}, seen {r['seen']} ({r['seen_during_compress']} while the "
        f"compress ran); compress took {r['compress_seconds']:.1f} s and "
        f"{'finished' if r['compressed'] else 'did NOT finish'}; daemon exit {r['exit']}"
    )
    checks = [
        Check("detection p95 during compress", pct(lat, 95), "< 1", "s", pct(lat, 95) < 1.0),
        Check(
            "files seen / written",
            float(r["seen"]),  # type: ignore[arg-type]
            f"== {r['written']}",
            "files",
            r["seen"] == r["written"],
        ),
    ]
    return report("detection_during_artifacts", checks, {k: v for k, v in r.items()})


if __name__ == "__main__":
    raise SystemExit(main())
