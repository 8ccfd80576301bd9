"""The S3 adapter of `remote.store.ObjectStore`, and the only boto3 import (an optional extra:
`pip install 'ckpt-daemon[s3]'`), loaded when a remote is first used. Credentials are boto3's
standard chain; we never read, store or log them.

Uploads and large copies are multipart (`remote.s3_multipart`). Every call is retried with
exponential backoff on connection errors, timeouts, 5xx and SlowDown; what still fails raises
`RemoteFailed`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from ..core.errors import RemoteFailed, UsageError
from ..settings.remote import Remote
from . import parts
from .keys import HASH_METADATA, probe_key
from .s3_multipart import Multipart, code
from .sources import Source
from .store import Counters, RemoteObject, Uploaded

READ_CHUNK = 1 << 20
_RETRYABLE_CODES = {
    "500",
    "502",
    "503",
    "504",
    "InternalError",
    "ServiceUnavailable",
    "SlowDown",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "Throttling",
}


def _boto3() -> Any:
    try:
        import boto3
    except ImportError:
        raise UsageError(
            "remote: object storage needs boto3: pip install 'ckpt-daemon[s3]'"
        ) from None
    return boto3


class S3Store:
    def __init__(
        self,
        remote: Remote,
        *,
        attempts: int = 6,
        backoff: float = 0.25,
        part_size: int = parts.PART_SIZE,
        threads: int = parts.THREADS,
        timeout: float = 30.0,
    ) -> None:
        boto3 = _boto3()
        from botocore.config import Config as BotoConfig

        self.remote, self.attempts, self.backoff = remote, attempts, backoff
        self.counters = Counters()
        self._lock = threading.Lock()
        self.multipart = Multipart(self.call, remote.bucket, part_size, threads, self._sent)
        self.client = boto3.session.Session().client(
            "s3",
            endpoint_url=remote.endpoint_url,
            region_name=remote.region,
            config=BotoConfig(
                retries={"max_attempts": 1, "mode": "standard"},  # ours: counted, backed off
                connect_timeout=timeout,
                read_timeout=timeout,
                max_pool_connections=threads + 2,
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
                # Over plain http botocore would also hash every body for the signature: each
                # part's SHA-256 header is signed and checked by the service against the body
                # already, which is how botocore itself sends parts over https.
                s3={"payload_signing_enabled": False},
            ),
        )

    # -- calls with retries

    def call(self, what: str, operation: str, **params: Any) -> Any:
        """`client.<operation>(**params)`, retried on transient faults with backoff."""
        from botocore.exceptions import BotoCoreError, ClientError

        method = getattr(self.client, operation)
        for attempt in range(self.attempts):
            try:
                return method(**params)
            except (ClientError, BotoCoreError) as exc:
                # BotoCoreError: connection refused or reset, timeouts; all transient
                transient = isinstance(exc, BotoCoreError) or code(exc) in _RETRYABLE_CODES
                if not transient or attempt == self.attempts - 1:
                    self._failed()
                    raise RemoteFailed(f"{what}: {_reason(exc)}") from None
            with self._lock:
                self.counters.retries += 1
            time.sleep(min(self.backoff * 2**attempt, 5.0))
        raise AssertionError("unreachable")

    def _failed(self) -> None:
        with self._lock:
            self.counters.failures += 1

    # -- the start-up check

    def probe(self, token: str) -> bool:
        """The bucket can be reached and written (RemoteFailed otherwise); returns whether it
        honours conditional writes (a second `If-None-Match: *` put of one key refused)."""
        from botocore.exceptions import ClientError

        bucket, key = self.remote.bucket, probe_key(self.remote, token)
        self.call(f"{self.remote.url}: head bucket", "head_bucket", Bucket=bucket)
        self.call(f"{self.remote.url}: write", "put_object", Bucket=bucket, Key=key, Body=b"1")
        try:
            self.client.put_object(Bucket=bucket, Key=key, Body=b"2", IfNoneMatch="*")
            honoured = False
        except ClientError as exc:
            honoured = code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict")
            if not honoured:
                raise RemoteFailed(
                    f"{self.remote.url}: conditional write: {_reason(exc)}"
                ) from None
        self.call(f"{self.remote.url}: delete", "delete_object", Bucket=bucket, Key=key)
        return honoured

    # -- reads

    def head(self, key: str) -> RemoteObject | None:
        from botocore.exceptions import ClientError

        params = {"Bucket": self.remote.bucket, "Key": key, "ChecksumMode": "ENABLED"}
        try:
            found = self.client.head_object(**params)
        except Exception as exc:  # else a transient fault: the retried call says what it was
            if isinstance(exc, ClientError) and code(exc) in ("404", "NoSuchKey", "NotFound"):
                return None
            found = self.call(f"head {key}", "head_object", **params)
        return RemoteObject(
            key=key,
            size=int(found["ContentLength"]),
            checksum=parts.reported_checksum(found),
            content_hash=found.get("Metadata", {}).get(HASH_METADATA),
        )

    def get(self, key: str) -> Iterator[bytes]:
        """The object's bytes in chunks of about 1 MiB (one in memory at a time)."""
        from botocore.exceptions import BotoCoreError

        found = self.call(f"fetch {key}", "get_object", Bucket=self.remote.bucket, Key=key)
        body = found["Body"]
        try:
            yield from body.iter_chunks(READ_CHUNK)
        except BotoCoreError as exc:
            self._failed()
            raise RemoteFailed(f"fetch {key}: {_reason(exc)}") from None
        finally:
            body.close()

    # -- writes: multipart (remote.s3_multipart), and the remote trash's deletes

    def put(self, key: str, source: Source, content_hash: str, *, conditional: bool) -> Uploaded:
        return self.multipart.put(key, source, content_hash, conditional=conditional)

    def copy(self, key: str, new_key: str, size: int) -> None:
        self.multipart.copy(key, new_key, size)

    def pending_uploads(self, prefix: str) -> list[tuple[str, str]]:
        return self.multipart.pending(prefix)

    def abort_upload(self, key: str, upload_id: str) -> None:
        self.multipart.abort(key, upload_id)

    def delete(self, key: str) -> None:
        self.call(f"delete {key}", "delete_object", Bucket=self.remote.bucket, Key=key)

    def _sent(self, size: int) -> None:
        with self._lock:
            self.counters.uploaded_bytes += size


def _reason(exc: BaseException) -> str:
    """One line, never a credential: botocore's messages name the operation and the endpoint."""
    return " ".join(str(exc).split())[:300]
