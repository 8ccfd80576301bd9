"""The object store as the tier's use cases see it: one small interface, `ObjectStore` (put,
get, head, copy, delete, the uploads a killed process left listed and aborted, the start-up
probe). The use cases name only this interface and `remote.adapters.open_store`, never a
client library: S3 (`remote.s3`, boto3) is one adapter, and another service (GCS, Azure Blob)
joins as one more module beside it and one line in `open_store`.

What an adapter promises: a put streams its `Source` once, in order, in bounded memory, sends
the bytes the source hashed and refuses (`Refused`, nothing completed) when they are not the
catalog's; with `conditional`, an object already at the key is kept, never overwritten
(`Uploaded.existing`); `head` reports the service's own checksum of what it stored and our
hash from the object's metadata; a transient fault is retried with backoff and what still fails
raises `RemoteFailed`, counted in `counters`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .sources import Source


@dataclass(frozen=True)
class RemoteObject:
    key: str
    size: int
    checksum: str | None  # the service's own (composite for multipart), `sha256:<base64>`
    content_hash: str | None  # our BLAKE3, from the object's metadata


@dataclass(frozen=True)
class Uploaded:
    key: str
    size: int
    checksum: str  # the composite checksum the service must report, `sha256:<base64>`
    content_hash: str  # BLAKE3 of the bytes that were sent
    parts: int
    resumed_parts: int
    existing: bool = False  # an identical object was at the key: kept, not overwritten


@dataclass
class Counters:
    """What the metrics read: bytes sent, retries, calls that failed after their retries."""

    uploaded_bytes: int = 0
    retries: int = 0
    failures: int = 0


class ObjectStore(Protocol):
    counters: Counters

    def probe(self, token: str) -> bool:
        """The store can be reached and written (RemoteFailed otherwise); returns whether it
        honours conditional writes."""

    def put(self, key: str, source: Source, content_hash: str, *, conditional: bool) -> Uploaded:
        """`source` as `key` (resumed if a killed put left parts), or the identical object
        already there kept; `content_hash` goes into the metadata."""

    def get(self, key: str) -> Iterator[bytes]:
        """The object's bytes in chunks (one in memory at a time)."""

    def head(self, key: str) -> RemoteObject | None:
        """The object at `key` as the service describes it; None: there is none."""

    def copy(self, key: str, new_key: str, size: int) -> None:
        """A copy inside the service, metadata kept (the bytes never come here)."""

    def delete(self, key: str) -> None: ...

    def pending_uploads(self, prefix: str) -> list[tuple[str, str]]:
        """Uploads begun and never completed under `prefix`: [(key, upload id)]."""

    def abort_upload(self, key: str, upload_id: str) -> None: ...
