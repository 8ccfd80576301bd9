"""A root that gets a `name` in a catalog that stored it by its absolute path: its rows are
rewritten to the stored form once (`core.root_names`), so the catalog keeps its history (trash
records, versions, events) instead of seeing every file as new and the old rows as gone.

Runs when the service starts (`ckpt serve`), in one transaction per root, serialized with
every other daemon that might do the same. The rows are read and written through an engine
without the path codec: what is converted is the stored text itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Table, select, update

from ..core.root_names import PathCodec
from . import db
from .schema import ARTIFACTS, CHECKPOINTS, EVENTS, RUNS, codepoint_order

# (table, its path columns, its JSON columns that may hold paths)
_PATHS: tuple[tuple[Table, tuple[str, ...], tuple[str, ...]], ...] = (
    (RUNS, ("root",), ("details",)),
    (CHECKPOINTS, ("path", "version_of"), ("details",)),
    (ARTIFACTS, ("path",), ()),
    (EVENTS, ("path",), ()),
)


def adopt_named_roots(url: str, named_roots: Mapping[str, str]) -> dict[str, int]:
    """Rewrite the rows stored under each named root's absolute path; {name: rows changed}."""
    if not named_roots:
        return {}
    engine = db.make_engine(url)  # no codec: reads and writes the stored text as it is
    try:
        changed = {}
        for name, local in named_roots.items():
            codec = PathCodec({name: local})
            with engine.begin() as conn:
                db.serialize(conn, "adopt-root", name)
                present = conn.execute(select(RUNS.c.id).where(RUNS.c.root == local)).first()
                changed[name] = _rewrite(conn, codec, local) if present is not None else 0
        return changed
    finally:
        engine.dispose()


def _rewrite(conn: Any, codec: PathCodec, local: str) -> int:
    changed = 0
    for table, path_columns, json_columns in _PATHS:
        below = None
        for column in path_columns:
            ordered = codepoint_order(table.c[column])
            inside = (table.c[column] == local) | (
                (ordered >= local + "/") & (ordered < local + "0")
            )
            below = inside if below is None else below | inside
        assert below is not None
        columns = [table.c.id, *(table.c[c] for c in (*path_columns, *json_columns))]
        for row in conn.execute(select(*columns).where(below)).all():
            values = {c: codec.stored(row._mapping[c]) for c in path_columns if row._mapping[c]}
            for c in json_columns:
                if row._mapping[c] is not None:
                    values[c] = codec.stored_tree(row._mapping[c])
            conn.execute(update(table).where(table.c.id == row[0]).values(**values))
            changed += 1
    return changed
