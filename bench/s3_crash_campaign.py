"""Crash campaign of the object-storage tier: SIGKILLs of `ckpt tier` and `ckpt fetch` at random
moments, and the S3 server stopped mid-upload, against a real S3 API server on loopback (moto's
server mode, in this process).

Each file goes round: tier (killed, then resumed by the next `ckpt tier` or aborted by the next
`ckpt serve --once`), the local trash purged, fetch back (killed, then retried). After every
kill and every outage the invariants are checked:

- lost: every checkpoint's bytes exist somewhere whole: at its path, in the local trash, or as
  a remote object with exactly its bytes;
- corrupt: no file at a checkpoint's path and no object under a final key holds other bytes;
- freed unverified: a local copy moved away (trash or purged) always has a verified
  `remote_copies` row and the object under its key holds exactly its bytes;
- stale uploads: after the next `ckpt serve --once`, no multipart upload is left under the root's
  prefix.

Files are real safetensors files written by the safetensors library (the daemon's reader indexes
them). `python3 bench/s3_crash_campaign.py [--kills 100] [--size-mb 48]`; the suite runs a small
version (tests/e2e/test_object_storage_crashes.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from random import Random
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from _common import Launcher  # noqa: E402

from tests.support.s3_server import CREDENTIALS, S3Server  # noqa: E402

PYTHON = sys.executable
BUCKET = "crash-campaign"


@dataclass
class Result:
    kills: int = 0
    tier_kills: int = 0
    fetch_kills: int = 0
    outages: int = 0
    resumed_parts: int = 0
    aborted_by_start: int = 0
    lost: int = 0
    corrupt: int = 0
    freed_unverified: int = 0
    stale_uploads: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.lost or self.corrupt or self.freed_unverified or self.stale_uploads)


class Campaign:
    launcher = Launcher()  # how each `ckpt` command runs: a fresh interpreter by default

    def __init__(
        self,
        base: Path,
        size_mb: int,
        files: int,
        seed: int,
        log: Callable[[str], None],
        launcher: Launcher | None = None,
    ) -> None:
        self.launcher = launcher or self.launcher
        self.base, self.rng, self.log = base, Random(seed), log
        self.root = base / "runs"
        (self.root / "exp").mkdir(parents=True)
        self.server = S3Server()
        self.client = self.server.bucket(BUCKET)
        self.env = {**os.environ, **CREDENTIALS}
        self.config = base / "config.yaml"
        self.config.write_text(
            f"state_dir: {base / 'state'}\nroots:\n  - path: {self.root}\n"
            "completion:\n  settle_seconds: 0\n"
            f"remote:\n  url: s3://{BUCKET}/c\n  endpoint_url: {self.server.url}\n"
        )
        self.files: dict[Path, str] = {}
        for i in range(files):
            self.files[self._write(i, size_mb)] = ""
        self.by_composite: dict[tuple[int, str], str] = {}
        for path in self.files:
            data = path.read_bytes()
            self.files[path] = hashlib.sha256(data).hexdigest()
            self.by_composite[(len(data), composite(data))] = self.files[path]
        self.ckpt("scan")
        self.durations = {"tier": 3.0, "fetch": 3.0}
        self.transfer = max(0.2, size_mb / 60)  # seconds a transfer takes, about (loopback)

    def _write(self, i: int, size_mb: int) -> Path:
        import numpy as np
        from safetensors.numpy import save_file

        path = self.root / "exp" / f"step-{i:03d}.safetensors"
        values = np.random.default_rng(i).standard_normal((size_mb << 18,), dtype=np.float32)
        save_file({"dense.weight": values}, str(path))
        return path

    def ckpt(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = ["--config", str(self.config), *args]
        done = self.launcher.run(cmd, env=self.env, cwd=None, timeout=600)
        if check and done.returncode != 0:
            raise AssertionError(f"ckpt {' '.join(args)}: {done.returncode}\n{done.stderr}")
        return done

    def killed(self, what: str, *args: str) -> bool:
        """`ckpt ARGS` SIGKILLed: mostly at a random moment once its transfer began (a
        multipart upload listed, a fetch's temp file there), else at a random moment of its
        expected duration. Returns whether the kill landed (the command had not ended)."""
        cmd = ["--config", str(self.config), *args]
        started = time.monotonic()
        with open(os.devnull, "wb") as devnull:
            proc = self.launcher.start(cmd, env=self.env, cwd=None, stderr=devnull.fileno())
        if self.rng.random() < 0.75:
            began = self.uploads if what == "tier" else self.fetch_temps
            while proc.poll() is None and not began() and time.monotonic() - started < 120:
                time.sleep(0.01)
            delay = self.rng.uniform(0.0, self.transfer)
        else:
            delay = self.rng.uniform(0.15, 1.1) * self.durations[what]
        try:
            proc.wait(timeout=delay)
            self.durations[what] = 0.7 * self.durations[what] + 0.3 * (time.monotonic() - started)
            self.transfer = max(0.02, 0.7 * self.transfer)  # it ended first: aim earlier
            landed = False
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            landed = True
        return landed

    def present(self, path: Path) -> bool:
        return path.exists()

    def fetch_temps(self) -> bool:
        return any(p.name.startswith(".ckpt-tmp") for p in (self.root / "exp").iterdir())

    def timed(self, what: str, *args: str) -> subprocess.CompletedProcess[str]:
        started = time.monotonic()
        done = self.ckpt(*args, check=False)
        self.durations[what] = 0.7 * self.durations[what] + 0.3 * (time.monotonic() - started)
        return done

    # -- the invariants

    def rows(self) -> dict[str, dict[str, Any]]:
        with sqlite3.connect(self.base / "state" / "catalog.db") as db:
            db.row_factory = sqlite3.Row
            found = {
                r["path"]: dict(r) for r in db.execute("SELECT id, path, status FROM checkpoints")
            }
            for r in db.execute("SELECT checkpoint_id, url, state FROM remote_copies"):
                for row in found.values():
                    if row["id"] == r["checkpoint_id"] and r["state"] == "verified":
                        row["url"] = r["url"]
        return found

    def objects(self, *, read: bool = False) -> dict[str, str]:
        """{key: sha256 of its bytes} under the root's prefix (final keys only). Without `read`,
        from the service's own composite SHA-256 of the parts it stored and the size (matched
        against the one the original bytes give: `composite`), so a check after each kill does
        not read every object back; each round's end reads them whole."""
        found = {}
        listed = self.client.list_objects_v2(Bucket=BUCKET, Prefix="c/runs/")
        for item in listed.get("Contents", []):
            if read:
                body = self.client.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read()
                found[item["Key"]] = hashlib.sha256(body).hexdigest()
                continue
            head = self.client.head_object(Bucket=BUCKET, Key=item["Key"], ChecksumMode="ENABLED")
            claimed = (head["ContentLength"], str(head.get("ChecksumSHA256", "")).split("-")[0])
            found[item["Key"]] = self.by_composite.get(claimed, "other bytes")
        return found

    def check(self, result: Result, moment: str, *, read: bool = False) -> None:
        rows, objects = self.rows(), self.objects(read=read)
        trash = {p.name: p for p in (self.root / ".ckpt-trash").rglob("*.safetensors")}
        for path, digest in self.files.items():
            here = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
            in_trash = trash.get(path.name)
            trashed = hashlib.sha256(in_trash.read_bytes()).hexdigest() if in_trash else None
            remote = [k for k, d in objects.items() if k.endswith("/" + path.name)]
            if here is not None and here != digest:
                result.corrupt += 1
                result.problems.append(f"{moment}: {path.name} at its path has other bytes")
            for key in remote:
                if objects[key] != digest:
                    result.corrupt += 1
                    result.problems.append(f"{moment}: object {key} has other bytes")
            if digest not in {here, trashed, *(objects[k] for k in remote)}:
                result.lost += 1
                result.problems.append(f"{moment}: {path.name} lost")
            row = rows.get(str(path), {})
            if here is None:  # freed locally: a verified copy must exist, whole
                url = row.get("url")
                key = url.split("/", 3)[3] if url else None
                if key is None or objects.get(key) != digest:
                    result.freed_unverified += 1
                    result.problems.append(f"{moment}: {path.name} freed without a verified copy")

    def uploads(self) -> int:
        listed = self.client.list_multipart_uploads(Bucket=BUCKET, Prefix="c/")
        return len(listed.get("Uploads", []))

    def next_start(self, result: Result) -> None:
        before = self.uploads()
        self.ckpt("serve", "--once", check=False)
        left = self.uploads()
        result.aborted_by_start += before - left
        if left:
            result.stale_uploads += left
            result.problems.append(f"{left} multipart upload(s) left after a start")

    # -- one round of a file

    def tier_round(self, path: Path, result: Result, kills: int) -> None:
        for _ in range(kills):
            if not self.present(path):
                break
            if not self.killed("tier", "tier", str(path)):
                continue
            result.kills += 1
            result.tier_kills += 1
            self.check(result, f"tier kill {result.kills}")
            self.log(f"tier kill {result.kills} checked: {len(result.problems)} problem(s)")
            if self.rng.random() < 0.3:
                self.next_start(result)
        for _attempt in range(5):
            if not self.present(path):
                break
            done = self.timed("tier", "tier", str(path), "--json")
            if done.returncode == 0:
                items = json.loads(done.stdout)["items"]
                result.resumed_parts += sum(i.get("resumed_parts", 0) for i in items)
        self.check(result, f"tier of {path.name} done", read=True)
        self.next_start(result)

    def fetch_round(self, path: Path, result: Result, kills: int) -> None:
        self.ckpt("trash", "purge", "--older-than", "0s")
        for _ in range(kills):
            if self.present(path):
                break
            if not self.killed("fetch", "fetch", str(path)):
                continue
            result.kills += 1
            result.fetch_kills += 1
            self.check(result, f"fetch kill {result.kills}")
            self.log(f"fetch kill {result.kills} checked: {len(result.problems)} problem(s)")
        for _attempt in range(5):
            if self.present(path):
                break
            self.timed("fetch", "fetch", str(path))
        self.check(result, f"fetch of {path.name} done", read=True)

    def outage(self, path: Path, result: Result, *, back_after: float | None) -> None:
        """The server stopped mid-upload (started again after `back_after` s, or not until the
        tier has failed): the upload is retried, local space never freed unverified."""
        cmd = ["--config", str(self.config), "tier", str(path)]
        errors = open(self.base / f"outage-{result.outages}.err", "w+b")  # noqa: SIM115
        proc = self.launcher.start(cmd, env=self.env, cwd=None, stderr=errors.fileno())
        time.sleep(self.rng.uniform(0.3, 0.9) * self.durations["tier"])
        self.server.stop()
        result.outages += 1
        if back_after is not None:
            time.sleep(back_after)
            self.server.start()
        proc.wait(timeout=300)
        errors.seek(0)
        err = errors.read().decode(errors="replace")
        errors.close()
        if back_after is None:
            self.server.start()
        if proc.returncode not in (0, 3):
            result.problems.append(f"outage: tier exited {proc.returncode}: {err[-300:]!r}")
        self.check(result, f"outage {result.outages}")
        self.next_start(result)

    def stop(self) -> None:
        self.server.stop()


