"""The only boto3 import (an optional extra: `pip install 'ckpt-daemon[s3]'`), loaded when a
remote is first used. Credentials are boto3's standard chain; we never read, store or log them.

Uploads are multipart, always: the parts (`remote.parts`) read once, in order, into reused
buffers and hashed with our BLAKE3 as they are read, then sent by a few threads (memory bounded
by threads x part size), each with the SHA-256 we computed so the service checks every part on
arrival; the upload is completed with `If-None-Match: *` where the service honours it (an object
already at the content-stable key is the same bytes: it is verified, not overwritten). A killed
upload is never completed, so nothing appears under the final key; the next upload of the key
resumes it (parts whose size and MD5 ETag match are kept) and a daemon's start aborts what is
left (`stale_uploads`). Every call is retried with exponential backoff on connection errors,
timeouts, 5xx and SlowDown; what still fails raises `RemoteFailed`.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import Refused, RemoteFailed, UsageError
from ..settings.remote import Remote
from . import parts
from .keys import HASH_METADATA, probe_key
from .sources import FileSource, Source

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


@dataclass(frozen=True)
class RemoteObject:
    key: str
    size: int
    checksum: str | None  # the service's own (composite for multipart), `sha256:<base64>`
    content_hash: str | None  # our BLAKE3, from the object's metadata
    etag: str


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


def _boto3() -> Any:
    try:
        import boto3
    except ImportError:
        raise UsageError(
            "remote: object storage needs boto3: pip install 'ckpt-daemon[s3]'"
        ) from None
    return boto3


class ObjectStore:
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
        self.part_size, self.threads = part_size, threads
        self.counters = Counters()
        self._lock = threading.Lock()
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
            except ClientError as exc:
                if code(exc) not in _RETRYABLE_CODES or attempt == self.attempts - 1:
                    self._failed()
                    raise RemoteFailed(f"{what}: {_reason(exc)}") from None
            except BotoCoreError as exc:  # connection refused or reset, timeouts
                if attempt == self.attempts - 1:
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
        except ClientError as exc:
            if code(exc) in ("404", "NoSuchKey", "NotFound"):
                return None
            found = self.call(f"head {key}", "head_object", **params)
        except Exception:  # a transient fault: the retried call says what it was
            found = self.call(f"head {key}", "head_object", **params)
        return RemoteObject(
            key=key,
            size=int(found["ContentLength"]),
            checksum=parts.reported_checksum(found),
            content_hash=found.get("Metadata", {}).get(HASH_METADATA),
            etag=str(found.get("ETag", "")).strip('"'),
        )

    def download(self, key: str) -> Iterator[bytes]:
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

    # -- uploads

    def upload(
        self,
        key: str,
        path: Path,
        root: Path,
        content_hash: str,
        *,
        conditional: bool,
        on_part: Callable[[int], None] | None = None,
    ) -> Uploaded:
        """The file at `path` (beneath `root`, no symlink followed) as `key`: `upload_source`."""
        source = FileSource(path, root)
        try:
            return self.upload_source(
                key, source, content_hash, conditional=conditional, on_part=on_part
            )
        finally:
            source.close()

    def upload_source(
        self,
        key: str,
        source: Source,
        content_hash: str,
        *,
        conditional: bool,
        on_part: Callable[[int], None] | None = None,
    ) -> Uploaded:
        """Send `source` (a file, or the tar of a checkpoint's files) as `key`, or keep the
        identical object already there. `content_hash` (the catalog's) goes into the metadata;
        the parts are read once, in order, and the source hashes them as they are read: they
        must hash to it (Refused otherwise, nothing completed: the store is not at fault). A
        source streams the same bytes every time, so a killed upload's parts are resumed."""
        size = source.size
        part_size = parts.part_size_for(size, self.part_size)
        count = max(1, -(-size // part_size))
        threads = parts.threads_for(part_size, self.threads, self.part_size)
        upload_id, have = self._resumable(key)
        if upload_id is None:
            upload_id = self.call(
                f"upload {key}",
                "create_multipart_upload",
                Bucket=self.remote.bucket,
                Key=key,
                ChecksumAlgorithm="SHA256",
                Metadata={HASH_METADATA: content_hash},
            )["UploadId"]
        digests: list[bytes] = [b""] * count
        etags: list[str] = [""] * count
        resumed = [0]
        # One buffer per thread, reused part after part: memory is threads x part size (a
        # file of one part: its size).
        free: queue.Queue[bytearray] = queue.Queue()
        for _ in range(min(threads, count)):
            free.put(bytearray(min(part_size, size)))
        failed = threading.Event()

        def send(number: int, data: bytearray) -> None:
            try:
                digest = parts.part_digest(data)
                kept = have.get(number)
                md5 = None  # only to compare with a killed upload's part (its ETag)
                if kept is not None and kept[0] == len(data):
                    md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
                if kept is not None and kept == (len(data), md5):
                    resumed[0] += 1
                    etag = kept[1]
                else:
                    etag = self._send_part(key, upload_id, number, data, digest)
                digests[number - 1], etags[number - 1] = digest, etag
                if on_part is not None:
                    on_part(len(data))
            except BaseException:
                failed.set()
                raise
            finally:
                free.put(data)

        with ThreadPoolExecutor(threads, thread_name_prefix="ckpt-upload") as pool:
            futures: list[Future[None]] = []
            for number, data in enumerate(parts.read_parts(source, part_size, free), 1):
                if failed.is_set():
                    break  # a part failed after its retries: raised below
                futures.append(pool.submit(send, number, data))
            for future in futures:
                future.result()
        if source.content_hash() != content_hash or source.changed() or not all(etags):
            self.abort(key, upload_id)  # the local file's doing, not the store's: Refused
            raise Refused(
                f"{source.label}: the bytes read are not the ones indexed (changed before"
                f" or while it was sent): the upload of {key} aborted, the files kept"
            )
        existing = self._complete(key, upload_id, etags, digests, conditional)
        checksum = parts.composite(digests)
        return Uploaded(key, size, checksum, content_hash, count, resumed[0], existing)

    def _send_part(
        self, key: str, upload_id: str, number: int, data: bytearray, digest: bytes
    ) -> str:
        answer = self.call(
            f"upload {key} part {number}",
            "upload_part",
            Bucket=self.remote.bucket,
            Key=key,
            UploadId=upload_id,
            PartNumber=number,
            Body=data,
            ChecksumAlgorithm="SHA256",
            ChecksumSHA256=parts.encoded(digest),
        )
        with self._lock:
            self.counters.uploaded_bytes += len(data)
        return str(answer["ETag"]).strip('"')

    def _complete(
        self, key: str, upload_id: str, etags: list[str], digests: list[bytes], conditional: bool
    ) -> bool:
        """Completes the upload; True when `If-None-Match` found an object at the key (the
        upload aborted, the object left as it was)."""
        from botocore.exceptions import ClientError

        completed = [
            {
                "PartNumber": i + 1,
                "ETag": f'"{etag}"',
                "ChecksumSHA256": parts.encoded(d),
            }
            for i, (etag, d) in enumerate(zip(etags, digests, strict=True))
        ]
        extra = {"IfNoneMatch": "*"} if conditional else {}
        try:
            self.call(
                f"complete {key}",
                "complete_multipart_upload",
                Bucket=self.remote.bucket,
                Key=key,
                UploadId=upload_id,
                MultipartUpload={"Parts": completed},
                **extra,
            )
            return False
        except RemoteFailed as exc:
            cause = exc.__context__
            if isinstance(cause, ClientError) and code(cause) in ("PreconditionFailed", "412"):
                self.abort(key, upload_id)  # the key's content is ours already: verified next
                return True
            if "PreconditionFailed" in str(exc) or "pre-conditions" in str(exc):
                self.abort(key, upload_id)
                return True
            raise

    def _resumable(self, key: str) -> tuple[str | None, dict[int, tuple[int, str]]]:
        """An upload of `key` a killed process left, with its parts {number: (size, md5)}."""
        for found_key, upload_id in self.uploads(key):
            if found_key != key:
                continue
            have: dict[int, tuple[int, str]] = {}
            marker = 0
            while True:
                page = self.call(
                    f"resume {key}",
                    "list_parts",
                    Bucket=self.remote.bucket,
                    Key=key,
                    UploadId=upload_id,
                    PartNumberMarker=marker,
                )
                for part in page.get("Parts", []):
                    have[part["PartNumber"]] = (part["Size"], part["ETag"].strip('"'))
                if not page.get("IsTruncated"):
                    return upload_id, have
                marker = page["NextPartNumberMarker"]
        return None, {}

    def uploads(self, prefix: str) -> list[tuple[str, str]]:
        """Multipart uploads not completed under `prefix`: [(key, upload id)]."""
        found: list[tuple[str, str]] = []
        params: dict[str, Any] = {"Bucket": self.remote.bucket, "Prefix": prefix}
        while True:
            page = self.call(f"list uploads {prefix}", "list_multipart_uploads", **params)
            found += [(u["Key"], u["UploadId"]) for u in page.get("Uploads", [])]
            if not page.get("IsTruncated"):
                return found
            params["KeyMarker"] = page["NextKeyMarker"]
            params["UploadIdMarker"] = page["NextUploadIdMarker"]

    def abort(self, key: str, upload_id: str) -> None:
        self.call(
            f"abort {key}",
            "abort_multipart_upload",
            Bucket=self.remote.bucket,
            Key=key,
            UploadId=upload_id,
        )

    # -- deletes (the remote trash; its server-side copies: remote.copies)

    def delete(self, key: str) -> None:
        self.call(f"delete {key}", "delete_object", Bucket=self.remote.bucket, Key=key)


def code(exc: Any) -> str:
    error = getattr(exc, "response", {}).get("Error", {})
    return str(error.get("Code", "")) or str(
        getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode", "")
    )


def _reason(exc: BaseException) -> str:
    """One line, never a credential: botocore's messages name the operation and the endpoint."""
    return " ".join(str(exc).split())[:300]
