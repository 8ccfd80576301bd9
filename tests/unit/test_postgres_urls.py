"""Which PostgreSQL URLs the SQLAlchemy-free reads (`catalog.postgres_reads`) connect to, and
with what: exactly the keywords SQLAlchemy's psycopg dialect hands `psycopg.connect`, so both
paths reach the same server as the same user; every other URL is left to the Store."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from ckpt_daemon.catalog.postgres_reads import conninfo_parts


def sqlalchemys(url: str) -> dict[str, str]:
    parsed = make_url(url)
    args, keywords = parsed.get_dialect()().create_connect_args(parsed)
    assert not args
    return {k: str(v) for k, v in keywords.items()}


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://u:p%40ss%2Fw@Host.Example:5433/db",
        "postgresql+psycopg://postgres@/t1?host=/tmp/ckpt-pg/socket",
        "postgresql://u@h/db?sslmode=require&application_name=a%20b&connect_timeout=5",
        "postgresql+psycopg:///db",
        "postgresql+psycopg://[::1]:5432/db",
        "postgresql+psycopg://u:@h/db",
        "postgresql+psycopg://h/db?options=-c%20statement_timeout%3D5000",
    ],
)
def test_plain_urls_connect_as_sqlalchemy_does(url: str) -> None:
    assert conninfo_parts(url) == sqlalchemys(url)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///catalog.db",
        "postgresql+asyncpg://h/db",
        "postgresql+psycopg2://h/db",
        "postgresql+psycopg://h1:5432,h2:5432/db",  # several hosts
        "postgresql+psycopg://u@/db?host=h:5433",  # SQLAlchemy splits host:port in the query
        "postgresql+psycopg://u@h/db?host=/tmp/s",  # two hosts
        "postgresql+psycopg://u@/db?host=/a&host=/b",
        "postgresql+psycopg://h/db?pool_size=5",  # an option this path does not know
        "postgresql+psycopg://h/my%20db",  # percent-decoding of the database: the Store's
        "postgresql+psycopg://h/db#fragment",
        "postgresql+psycopg://h:notaport/db",
        "postgresql+psycopg://h/db?sslmode",  # not key=value
    ],
)
def test_other_urls_are_left_to_the_store(url: str) -> None:
    assert conninfo_parts(url) is None
