"""One way into the catalog: `Store` owns the engine (no Engine outside `catalog/`), events are
written by one function, `details` patched by one, the clock and the actor read in one place,
and the store returns typed records while the CLI's JSON stays as documented.

The source checks read the package's code (as tests/test_architecture.py does); the behaviour
checks use a real SQLite catalog and the real CLI in a subprocess."""

from __future__ import annotations

import ast
import json
import os
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ckpt_daemon.catalog.audit import patch_details
from ckpt_daemon.catalog.store import Store
from ckpt_daemon.catalog.store_recovery import PlannedEvent, RowState
from ckpt_daemon.core.model import (
    AuditEvent,
    CheckpointStatus,
    FileStat,
    Heartbeat,
    IndexRecord,
    TrashedCheckpoint,
)

PACKAGE = Path(__file__).resolve().parents[2] / "daemon"
AUDIT = PACKAGE / "catalog" / "audit.py"


def sources() -> dict[Path, str]:
    return {p: p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


def outside_catalog() -> dict[Path, str]:
    return {p: s for p, s in sources().items() if p.parent.name != "catalog"}


# ---- the source: one way in ----


def test_no_engine_leaves_the_catalog() -> None:
    """No module outside catalog/ names an engine, touches `Store._engine`, or calls the
    catalog's engine-level functions: it holds a Store (or calls db with a URL)."""
    engine_level = {"make_engine", "current_revision", "ensure_schema", "_alembic"}
    found = []
    for path, text in outside_catalog().items():
        for node in ast.walk(ast.parse(text)):
            name = (
                node.attr
                if isinstance(node, ast.Attribute)
                else node.id
                if isinstance(node, ast.Name)
                else None
            )
            if name is not None and (name.lower() in ("engine", "_engine") or name in engine_level):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {name}")
            if isinstance(node, ast.ImportFrom) and any(
                a.name in ("Engine", *engine_level, "store_reads") for a in node.names
            ):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: imports an engine")
    assert found == []


def test_events_are_written_by_one_function() -> None:
    """Every INSERT into (and UPDATE of) the events table is in catalog/audit.py."""
    writers = []
    for path, text in sources().items():
        for node in ast.walk(ast.parse(text)):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("insert", "update")
                and node.args
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id in ("events", "EVENTS")
            ):
                writers.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert writers and all(w.startswith("catalog/audit.py:") for w in writers), writers
    assert "INSERT INTO events" not in "".join(sources().values())


def test_details_clock_and_actor_each_have_one_home() -> None:
    """A checkpoint's `details` JSON is read-modified-written only by audit.patch_details; the
    catalog reads the clock and learns the actor and this process only in audit.py."""
    for path, text in sources().items():
        where = path.relative_to(PACKAGE)
        if path == AUDIT:
            continue
        assert _details_updates(text) == [], where
        assert "def actor(" not in text and "def utc_now(" not in text, where
        if path.parent.name == "catalog":
            assert ".now(" not in text and "gethostname()" not in text, where