def composite(data: bytes, part: int | None = None) -> str:
    """S3's composite SHA-256 of a multipart object cut in `part`-sized parts (the daemon's)."""
    import base64

    from ckpt_daemon.remote.parts import PART_SIZE, part_size_for

    part = part or part_size_for(len(data), PART_SIZE)

    digests = b"".join(
        hashlib.sha256(data[i : i + part]).digest() for i in range(0, max(len(data), 1), part)
    )
    return base64.b64encode(hashlib.sha256(digests).digest()).decode()


def run_campaign(
    base: Path,
    *,
    kills: int,
    seed: int = 25,
    size_mb: int = 48,
    files: int = 3,
    outages: int = 2,
    log: Callable[[str], None] = print,
    result: Result | None = None,
    make: Callable[..., Campaign] = Campaign,
    launcher: Launcher | None = None,
) -> Result:
    """`result`: filled as the campaign goes (so an interrupted one can still say what it saw);
    `make(base, size_mb, files, seed, log)`: the campaign (bench/s3_crash_folders.py's);
    `launcher`: how each `ckpt` command runs (default: a fresh interpreter)."""
    result = result if result is not None else Result()
    more = {"launcher": launcher} if launcher is not None else {}
    campaign = make(base, size_mb, files, seed, log, **more)
    try:
        paths = list(campaign.files)
        per_round = max(1, kills // (2 * max(1, len(paths))))
        n = 0
        # Until `kills` kills, and both kinds killed at least once: a fast machine may finish
        # a short transfer before the kill of its round (the next aim earlier).
        while (result.kills < kills or not (result.tier_kills and result.fetch_kills)) and n < (
            10 * kills + 20
        ):
            path = paths[n % len(paths)]
            n += 1
            if campaign.present(path):
                if result.outages < outages:
                    campaign.outage(path, result, back_after=1.0 if result.outages % 2 else None)
                campaign.tier_round(path, result, per_round)
            campaign.fetch_round(path, result, per_round)
            log(
                f"kills {result.kills} (tier {result.tier_kills}, fetch {result.fetch_kills}),"
                f" outages {result.outages}, problems {len(result.problems)}"
            )
    finally:
        campaign.stop()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--size-mb", type=int, default=48)
    parser.add_argument("--seed", type=int, default=25)
    parser.add_argument("--base", type=Path, default=None)
    parser.add_argument("--quick", action="store_true", help="8 kills of 24 MB files")
    args = parser.parse_args()
    if args.quick:
        args.kills, args.size_mb = 8, 24
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ckpt-s3-crash-", dir=args.base) as tmp:
        started = time.monotonic()
        result, interrupted = Result(), False
        try:
            run_campaign(
                Path(tmp), kills=args.kills, seed=args.seed, size_mb=args.size_mb, result=result
            )
        except KeyboardInterrupt:  # what it saw so far, said as such
            interrupted = True
    summary = {k: v for k, v in vars(result).items() if k != "problems"}
    summary["interrupted"] = interrupted
    print(json.dumps({**summary, "seconds": round(time.monotonic() - started)}, indent=2))
    for problem in result.problems[:20]:
        print("PROBLEM", problem)
    out = BENCH / "out"
    out.mkdir(exist_ok=True)
    (out / "result-s3_crash_campaign.json").write_text(
        json.dumps({**summary, "problems": result.problems}, indent=2)
    )
    return 0 if result.clean and not result.problems and not interrupted else 1


if __name__ == "__main__":
    sys.exit(main())
