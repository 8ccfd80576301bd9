"""A real PostgreSQL server for the catalog tests, started by the suite itself.

One server per test process (each xdist worker has its own), in a short temporary folder (the
Unix socket's path must fit 107 bytes), listening on that socket only. It comes from `pgserver`
(the `test` extra: a wheel with the PostgreSQL binaries), or from `initdb`/`pg_ctl` on PATH when
that is missing. Never skipped: if no server starts, the tests that need one fail with why.

Each test gets its own database, copied from a template already migrated to head (CREATE
DATABASE ... TEMPLATE: a file copy, ~50 ms, instead of running the migrations again), dropped
at the test's end (WITH (FORCE): a child process of a failed test may still hold a connection).
"""

from __future__ import annotations

import atexit
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

HEAD_TEMPLATE = "ckpt_head"  # a catalog at the schema head: what Store(url) would have made
SCHEME = "postgresql+psycopg"
START_TIMEOUT_S = 120  # a loaded 2-core machine: generous, never a flake


class PostgresServer:
    """One running server; `fresh_url()` gives a new database on it, `stop()` ends it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._names = itertools.count(1)
        self._stop: Any = None
        self.socket_dir, self.how = self._start()
        self._tune()
        self._make_head_template()

    # ---- databases ----

    def url(self, database: str) -> str:
        return f"{SCHEME}://postgres@/{database}?host={self.socket_dir}"

    def fresh_url(self, *, at_head: bool = True) -> str:
        """A new database: a catalog at head (copied from the template), or an empty one."""
        name = f"t{os.getpid()}_{next(self._names)}"
        template = HEAD_TEMPLATE if at_head else "template0"
        self.admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY')
        return self.url(name)

    def drop(self, url: str) -> None:
        name = url.split("@/", 1)[1].split("?", 1)[0]
        self.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def admin(self, sql: str) -> list[tuple[Any, ...]]:
        """Run one statement on the `postgres` database, outside a transaction."""
        import psycopg

        with psycopg.connect(
            f"host={self.socket_dir} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            cursor = conn.execute(sql.encode())
            return cursor.fetchall() if cursor.description else []

    def _tune(self) -> None:
        # Throwaway data: no fsync (reloadable settings, no restart needed).
        self.admin("ALTER SYSTEM SET fsync = off")
        self.admin("ALTER SYSTEM SET synchronous_commit = off")
        self.admin("ALTER SYSTEM SET full_page_writes = off")
        self.admin("SELECT pg_reload_conf()")

    def _make_head_template(self) -> None:
        from ckpt_daemon.catalog.store import Store

        self.admin(f'CREATE DATABASE "{HEAD_TEMPLATE}" TEMPLATE template0')
        Store(self.url(HEAD_TEMPLATE)).close()  # runs migrations 0001..head on PostgreSQL

    # ---- the server ----

    def _start(self) -> tuple[str, str]:
        errors = []
        try:
            return self._start_pgserver()
        except Exception as exc:  # missing or broken: try the binaries on PATH, say both
            errors.append(f"pgserver: {type(exc).__name__}: {exc}")
        try:
            return self._start_from_path()
        except Exception as exc:
            errors.append(f"initdb/pg_ctl on PATH: {type(exc).__name__}: {exc}")
        raise RuntimeError(
            "no PostgreSQL server could be started for the catalog tests (install the `test` "
            "extra: pip install -e '.[test]', or PostgreSQL's initdb and pg_ctl): "
            + "; ".join(errors)
        )

    def _start_pgserver(self) -> tuple[str, str]:
        import warnings

        with warnings.catch_warnings():  # platformdirs: no XDG_RUNTIME_DIR (CI, root): /tmp
            warnings.simplefilter("ignore")
            import pgserver

        data = self.folder / "pgserver"
        data.mkdir()
        server = pgserver.get_server(data, cleanup_mode="stop")
        self._stop = server.cleanup
        socket_dir = server.get_postmaster_info().socket_dir
        return str(socket_dir), "pgserver"

    def _start_from_path(self) -> tuple[str, str]:
        initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
        if initdb is None or pg_ctl is None:
            raise FileNotFoundError("initdb or pg_ctl not on PATH")
        data, sockets = self.folder / "data", self.folder / "sock"
        data.mkdir()
        sockets.mkdir()
        prefix: list[str] = []
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            nobody = pwd.getpwnam("nobody")
            for path in (self.folder, data, sockets):
                os.chown(path, nobody.pw_uid, nobody.pw_gid)
            os.chmod(self.folder, 0o755)
            prefix = ["runuser", "-u", "nobody", "--"]
        run = {"check": True, "capture_output": True, "text": True, "timeout": START_TIMEOUT_S}
        subprocess.run(
            [*prefix, initdb, "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8"],
            **run,
        )
        options = f"-k {sockets} -c listen_addresses=''"
        log = self.folder / "server.log"
        subprocess.run(
            [*prefix, pg_ctl, "-D", str(data), "-o", options, "-l", str(log), "-w", "start"], **run
        )
        self._stop = lambda: subprocess.run(
            [*prefix, pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"], **run
        )
        atexit.register(self.stop)  # a worker that dies leaves no server behind (pgserver: same)
        return str(sockets), f"initdb from {initdb}"

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None
        shutil.rmtree(self.folder, ignore_errors=True)


def start_server() -> PostgresServer:
    """A server in a new short folder under the system's temp dir (socket path limit)."""
    folder = Path(tempfile.mkdtemp(prefix="ckpt-pg-"))
    try:
        return PostgresServer(folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
