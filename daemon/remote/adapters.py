"""Which adapter serves a remote: `open_store` returns the `remote.store.ObjectStore` for a
configured store, its client library imported only then (a `ckpt` command without object
storage never pays for boto3). Another service (GCS, Azure Blob) joins here, by its URL's
scheme, as one more adapter module."""

from __future__ import annotations

from ..settings.remote import Remote
from .store import ObjectStore


def open_store(remote: Remote) -> ObjectStore:
    """The adapter for `remote` (an `s3://` URL: the only scheme the config takes yet)."""
    from .s3 import S3Store

    return S3Store(remote)
