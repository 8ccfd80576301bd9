"""Which filesystem a path is on, from the mount table (/proc/self/mountinfo; elsewhere:
unknown), and what follows for a root on it: whether inotify events arrive, whether rename works.

Cluster runs live on Lustre, GPFS, NFS and object stores mounted with FUSE. On those, inotify
sees only what this host's kernel writes, never other hosts' writes: the watcher polls there.
An object store's FUSE mount has no rename at all (mountpoint-s3: awslabs/mountpoint-s3#1174;
gcsfuse: GoogleCloudPlatform/gcsfuse#2570; s3fs and goofys copy): the trash is kept in the
catalog there (`usecases.trash_in_place`). The mount holding a path is the one whose mount point
is its longest prefix; mountpoint-s3 shows as type `fuse` with source `mountpoint-s3`.

`CKPT_MOUNTINFO` names a file read instead of /proc/self/mountinfo (a mount table given to the
daemon for tests, or to say what a mount really is where the kernel's table cannot).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO_ENV = "CKPT_MOUNTINFO"
_PROC_MOUNTINFO = "/proc/self/mountinfo"

# inotify sees nothing other hosts write there, and SQLite's WAL must not live there.
NETWORK_FILESYSTEMS = {
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "smbfs",
    "9p",
    "ceph",
    "glusterfs",
    "lustre",
    "gpfs",
    "beegfs",
    "afs",
    "fuse.sshfs",
    "fuse.s3fs",
    "fuse.gcsfuse",
}
# Object stores through FUSE: no rename (or a copy that is not atomic). Type `fuse.<name>`, or
# type `fuse` with the program's name as the mount's source (mountpoint-s3).
OBJECT_STORE_MOUNTS = {"mountpoint-s3", "gcsfuse", "s3fs", "goofys", "blobfuse", "blobfuse2"}
# FUSE filesystems whose events arrive (a local disk through FUSE: NTFS, exFAT).
_LOCAL_FUSE = {"fuseblk", "fuse.ntfs-3g", "fuse.exfat", "fuse.lxcfs"}


@dataclass(frozen=True)
class Mount:
    point: str
    fstype: str
    source: str

    @property
    def shown(self) -> str:
        """`nfs4`, `fuse.gcsfuse`, `fuse (mountpoint-s3)`."""
        return f"{self.fstype} ({self.source})" if self.fstype == "fuse" else self.fstype

    @property
    def object_store(self) -> str | None:
        """The object-store FUSE program behind this mount, or None."""
        name = self.fstype.removeprefix("fuse.") if self.fstype.startswith("fuse.") else ""
        for candidate in (name, self.source if self.fstype == "fuse" else ""):
            if candidate in OBJECT_STORE_MOUNTS:
                return candidate
        return None

    @property
    def events_arrive(self) -> bool:
        """Whether inotify sees every write there (not another host's, not a FUSE daemon's)."""
        if self.fstype in NETWORK_FILESYSTEMS or self.object_store is not None:
            return False
        return not (self.fstype.startswith("fuse") and self.fstype not in _LOCAL_FUSE)


@dataclass(frozen=True)
class TrashMode:
    in_place: bool  # the trash is kept in the catalog: files stay at their path until due
    setting: str  # roots[].trash: auto | move | in_place
    why: str


def mount_of(path: Path, mountinfo: str) -> Mount | None:
    """The mount holding `path` (its longest mount-point prefix), from mountinfo text."""
    target = str(path)
    best: Mount | None = None
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields or len(fields) < 5:
            continue
        mount_point = _unescape(fields[4])
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        dash = fields.index("-")
        if inside and (best is None or len(mount_point) >= len(best.point)):
            fstype = fields[dash + 1] if len(fields) > dash + 1 else "?"
            source = _unescape(fields[dash + 2]) if len(fields) > dash + 2 else ""
            best = Mount(mount_point, fstype, source)
    return best


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (`\\040` a space, `\\011` a tab, `\\134` a backslash)."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def mount_table() -> str | None:
    """The mount table's text: `$CKPT_MOUNTINFO`'s file if set, else the kernel's."""
    try:
        return Path(os.environ.get(MOUNTINFO_ENV) or _PROC_MOUNTINFO).read_text()
    except OSError:
        return None


def mount(path: Path) -> Mount | None:
    """The mount `path` is on (None: no mount table here)."""
    table = mount_table()
    return mount_of(Path(os.path.realpath(path)), table) if table is not None else None


def network_type(path: Path) -> str | None:
    """The type of the filesystem `path` is on when inotify cannot see all its writes (network,
    cluster and FUSE filesystems), or None for a local one (or unknown)."""
    found = mount(path)
    return found.shown if found is not None and not found.events_arrive else None


def is_network(path: Path) -> bool:
    return network_type(path) is not None


def trash_mode(setting: str, root: Path) -> TrashMode:
    """How the root at `root` trashes: `setting` (roots[].trash) `move` or `in_place` as
    said; `auto`: in place on an object store's FUSE mount, else moved (and in place after
    all where a real rename fails: `usecases.rail`)."""
    if setting == "in_place":
        return TrashMode(True, setting, "roots[].trash is in_place")
    if setting == "move":
        return TrashMode(False, setting, "roots[].trash is move")
    found = mount(root)
    if found is not None and found.object_store is not None:
        return TrashMode(True, setting, f"{found.shown} at {found.point} has no rename")
    return TrashMode(False, setting, "rename works here")