def _details_updates(text: str) -> list[int]:
    """Lines of `update(checkpoints)....values(details=...)`: a write of a row's `details`."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "values"
            and any(k.arg == "details" for k in node.keywords)
        ):
            continue
        inner: ast.expr = node.func.value
        while isinstance(inner, ast.Call | ast.Attribute):
            if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name):
                table = ast.unparse(inner.args[0]) if inner.args else ""
                if inner.func.id == "update" and table in ("checkpoints", "CHECKPOINTS"):
                    found.append(node.lineno)  # (runs.details is the run's, not a row's)
                break
            inner = inner.func if isinstance(inner, ast.Call) else inner.value
    return found


def test_the_store_has_no_public_engine(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'catalog.db'}")
    try:
        assert not hasattr(store, "engine")
    finally:
        store.close()


# ---- behaviour on a real catalog ----


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(f"sqlite:///{tmp_path / 'state' / 'catalog.db'}")
    yield opened
    opened.close()


def index(store: Store, root: Path, name: str, digest: str = "h") -> int:
    return store.index.record(
        IndexRecord(
            path=str(root / "run" / name),
            root=str(root),
            run="run",
            status=CheckpointStatus.OK,
            reason=None,
            stat=FileStat(10, 1, 1),
            hash=digest,
        ),
        actor_name="tester@here",
        at="2026-01-01T00:00:00.000Z",
    )


def rows(db: Path, sql: str, *args: Any) -> list[sqlite3.Row]:
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        return conn.execute(sql, args).fetchall()


def test_patch_details_sets_drops_and_keeps_the_rest(store: Store, tmp_path: Path) -> None:
    ckpt = index(store, tmp_path, "a.h5")
    db = tmp_path / "state" / "catalog.db"
    engine = store._engine  # the catalog layer's own view, as its modules use it
    with engine.begin() as conn:
        assert patch_details(conn, ckpt, {"codec": "gzip", "trash": {"at": "x"}}, hash="new")
    with engine.begin() as conn:  # a status condition that does not hold: nothing changes
        assert not patch_details(conn, ckpt, {"codec": "lzf"}, only_if_status="trashed")
    with engine.begin() as conn:
        assert patch_details(conn, ckpt, drop=("trash",), only_if_status="ok", reason="r")
    with engine.begin() as conn:
        assert not patch_details(conn, 10**6, {"codec": "x"})
    (row,) = rows(db, "SELECT details, hash, reason FROM checkpoints WHERE id = ?", ckpt)
    details = json.loads(row["details"])
    assert details["codec"] == "gzip" and "trash" not in details
    assert details["metric_sources"] == {} and details["notes"] == []  # the indexer's keys stay
    assert (row["hash"], row["reason"]) == ("new", "r")


def test_every_event_has_one_shape(store: Store, tmp_path: Path) -> None:
    """Index, pin, an audited act and a claim write through one writer: the same columns,
    and the process (host, pid) on the planned ones that recovery may have to settle."""
    ckpt = index(store, tmp_path, "a.h5")
    store.acts.set_pinned(ckpt, True, "tester@here")
    store.acts.set_pinned(ckpt, False, "tester@here")
    with store.acts.audited(
        action="split", checkpoint_id=ckpt, path="p", reason=None, size=10, actor="tester@here"
    ):
        (planned,) = store.recovery.planned_events()
        assert isinstance(planned, PlannedEvent)
        assert (planned.action, planned.host, planned.pid) == (
            "split",
            socket.gethostname(),
            os.getpid(),
        )
    event_id, why = store.acts.claim(
        ckpt, action="trash", reason="old", actor="tester@here", trash={}
    )
    assert event_id is not None and why == ""
    store.acts.end_claim(event_id, ckpt, failed="disk full")  # the row gets its status back
    state = store.recovery.row_state(ckpt)
    assert isinstance(state, RowState) and state.status == "ok" and state.trash is None
    db = tmp_path / "state" / "catalog.db"
    events = rows(db, "SELECT * FROM events ORDER BY id")
    assert [(e["action"], e["state"]) for e in events] == [
        ("indexed", "done"),
        ("pin", "done"),
        ("unpin", "done"),
        ("split", "done"),
        ("trash", "failed"),
    ]
    assert {e["actor"] for e in events} == {"tester@here"}
    assert all(e["at"].endswith("Z") and e["at"][:2] == "20" for e in events)
    assert [e["pid"] for e in events] == [None, None, None, os.getpid(), os.getpid()]
    logged = store.acts.audit_log(limit=2)
    assert all(isinstance(e, AuditEvent) for e in logged)
    assert [e.action for e in logged] == ["split", "trash"]


def test_typed_results_and_the_cli_json_they_become(workspace: Any, tmp_path: Path) -> None:
    """`trash list --json` and `log --json` print what the rows say, with the documented keys
    in their order (built by core.views from the store's typed records)."""
    db = workspace.base / "state" / "catalog.db"
    store = Store(f"sqlite:///{db}")
    try:
        ckpt = index(store, workspace.root, "a.h5")
        trash = {
            "paths": ["/t/a.h5"],
            "at": "2026-01-02T00:00:00.000Z",
            "batch": "b",
            "members": ["/m"],
        }
        event_id, _why = store.acts.claim(
            ckpt, action="trash", reason="old", actor="tester@here", trash=trash
        )
        assert event_id is not None
        store.acts.end_claim(event_id, ckpt)
        (item,) = store.acts.trashed()
        assert isinstance(item, TrashedCheckpoint) and item.trash_paths == ["/t/a.h5"]
        store.daemons.beat(None, pid=1, host="h", started_at="s", state={"roots": []})
        beat = store.reads.latest_heartbeat()
        assert isinstance(beat, Heartbeat) and (beat.pid, beat.state) == (1, {"roots": []})
    finally:
        store.close()

    def cli(*args: str) -> Any:
        done = subprocess.run(
            [sys.executable, "-m", "ckpt_daemon", "--config", str(workspace.config), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    (listed,) = cli("trash", "list", "--json")
    assert list(listed) == [
        "id", "path", "run", "root", "bytes", "reason", "pinned", "paths", "at", "batch", "members"
    ]  # fmt: skip
    (row,) = rows(db, "SELECT * FROM checkpoints")
    assert listed == {
        "id": row["id"],
        "path": row["path"],
        "run": "run",
        "root": str(workspace.root),
        "bytes": row["size_bytes"],
        "reason": row["reason"],
        "pinned": False,
        **json.loads(row["details"])["trash"],
    }
    logged = cli("log", "--json")
    keys = [
        "id",
        "at",
        "action",
        "state",
        "checkpoint_id",
        "run",
        "path",
        "reason",
        "bytes",
        "actor",
        "node",
    ]
    assert [list(e) for e in logged] == [keys, keys]
    events = rows(db, "SELECT * FROM events ORDER BY id")
    assert logged == [{**{k: e[k] for k in keys if k != "run"}, "run": "run"} for e in events]
