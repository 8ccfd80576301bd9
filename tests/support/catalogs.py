"""Catalog URLs on both backends, and plain SQL on either (what a test inspects or edits).

`catalog_urls` backs the parametrized `catalog_url` fixture: an SQLite file that the first
`Store(url)` creates and migrates with Alembic, or a PostgreSQL database at head copied from
the session server's template (`tests.support.postgres`), dropped after the test.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

BACKENDS = ("sqlite", "postgresql")


def catalog_urls(request: pytest.FixtureRequest, tmp_path: Path, *, at_head: bool) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'catalog.db'}"
        return
    server = request.getfixturevalue("postgres")
    url = server.fresh_url(at_head=at_head)
    try:
        yield url
    finally:
        server.drop(url)


def sql(url: str, statement: str, params: Mapping[str, Any] | None = None) -> list[Any]:
    """Run one statement (`:name` parameters) on the catalog at `url` in its own transaction;
    the rows it returns (empty for a write)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            result = conn.execute(text(statement), dict(params or {}))
            return list(result.all()) if result.returns_rows else []
    finally:
        engine.dispose()


def tables(url: str) -> set[str]:
    from sqlalchemy import create_engine, inspect

    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
