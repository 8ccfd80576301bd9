"""fs.mounts: which filesystem a path is on, read from a mountinfo table."""

from __future__ import annotations

from pathlib import Path

from ckpt_daemon.fs import mounts

MOUNTINFO = """\
22 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:40 / /mnt/shared rw,relatime shared:9 - nfs4 server:/export rw,vers=4.2
31 30 0:41 / /mnt/shared/local\\040disk rw - ext4 /dev/vdb rw
"""


def test_filesystem_type_picks_the_innermost_mount() -> None:
    assert mounts.filesystem_type(Path("/home/u/.ckpt"), MOUNTINFO) == "ext4"
    assert mounts.filesystem_type(Path("/mnt/shared/state"), MOUNTINFO) == "nfs4"
    assert mounts.filesystem_type(Path("/mnt/shared/local disk/state"), MOUNTINFO) == "ext4"
    assert mounts.filesystem_type(Path("/mnt/sharedx"), MOUNTINFO) == "ext4"
