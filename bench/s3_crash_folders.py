"""The object-storage crash campaign (`s3_crash_campaign.py`) on folder checkpoints: Hugging Face
`save_pretrained` folders (`config.json`, `model.safetensors.index.json` and N safetensors shards
written by the safetensors library, indexed as `hf-folder`), each tiered as ONE ustar tar object
and unpacked on fetch. The same SIGKILLs of `ckpt tier` and `ckpt fetch` and server stops; the
invariants are checked per member file:

- lost: every member's bytes whole somewhere: at its path, in the local trash, or inside a
  remote tar object (parsed, each member hashed) under a final key;
- corrupt: no member at its path and no member inside an object holds other bytes;
- freed unverified: a folder with a member moved away has a verified `remote_copies` row whose
  object holds every member's exact bytes;
- half folder: after a killed fetch, the folder at the checkpoint's path holds all its members
  or none (a `.ckpt-tmp-<pid>h<host>-` temp folder inside it is ours, and must be gone after the
  next fetch or `ckpt serve --once`: counted as `leftover_temps` otherwise);
- stale uploads: as the file campaign.

`python3 bench/s3_crash_folders.py [--kills 100] [--size-mb 32] [--shards 3] [--quick]`
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from random import Random

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from s3_crash_campaign import BUCKET, Campaign, Result, run_campaign  # noqa: E402

from tests.support.s3_server import CREDENTIALS, S3Server  # noqa: E402

WHOLE = "whole"


@dataclass
class FolderResult(Result):
    half_folders: int = 0
    leftover_temps: int = 0
    temps_seen: int = 0

    @property
    def clean(self) -> bool:
        return super().clean and not (self.half_folders or self.leftover_temps)


class FolderCampaign(Campaign):
    def __init__(
        self,
        base: Path,
        size_mb: int,
        folders: int,
        shards: int,
        seed: int,
        log: Callable[[str], None],
    ) -> None:
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
        self.members: dict[Path, dict[str, str]] = {}
        for i in range(folders):
            folder = self.root / "exp" / f"hf-{i:03d}"
            write_folder(folder, size_mb, shards, seed=i)
            self.members[folder] = {
                p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()
            }
        self.files = dict.fromkeys(self.members, "")  # the base's rounds iterate these
        self.verified: dict[tuple[int, str], dict[str, str]] = {}  # (size, checksum): members
        self.ckpt("scan")
        for folder in self.members:
            self.ckpt("show", str(folder))  # indexed (as hf-folder) or this raises
        self.durations = {"tier": 3.0, "fetch": 3.0}
        self.transfer = max(0.2, size_mb / 60)

    def fetch_temps(self) -> bool:
        return bool(self.temps())

    def temps(self) -> list[Path]:
        exp = self.root / "exp"
        return [p for p in [*exp.iterdir(), *exp.glob("*/*")] if p.name.startswith(".ckpt-tmp")]

    def tar_members(self, *, read: bool) -> dict[str, dict[str, str]]:
        """{key: {member name: sha256}} of each final object under the root's prefix; an object
        is read and parsed once per (size, composite checksum) (cached: those bytes verified)."""
        found = {}
        listed = self.client.list_objects_v2(Bucket=BUCKET, Prefix="c/runs/")
        for item in listed.get("Contents", []):
            key = item["Key"]
            head = self.client.head_object(Bucket=BUCKET, Key=key, ChecksumMode="ENABLED")
            claimed = (head["ContentLength"], str(head.get("ChecksumSHA256", "")))
            if read or claimed not in self.verified or not claimed[1]:
                body = self.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
                self.verified[claimed] = parse_tar(body)
            found[key] = self.verified[claimed]
        return found

    def check(self, result: Result, moment: str, *, read: bool = False) -> None:
        assert isinstance(result, FolderResult)
        rows, objects = self.rows(), self.tar_members(read=read)
        trash = {
            (p.parent.name, p.name): p
            for p in (self.root / ".ckpt-trash").rglob("*")
            if p.is_file()
        }
        for folder, members in self.members.items():
            mine = [k for k in objects if k.rsplit("/", 1)[-1] == folder.name + ".tar"]
            present = 0
            for name, digest in members.items():
                path = folder / name
                here = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
                present += here is not None
                in_trash = trash.get((folder.name, name))
                trashed = hashlib.sha256(in_trash.read_bytes()).hexdigest() if in_trash else None
                if here is not None and here != digest:
                    result.corrupt += 1
                    result.problems.append(f"{moment}: {folder.name}/{name} has other bytes")
                remote = [objects[k].get(name) for k in mine]
                for got in remote:
                    if got != digest:
                        result.corrupt += 1
                        result.problems.append(f"{moment}: {folder.name}.tar: {name} {got}")
                if digest not in {here, trashed, *remote}:
                    result.lost += 1
                    result.problems.append(f"{moment}: {folder.name}/{name} lost")
            if present < len(members):  # freed (part of it): a verified whole copy must exist
                url = rows.get(str(folder), {}).get("url")
                key = url.split("/", 3)[3] if url else None
                if key is None or objects.get(key) != members:
                    result.freed_unverified += 1
                    result.problems.append(f"{moment}: {folder.name} freed without a verified copy")
            if 0 < present < len(members) and moment.startswith("fetch"):
                result.half_folders += 1
                result.problems.append(
                    f"{moment}: {folder.name} half there ({present} of {len(members)} members)"
                )
        temps = self.temps()
        result.temps_seen += len(temps)
        if temps and moment.endswith("done"):
            result.leftover_temps += len(temps)
            result.problems.append(f"{moment}: temps left {[str(t) for t in temps]}")

    def present(self, path: Path) -> bool:
        """There only with all its members (the rounds tier it, or fetch it back, till then)."""
        return all((path / name).is_file() for name in self.members[path])


def parse_tar(body: bytes) -> dict[str, str]:
    out = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as tar:
            for member in tar:
                extracted = tar.extractfile(member) if member.isfile() else None
                if extracted is not None:
                    out[member.name.rsplit("/", 1)[-1]] = hashlib.sha256(
                        extracted.read()
                    ).hexdigest()
    except tarfile.TarError as err:
        out["<unreadable>"] = str(err)
    return out


def write_folder(folder: Path, size_mb: int, shards: int, seed: int) -> None:
    """A sharded `save_pretrained` folder (config, index, `model-0000k-of-0000N.safetensors`)."""
    import numpy as np
    from safetensors.numpy import save_file

    folder.mkdir(parents=True)
    weight_map = {}
    for k in range(shards):
        name = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        rng = np.random.default_rng(seed * 100 + k)
        save_file(
            {f"w{k}": rng.standard_normal(((size_mb << 18) // shards,), np.float32)},
            str(folder / name),
        )
        weight_map[f"w{k}"] = name
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": size_mb << 20}, "weight_map": weight_map})
    )
    (folder / "config.json").write_text(
        json.dumps({"model_type": "bert", "architectures": ["BertModel"]})
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--size-mb", type=int, default=32, help="per folder")
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--folders", type=int, default=3)
    parser.add_argument("--outages", type=int, default=4)
    parser.add_argument("--seed", type=int, default=25)
    parser.add_argument("--base", type=Path, default=None)
    parser.add_argument("--quick", action="store_true", help="8 kills of 16 MB folders")
    args = parser.parse_args()
    if args.quick:
        args.kills, args.size_mb = 8, 16

    def make(
        base: Path, size_mb: int, folders: int, seed: int, log: Callable[[str], None]
    ) -> Campaign:
        return FolderCampaign(base, size_mb, folders, args.shards, seed, log)

    with tempfile.TemporaryDirectory(prefix="ckpt-s3-crash-folders-", dir=args.base) as tmp:
        started = time.monotonic()
        result, interrupted = FolderResult(), False
        try:
            run_campaign(
                Path(tmp),
                kills=args.kills,
                seed=args.seed,
                size_mb=args.size_mb,
                files=args.folders,
                outages=args.outages,
                result=result,
                make=make,
            )
        except KeyboardInterrupt:
            interrupted = True
    summary = {k: v for k, v in vars(result).items() if k != "problems"}
    summary.update(interrupted=interrupted, seconds=round(time.monotonic() - started))
    print(json.dumps(summary, indent=2))
    for problem in result.problems[:20]:
        print("PROBLEM", problem)
    out = BENCH / "out"
    out.mkdir(exist_ok=True)
    (out / "result-s3_crash_folders.json").write_text(
        json.dumps({**summary, "problems": result.problems}, indent=2)
    )
    return 0 if result.clean and not result.problems and not interrupted else 1


if __name__ == "__main__":
    sys.exit(main())
