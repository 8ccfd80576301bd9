"""fs.mounts: which filesystem a path is on, read from a mountinfo table."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt_daemon.fs import mounts

MOUNTINFO = """\
22 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:40 / /mnt/shared rw,relatime shared:9 - nfs4 server:/export rw,vers=4.2
31 30 0:41 / /mnt/shared/local\\040disk rw - ext4 /dev/vdb rw
"""


def test_mount_of_picks_the_innermost_mount() -> None:
    def fstype(path: str) -> str | None:
        found = mounts.mount_of(Path(path), MOUNTINFO)
        return found.fstype if found is not None else None

    assert fstype("/home/u/.ckpt") == "ext4"
    assert fstype("/mnt/shared/state") == "nfs4"
    assert fstype("/mnt/shared/local disk/state") == "ext4"
    assert fstype("/mnt/sharedx") == "ext4"


CLUSTER = """\
22 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 22 0:50 / /lustre rw - lustre 10.0.0.1@tcp:/fs rw,flock
41 22 0:51 / /gpfs/scratch rw - gpfs scratch rw
42 22 0:52 / /home rw - nfs4 filer:/home rw,vers=4.2
43 22 0:53 / /mnt/s3 rw,nosuid,nodev - fuse mountpoint-s3 rw,user_id=0,group_id=0
44 22 0:54 / /mnt/gcs rw,nosuid,nodev - fuse.gcsfuse my-bucket rw,user_id=0,group_id=0
45 22 0:55 / /mnt/usb rw - fuseblk /dev/sdb1 rw,user_id=0
46 22 0:56 / /mnt/sshfs rw - fuse.sshfs u@h:/data rw
47 22 0:57 / /mnt/ceph rw - ceph 10.0.0.2:/ rw
"""


def _at(path: str) -> mounts.Mount:
    found = mounts.mount_of(Path(path), CLUSTER)
    assert found is not None
    return found


def test_events_arrive_only_on_local_filesystems() -> None:
    polled = ("/lustre/run", "/gpfs/scratch/r", "/home/u/r", "/mnt/s3/r", "/mnt/gcs/r")
    polled += ("/mnt/sshfs/r", "/mnt/ceph/r")
    for path in polled:
        assert not _at(path).events_arrive, path
    for path in ("/data/run", "/mnt/usb/r"):
        assert _at(path).events_arrive, path


def test_object_store_fuse_mounts_are_known_by_type_or_by_source() -> None:
    assert _at("/mnt/s3/runs").object_store == "mountpoint-s3"
    assert _at("/mnt/s3/runs").shown == "fuse (mountpoint-s3)"
    assert _at("/mnt/gcs/runs").object_store == "gcsfuse"
    for path in ("/lustre/r", "/mnt/sshfs/r", "/mnt/usb/r", "/data"):
        assert _at(path).object_store is None, path


def test_the_trash_mode_follows_the_setting_then_the_mount_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "mountinfo"
    table.write_text(CLUSTER)
    monkeypatch.setenv(mounts.MOUNTINFO_ENV, str(table))
    s3 = mounts.trash_mode("auto", Path("/mnt/s3/runs"))
    assert s3.in_place and "fuse (mountpoint-s3) at /mnt/s3 has no rename" in s3.why
    assert not mounts.trash_mode("auto", Path("/lustre/runs")).in_place
    assert not mounts.trash_mode("move", Path("/mnt/gcs/runs")).in_place
    assert mounts.trash_mode("in_place", Path("/data/runs")).in_place
    assert mounts.network_type(Path("/gpfs/scratch/x")) == "gpfs"
    assert mounts.network_type(Path("/data/x")) is None
