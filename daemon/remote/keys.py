"""Where a checkpoint's copy lives in the store: content-stable keys (the same bytes always get
the same key, so a retried or resumed upload is idempotent and a rewritten file never lands on
an older copy), the trash prefix, and the probe's key. Pure: names only."""

from __future__ import annotations

from collections.abc import Sequence

from ..settings.remote import Remote

TRASH_PREFIX = ".ckpt-trash"
PROBE_PREFIX = ".ckpt-probe"
HASH_METADATA = "ckpt-hash"  # x-amz-meta-ckpt-hash: the catalog's BLAKE3 of the bytes
_HASH_PART = 16  # hex digits of the content hash in a key: 64 bits, per file name


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def object_key(remote: Remote, root_name: str, relative: Sequence[str], content_hash: str) -> str:
    """`<prefix>/<root name>/<run folders>/<hash16>/<file name>`: browsable by run, and the
    file keeps its name (a fetched copy loads as the original)."""
    digest = content_hash.split(":", 1)[-1][:_HASH_PART]
    return _join(remote.prefix, root_name, *relative[:-1], digest, relative[-1])


def root_prefix(remote: Remote, root_name: str) -> str:
    """Every object (and multipart upload) of one root starts with this."""
    return _join(remote.prefix, root_name) + "/"


def trash_key(remote: Remote, key: str, batch: str) -> str:
    """Where a remote copy retention gave up waits for the purge: `<prefix>/.ckpt-trash/<batch>/
    <key below the prefix>`."""
    below = key[len(remote.prefix) + 1 :] if remote.prefix else key
    return _join(remote.prefix, TRASH_PREFIX, batch, below)


def probe_key(remote: Remote, token: str) -> str:
    return _join(remote.prefix, PROBE_PREFIX, token)
