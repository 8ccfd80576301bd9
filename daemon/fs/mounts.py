"""Which filesystem a path is on, from /proc/self/mountinfo (Linux; elsewhere: unknown)."""

from __future__ import annotations

from pathlib import Path

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
    "afs",
    "fuse.sshfs",
    "fuse.s3fs",
    "fuse.gcsfuse",
}


def filesystem_type(path: Path, mountinfo: str) -> str | None:
    """The type of the filesystem holding `path`, from /proc/self/mountinfo text."""
    target = str(path)
    best_mount, best_type = "", None
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields or len(fields) < 5:
            continue
        mount_point = fields[4].replace("\\040", " ")
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best_mount):
            best_mount, best_type = mount_point, fields[fields.index("-") + 1]
    return best_type


def network_type(path: Path) -> str | None:
    """The network filesystem type `path` is on, or None for a local one (or unknown)."""
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return None
    fstype = filesystem_type(path.resolve(), mountinfo)
    return fstype if fstype in NETWORK_FILESYSTEMS else None


def is_network(path: Path) -> bool:
    return network_type(path) is not None
