"""`--run R` on PostgreSQL can be answered from an index on runs.name in code point order
(bench/fleet_catalog.py: on 20,000 runs the filter was a sequential scan of `runs`, 11 ms of the
query's 11.2 ms): both arms of `store_reads.in_run` (R itself, and the runs below R) compare in
that order, so one such index serves both. The index is created here as migration 0007 is to
create it (IF NOT EXISTS: a no-op once it does)."""

from __future__ import annotations

import pytest
from sqlalchemy import select, text

from ckpt_daemon.catalog import db
from ckpt_daemon.catalog.schema import RUNS
from ckpt_daemon.catalog.store import Store
from ckpt_daemon.catalog.store_reads import in_run

N_RUNS = 2_000


@pytest.mark.parametrize("catalog_url", ["postgresql"], indirect=True)
def test_the_run_filter_uses_an_index_on_run_names_in_code_point_order(catalog_url: str) -> None:
    Store(catalog_url).close()
    engine = db.make_engine(catalog_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO runs (root, name, created_at) SELECT '/data/exp', "
                    "'run-' || lpad(g::text, 5, '0'), '2025-12-01T00:00:00.000Z' "
                    "FROM generate_series(1, :n) g"
                ),
                {"n": N_RUNS},
            )
            conn.execute(  # a run below run-01000, and siblings sharing its prefix
                text(
                    "INSERT INTO runs (root, name, created_at) VALUES "
                    "('/data/exp', 'run-01000/fold1', 'x'), ('/data/exp', 'run-010000', 'x'), "
                    "('/data/exp', 'run-01000-b', 'x')"
                )
            )
            conn.execute(
                text('CREATE INDEX IF NOT EXISTS ix_runs_name_codepoint ON runs (name COLLATE "C")')
            )
            conn.execute(text("ANALYZE runs"))
        query = select(RUNS.c.name).where(in_run("run-01000")).order_by(RUNS.c.name)
        with engine.begin() as conn:
            conn.execute(text("SET LOCAL enable_seqscan = off"))  # any index that can serve
            sql = str(query.compile(conn, compile_kwargs={"literal_binds": True}))
            plan = "\n".join(r[0] for r in conn.execute(text("EXPLAIN " + sql)))
            found = conn.execute(query).scalars().all()
        assert found == ["run-01000", "run-01000/fold1"]
        # Each arm from the code point index: not a scan of runs, nor a whole walk of the
        # (root, name) index, which is all an equality in the database's collation can use.
        assert "Seq Scan on runs" not in plan, plan
        assert "uq_runs_root_name" not in plan, plan
        assert plan.count("Index Cond") == 2 and "ix_runs_name_codepoint" in plan, plan
    finally:
        engine.dispose()
