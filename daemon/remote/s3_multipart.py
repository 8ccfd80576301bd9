"""S3's multipart calls, for `remote.s3`: an upload sent in parts by a few threads and resumed
after a kill, and a server-side copy in ranges above CopyObject's 5 GiB. Every call goes through
the store's retried `call`; no boto3 here (the adapter owns the client).

An upload's parts (`remote.parts`) are read once, in order, into reused buffers and hashed with
our BLAKE3 as they are read, then sent by a few threads (memory bounded by threads x part
size), each with the SHA-256 we computed so the service checks every part on arrival; the
upload is completed with `If-None-Match: *` where the service honours it (an object already at
the content-stable key is the same bytes: it is verified, not overwritten). A killed upload is
never completed, so nothing appears under the final key; the next upload of the key resumes it
(parts whose size and MD5 ETag match are kept) and a daemon's start aborts what is left.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..core.errors import Refused, RemoteFailed
from . import parts
from .keys import HASH_METADATA
from .sources import Source
from .store import Uploaded

COPY_LIMIT = 5 << 30  # CopyObject's own limit: a multipart copy of ranges above it
COPY_PART = 512 << 20
_PRECONDITION = ("PreconditionFailed", "412")


def code(exc: Any) -> str:
    """The service's error code of a botocore error (its HTTP status when it names none)."""
    error = getattr(exc, "response", {}).get("Error", {})
    return str(error.get("Code", "")) or str(
        getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode", "")
    )


class Multipart:
    def __init__(
        self,
        call: Callable[..., Any],
        bucket: str,
        part_size: int,
        threads: int,
        sent: Callable[[int], None],
    ) -> None:
        self.call, self.bucket, self.part_size, self.threads = call, bucket, part_size, threads
        self.sent = sent  # counts the bytes each part sent

    def _on(self, what: str, operation: str, key: str, **params: Any) -> Any:
        """`operation` on `key` in our bucket, through the store's retried `call`."""
        return self.call(what, operation, Bucket=self.bucket, Key=key, **params)

    def _create(self, what: str, key: str, metadata: dict[str, str], **params: Any) -> str:
        """A new multipart upload of `key` carrying `metadata`: its upload id."""
        answer = self._on(what, "create_multipart_upload", key, Metadata=metadata, **params)
        return str(answer["UploadId"])

    def _finish(
        self, what: str, key: str, upload_id: str, done: list[dict[str, Any]], **params: Any
    ) -> None:
        """Complete the upload of `key` from its parts `done` ({PartNumber, ETag, ...})."""
        params["MultipartUpload"] = {"Parts": done}
        self._on(what, "complete_multipart_upload", key, UploadId=upload_id, **params)

    def put(self, key: str, source: Source, content_hash: str, *, conditional: bool) -> Uploaded:
        """Send `source` as `key`, or keep the identical object already there. The parts must
        hash to `content_hash` (Refused otherwise, nothing completed: the store is not at
        fault). A source streams the same bytes every time, so a killed upload is resumed."""
        size = source.size
        part_size = parts.part_size_for(size, self.part_size)
        count = max(1, -(-size // part_size))
        threads = parts.threads_for(part_size, self.threads, self.part_size)
        upload_id, have = self._resumable(key)
        if upload_id is None:
            metadata = {HASH_METADATA: content_hash}
            upload_id = self._create(f"upload {key}", key, metadata, ChecksumAlgorithm="SHA256")
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
        answer = self._on(
            f"upload {key} part {number}",
            "upload_part",
            key,
            UploadId=upload_id,
            PartNumber=number,
            Body=data,
            ChecksumAlgorithm="SHA256",
            ChecksumSHA256=parts.encoded(digest),
        )
        self.sent(len(data))
        return str(answer["ETag"]).strip('"')

    def _complete(
        self, key: str, upload_id: str, etags: list[str], digests: list[bytes], conditional: bool
    ) -> bool:
        """Completes the upload; True when `If-None-Match` found an object at the key (the
        upload aborted, the object left as it was)."""
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
            self._finish(f"complete {key}", key, upload_id, completed, **extra)
            return False
        except RemoteFailed as exc:
            cause = exc.__context__  # the botocore error the retried call gave up on
            if (cause is not None and code(cause) in _PRECONDITION) or (
                "PreconditionFailed" in str(exc) or "pre-conditions" in str(exc)
            ):
                self.abort(key, upload_id)  # the key's content is ours already: verified next
                return True
            raise

    def _resumable(self, key: str) -> tuple[str | None, dict[int, tuple[int, str]]]:
        """An upload of `key` a killed process left, with its parts {number: (size, md5)}."""
        for found_key, upload_id in self.pending(key):
            if found_key != key:
                continue
            have: dict[int, tuple[int, str]] = {}
            marker = 0
            while True:
                page = self._on(
                    f"resume {key}", "list_parts", key, UploadId=upload_id, PartNumberMarker=marker
                )
                for part in page.get("Parts", []):
                    have[part["PartNumber"]] = (part["Size"], part["ETag"].strip('"'))
                if not page.get("IsTruncated"):
                    return upload_id, have
                marker = page["NextPartNumberMarker"]
        return None, {}

    def pending(self, prefix: str) -> list[tuple[str, str]]:
        """Multipart uploads not completed under `prefix`: [(key, upload id)]."""
        found: list[tuple[str, str]] = []
        params: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        while True:
            page = self.call(f"list uploads {prefix}", "list_multipart_uploads", **params)
            found += [(u["Key"], u["UploadId"]) for u in page.get("Uploads", [])]
            if not page.get("IsTruncated"):
                return found
            params["KeyMarker"] = page["NextKeyMarker"]
            params["UploadIdMarker"] = page["NextUploadIdMarker"]

    def abort(self, key: str, upload_id: str) -> None:
        self._on(f"abort {key}", "abort_multipart_upload", key, UploadId=upload_id)

    def copy(self, key: str, new_key: str, size: int, *, limit: int = COPY_LIMIT) -> None:
        """A server-side copy of `key` at `new_key`, its metadata kept (the bytes never come
        here): one `CopyObject` up to 5 GiB, a multipart copy of 512 MiB ranges above."""
        source = {"Bucket": self.bucket, "Key": key}
        if size <= limit:
            self._on(
                f"copy {key}", "copy_object", new_key, CopySource=source, MetadataDirective="COPY"
            )
            return
        found = self._on(f"copy {key}", "head_object", key)
        upload_id = self._create(f"copy {key}", new_key, found.get("Metadata", {}))
        try:
            copied = []
            for number, offset in enumerate(range(0, size, COPY_PART), start=1):
                last = min(size, offset + COPY_PART) - 1
                done = self._on(
                    f"copy {key} part {number}",
                    "upload_part_copy",
                    new_key,
                    UploadId=upload_id,
                    PartNumber=number,
                    CopySource=source,
                    CopySourceRange=f"bytes={offset}-{last}",
                )
                copied.append({"PartNumber": number, "ETag": done["CopyPartResult"]["ETag"]})
            self._finish(f"copy {key}", new_key, upload_id, copied)
        except RemoteFailed:
            self.abort(new_key, upload_id)  # nothing half-copied is left behind
            raise
