"""A root that gets a `name` in a catalog that stored it by its absolute path: its rows are
rewritten to the stored form once (`core.root_names`), so the catalog keeps its history (trash
records, versions, events) instead of seeing every file as new and the old rows as gone.

Runs whenever a `Store` opens with named roots (so no command can index a named root's files
anew beside their old rows), in one transaction per root that has old rows, serialized with
every other process that might do the same. The stored text itself is read and compared
(`type_coerce`: the path codec stays out).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import JSON, Engine, Table, Text, or_, select, type_coerce, update

from ..core.root_names import PathCodec
from . import db
from .schema import ARTIFACTS, CHECKPOINTS, EVENTS, RUNS, CatalogJSON, at_or_below

# (table, its path columns, its JSON columns that may hold paths)
_PATHS: tuple[tuple[Table, tuple[str, ...], tuple[str, ...]], ...] = (
    (RUNS, ("root",), ("details",)),
    (CHECKPOINTS, ("path", "version_of"), ("details",)),
    (ARTIFACTS, ("path",), ()),
    (EVENTS, ("path",), ()),
)


def adopt_named_roots(engine: Engine, named_roots: Mapping[str, str]) -> dict[str, int]:
    """Rewrite the rows stored under each named root's absolute path; {name: rows changed}.
    A read-only check per root first (the common case: nothing to do)."""
    changed = {}
    for name, local in named_roots.items():
        old = select(RUNS.c.id).where(_raw(RUNS.c.root) == local).limit(1)
        with engine.connect().execution_options(**db.READONLY) as conn:
            if conn.execute(old).first() is None:
                continue
        with engine.begin() as conn:
            db.serialize(conn, "adopt-root", name)
            if conn.execute(old).first() is not None:  # not done by another process meanwhile
                changed[name] = _rewrite(conn, PathCodec({name: local}), local)
    return changed


def _raw(column: Any) -> Any:
    """The column as stored: no path codec on its value or on what it is compared with."""
    return type_coerce(column, JSON if isinstance(column.type, CatalogJSON) else Text)


def _rewrite(conn: Any, codec: PathCodec, local: str) -> int:
    changed = 0
    for table, path_columns, json_columns in _PATHS:
        below = or_(*(at_or_below(_raw(table.c[column]), local) for column in path_columns))
        columns = [_raw(table.c[c]).label(c) for c in (*path_columns, *json_columns)]
        for row in conn.execute(select(table.c.id, *columns).where(below)).all():
            values = {c: codec.stored(row._mapping[c]) for c in path_columns if row._mapping[c]}
            for c in json_columns:
                if row._mapping[c] is not None:
                    values[c] = codec.stored_tree(row._mapping[c])
            # Written through the codec, which leaves stored forms as they are.
            conn.execute(update(table).where(table.c.id == row.id).values(**values))
            changed += 1
    return changed
