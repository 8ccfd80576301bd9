"""The hot reads (`dbapi_reads`) on a PostgreSQL catalog, with psycopg alone (no SQLAlchemy).

Only plain URLs get here: `postgresql://` or `postgresql+psycopg://`, user, password, host, port,
database and a few libpq options in the query, each once. SQLAlchemy hands exactly these to
`psycopg.connect` (user and password percent-decoded, the query's items as keywords), so both
paths reach the same server as the same user. Anything else (another driver, several hosts,
percent signs in the host or database, unknown options) goes to the `Store` as before, and so
does a catalog that is not at the schema head: the Store explains. A server that cannot be
reached is said at once (CatalogUnreachable): the Store would only wait for it a second time."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from ..core.errors import CatalogUnreachable
from ..core.root_names import PathCodec
from .dbapi_reads import POSTGRESQL, SCHEMA_HEAD, DbapiReads, at_head

__all__ = ["SCHEMA_HEAD", "PostgresReads", "conninfo_parts"]

_SCHEMES = ("postgresql", "postgresql+psycopg")
# libpq keywords a URL's query may carry that change nothing but where and how to connect
# (`host` in the query: a Unix socket folder, as `postgresql+psycopg://u@/db?host=/run/pg`).
_OPTIONS = frozenset(
    {
        "host",
        "port",
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "connect_timeout",
        "application_name",
        "options",
    }
)


def conninfo_parts(url: str) -> dict[str, str] | None:
    """libpq keywords for a plain PostgreSQL URL (None: leave it to the Store)."""
    try:
        parts = urlsplit(url)
        port = parts.port
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        return None
    if parts.scheme not in _SCHEMES or parts.fragment or "," in parts.netloc:
        return None
    found: dict[str, str] = {}
    for key, value in query:
        if key not in _OPTIONS or key in found or "\0" in value:
            return None
        found[key] = value
    # SQLAlchemy reads a query `host=h:p` as a host and a port; these forms are the Store's.
    if ":" in found.get("host", "") or ("host" in found and _host(parts.netloc)):
        return None
    database = parts.path[1:] if parts.path.startswith("/") else parts.path
    host = _host(parts.netloc)
    if "%" in database or "/" in database or (host and "%" in host) or "\0" in url:
        return None
    if parts.username:
        found["user"] = unquote(parts.username)
    if parts.password:  # `user:@host`: no password, as SQLAlchemy reads it
        found["password"] = unquote(parts.password)
    if host:
        found["host"] = host
    if port is not None:
        found["port"] = str(port)
    if database:
        found["dbname"] = database
    return found


def _host(netloc: str) -> str:
    """The host of a URL's `user:password@host:port` as written (urllib lowercases it)."""
    host = netloc.rpartition("@")[2]
    if host.startswith("["):  # an IPv6 address: [::1]:5432
        return host[1:].partition("]")[0]
    return host.partition(":")[0]


class PostgresReads(DbapiReads):
    """Read-only queries on one PostgreSQL catalog; `open` says whether it can serve them."""

    @classmethod
    def open(cls, url: str, codec: PathCodec | None = None) -> PostgresReads | None:
        """A reader for `url` if it is a plain PostgreSQL URL of a catalog at the schema head
        that answers, else None. `codec`: the config's named roots."""
        keywords = conninfo_parts(url)
        if keywords is None:
            return None
        import psycopg  # ~0.15 s: only for a PostgreSQL catalog
        from psycopg.conninfo import make_conninfo

        connection: Any
        try:
            # Autocommit: each method opens its own read-only transaction (`Dialect.begin`).
            connection = psycopg.connect(make_conninfo(**keywords), autocommit=True)
        except psycopg.OperationalError as exc:
            # The Store would reach the same server the same way (`conninfo_parts`): said here
            # at once, rather than after a second connect timeout by the Store.
            where = f"database {keywords.get('dbname', '?')} on {keywords.get('host', 'localhost')}"
            detail = " ".join(str(exc).split())
            raise CatalogUnreachable(f"cannot connect to the catalog ({where}): {detail}") from None
        except psycopg.Error:
            return None  # the Store connects again and says why
        if not at_head(connection):
            connection.close()
            return None
        return cls(connection, POSTGRESQL, codec)
