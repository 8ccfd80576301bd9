"""Server-side copies in the store (the remote trash: a copy given up moves under the trash
prefix, and back on `ckpt trash restore`): the bytes never leave the service. Through
`ObjectStore.call`, so retried, counted and one-line on failure like every other call."""

from __future__ import annotations

from ..core.errors import RemoteFailed
from .s3 import ObjectStore

COPY_LIMIT = 5 << 30  # CopyObject's own limit: a multipart copy of ranges above it
COPY_PART = 512 << 20


def copy(
    objects: ObjectStore, key: str, new_key: str, size: int, *, limit: int = COPY_LIMIT
) -> None:
    """A server-side copy of `key` at `new_key`, its metadata kept (the bytes never come
    here): one `CopyObject` up to 5 GiB, a multipart copy of 512 MiB ranges above."""
    source = {"Bucket": objects.remote.bucket, "Key": key}
    if size <= limit:
        objects.call(
            f"copy {key}",
            "copy_object",
            Bucket=objects.remote.bucket,
            Key=new_key,
            CopySource=source,
            MetadataDirective="COPY",
        )
        return
    found = objects.call(f"copy {key}", "head_object", Bucket=objects.remote.bucket, Key=key)
    upload_id = objects.call(
        f"copy {key}",
        "create_multipart_upload",
        Bucket=objects.remote.bucket,
        Key=new_key,
        Metadata=found.get("Metadata", {}),
    )["UploadId"]
    try:
        parts = []
        for number, offset in enumerate(range(0, size, COPY_PART), start=1):
            last = min(size, offset + COPY_PART) - 1
            done = objects.call(
                f"copy {key} part {number}",
                "upload_part_copy",
                Bucket=objects.remote.bucket,
                Key=new_key,
                UploadId=upload_id,
                PartNumber=number,
                CopySource=source,
                CopySourceRange=f"bytes={offset}-{last}",
            )
            parts.append({"PartNumber": number, "ETag": done["CopyPartResult"]["ETag"]})
        objects.call(
            f"copy {key}",
            "complete_multipart_upload",
            Bucket=objects.remote.bucket,
            Key=new_key,
            UploadId=upload_id,
            MultipartUpload={"Parts": parts},
        )
    except RemoteFailed:
        objects.abort(new_key, upload_id)  # nothing half-copied is left behind
        raise
