"""The `remote:` section (top level, or per root): the object store a root's checkpoints are
tiered to. Only where it is: credentials come from the standard AWS chain (environment, shared
config and credentials files, instance or role credentials), never from this file, so a key
here is refused rather than silently ignored."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..core.errors import ConfigError
from .values import mapping

REMOTE_KEYS = {"url", "endpoint_url", "region"}
# Keys people paste from other tools' configs: named, so the refusal says where they belong.
CREDENTIAL_KEYS = {
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "access_key",
    "secret_key",
    "access_key_id",
    "secret_access_key",
    "session_token",
    "password",
    "credentials",
    "profile",
}
# S3's bucket naming rules (3-63 characters, lowercase letters, digits, '.', '-').
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")


@dataclass(frozen=True)
class Remote:
    """An S3-compatible store: objects at `<prefix>/<root name>/...` in `bucket`."""

    bucket: str
    prefix: str  # without leading or trailing '/'; may be empty
    endpoint_url: str | None = None  # None: AWS
    region: str | None = None

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def object_url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"


def parse_remote(value: Any, key: str) -> Remote:
    if isinstance(value, dict):
        secret = sorted(k for k in value if str(k).lower() in CREDENTIAL_KEYS)
        if secret:
            raise ConfigError(
                f"{key}.{secret[0]}",
                "credentials never go in the config: they come from the standard AWS chain"
                " (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws/credentials,"
                " instance or role credentials)",
            )
    raw = mapping(value, key, REMOTE_KEYS)
    url = raw.get("url")
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"{key}.url", "required: s3://bucket/prefix")
    parts = urlsplit(url)
    if parts.scheme != "s3":
        raise ConfigError(f"{key}.url", f"{url!r}: expected s3://bucket/prefix")
    if parts.query or parts.fragment or "@" in parts.netloc or ":" in parts.netloc:
        raise ConfigError(f"{key}.url", f"{url!r}: only s3://bucket/prefix (no user, port, query)")
    if not _BUCKET.fullmatch(parts.netloc) or ".." in parts.netloc:
        raise ConfigError(
            f"{key}.url",
            f"{parts.netloc!r} is not an S3 bucket name (3-63 lowercase letters, digits, '.', '-')",
        )
    prefix = parts.path.strip("/")
    if any(p in ("", ".", "..") for p in prefix.split("/")) and prefix:
        raise ConfigError(f"{key}.url", f"{url!r}: the prefix has an empty, '.' or '..' part")
    return Remote(
        bucket=parts.netloc,
        prefix=prefix,
        endpoint_url=_endpoint(raw.get("endpoint_url"), f"{key}.endpoint_url"),
        region=_region(raw.get("region"), f"{key}.region"),
    )


def _endpoint(value: Any, key: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(key, "expected an http(s):// URL")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(key, f"{value!r}: expected an http(s)://host[:port] URL")
    if parts.username or parts.password:
        raise ConfigError(key, "credentials never go in the config: use the AWS chain")
    return value.rstrip("/")


def _region(value: Any, key: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not re.fullmatch(r"[a-z0-9\-]{2,32}", value):
        raise ConfigError(key, f"{value!r}: expected a region name such as us-east-1")
    return value


def distinct_keys(roots: list[tuple[Remote | None, str]]) -> None:
    """Two roots tiering to one store must not share object keys: (remote, key name) per root,
    in config order (a root's key name is its `name`, else its folder's name)."""
    seen: dict[tuple[str, str, str], int] = {}
    for i, (remote, name) in enumerate(roots):
        if remote is None:
            continue
        j = seen.setdefault((remote.url, remote.endpoint_url or "", name), i)
        if j != i:
            raise ConfigError(
                f"roots[{i}].name",
                f"roots[{i}] and roots[{j}] would share the keys {remote.url}/{name}/"
                ": give them distinct names",
            )
