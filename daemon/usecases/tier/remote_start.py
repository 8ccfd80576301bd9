"""What a start with object storage checks first (`ckpt serve`, `ckpt config check --remote`):
each configured store can be reached and written (refused with the key and the reason: exit 2),
whether it honours conditional writes (reported: status and log), and the multipart uploads our
killed processes left under our roots' prefixes, aborted (a resumed `ckpt tier` would reuse
their parts; a start does not wait for that)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from ...core.errors import ConfigError, RemoteFailed
from ...logs import event
from ...remote.keys import root_prefix
from ...settings.config import Config
from ...settings.remote import Remote
from .tiering import object_store


@dataclass(frozen=True)
class RemoteCheck:
    url: str
    key: str  # the config key that names it
    conditional_writes: bool
    aborted_uploads: int


def remotes(config: Config) -> dict[Remote, tuple[str, list[str]]]:
    """{store: (its config key, the key prefixes of the roots tiering to it)}."""
    found: dict[Remote, tuple[str, list[str]]] = {}
    for i, root in enumerate(config.roots):
        remote = config.remote_for(root)
        if remote is None:
            continue
        key = f"roots[{i}].remote.url" if root.remote is not None else "remote.url"
        found.setdefault(remote, (key, []))[1].append(root_prefix(remote, root.remote_name))
    return found


def check_remotes(config: Config, *, abort_stale: bool = True) -> list[RemoteCheck]:
    checks = []
    token = f"{config.node_name}-{socket.gethostname()}-{os.getpid()}"
    for remote, (key, prefixes) in remotes(config).items():
        objects = object_store(remote)
        try:
            honoured = objects.probe(token)
        except RemoteFailed as exc:
            raise ConfigError(key, f"{remote.url} cannot be reached or written: {exc}") from None
        if not honoured:
            event(
                "remote_conditional_writes_ignored",
                level=30,
                url=remote.url,
                note="If-None-Match is ignored: two daemons must not tier one root",
            )
        aborted = 0
        if abort_stale:
            for prefix in prefixes:
                for object_key, upload_id in objects.pending_uploads(prefix):
                    objects.abort_upload(object_key, upload_id)
                    event("remote_upload_aborted", url=remote.object_url(object_key))
                    aborted += 1
        checks.append(RemoteCheck(remote.url, key, honoured, aborted))
        event("remote_ready", url=remote.url, conditional_writes=honoured, aborted=aborted)
    return checks
