"""What each root's storage allows, as `ckpt config check` says it: its filesystem (from the
mount table, `fs.mounts`), whether inotify events arrive there (else the watcher polls), and
whether its trash moves files or is kept in the catalog (a delayed delete,
`usecases.trash_in_place`): by `roots[].trash`, the mount table, and a rename probe (a new
empty temp file of ours renamed into the root's trash folder and removed).
"""

from __future__ import annotations

from typing import Any

from ..fs import fsops, fsswap, mounts
from ..settings.config import RootConfig


def root_storage(root: RootConfig, *, probe: bool = True) -> dict[str, Any]:
    """`{path, filesystem, mount_point, events, observer, trash, trash_why}` of `root`."""
    found = mounts.mount(root.path)
    events = found.events_arrive if found is not None else True
    observer = root.observer
    if observer == "auto":
        observer = "inotify" if events else "polling"
    mode = mounts.trash_mode(root.trash, root.path)
    in_place, why = mode.in_place, mode.why
    if not in_place and probe and root.trash == "auto" and root.path.is_dir():
        failed = fsswap.rename_probe(root.path, fsops.TRASH_DIR)
        if failed is not None:
            in_place, why = True, f"a rename into {fsops.TRASH_DIR} failed ({failed})"
    return {
        "path": str(root.path),
        "filesystem": found.shown if found is not None else None,
        "mount_point": found.point if found is not None else None,
        "events": events,
        "observer": observer,
        "trash": "in_place" if in_place else "move",
        "trash_why": why,
    }


def lines(doc: dict[str, Any]) -> list[str]:
    """The text of one root's storage: two lines under its `root:` line."""
    fs = doc["filesystem"] or "unknown (no mount table)"
    events = (
        "inotify events arrive" if doc["events"] else "inotify sees no other host's writes: polled"
    )
    trash = (
        "trash moves files into .ckpt-trash"
        if doc["trash"] == "move"
        else "trash kept in the catalog (files deleted where they are when due)"
    )
    return [
        f"    filesystem {fs} at {doc['mount_point'] or '-'}: {events} "
        f"(observer {doc['observer']})",
        f"    {trash}: {doc['trash_why']}",
    ]
