"""`ckpt serve`, `status`, `db upgrade|current` and `config check`: running and administering
the service and its catalog."""

from __future__ import annotations

from typing import Any

import click

from ..core.errors import ConfigError, PartialFailure
from ..core.units import counted
from .context import Context, pass_context
from .options import json_option
from .output import echo, emit_json


@click.command()
@click.option(
    "--once",
    is_flag=True,
    help="Reconcile every root with the catalog, run the configured retention, trash purge and "
    "artifacts jobs and a disk guard pass (min_free) once, and exit (for cron and tests). Exit 3 "
    "if some item failed.",
)
@pass_context
def serve(obj: Context, once: bool) -> None:
    """Run the service: watch roots, index checkpoints once complete, run scheduled jobs.

    Runs in the foreground (systemd's Type=notify does the daemonizing); logs one line per
    event to stderr. SIGHUP reloads the config, SIGTERM stops it. On a ./config.yaml found in
    its working folder, it writes that file's path to ~/.local/state/ckpt/serve-config
    ($XDG_STATE_HOME/ckpt/): `ckpt` in any other folder then finds this daemon's catalog.

    \b
    Example:  ckpt --config /etc/ckpt/config.yaml serve
    """
    from ..service.serve import Service

    obj.validated_config(obj.config_path)
    with obj.new_catalog_notice(up_front=True):
        code = Service(obj.config_path, obj.database, web_view=_web_view).run(once=once)
    if code != 0:
        raise PartialFailure("serve: some items or jobs failed (see the log above)")


def _web_view(config: Any) -> Any:
    """`service.web_listen`'s view, imported only when it is set (it needs Jinja2)."""
    try:
        from ..web.server import start_in_daemon
    except ImportError as exc:
        why = f"the web view needs Jinja2: pip install 'ckpt-daemon[web]' ({exc})"
        raise ConfigError("service.web_listen", why) from exc
    return start_in_daemon(config)


@click.command()
@json_option("The status as a JSON object.")
@pass_context
def status(obj: Context, as_json: bool) -> None:
    """Whether a daemon is running against this catalog, from its heartbeat.

    Every daemon of the catalog is listed, one per node (`service.node`), running or not.
    Exit 0 either way; `running` says whether any is (a stale heartbeat or a dead pid on this
    host means no).

    \b
    Example:  ckpt status --json | jq .running
    """
    from ..settings.config import shown_url
    from ..usecases.disk_guard import status as disk_status

    missing = obj.missing_catalog()
    if missing is not None:  # no daemon ever ran with this config: said, nothing created
        from ..service.health import daemons_status

        doc = daemons_status([], 0)
        doc["reason"] = f"no catalog at {missing}: no daemon has run with this config"
        doc["last_save_failed"] = []
        config = obj.config()
    else:
        doc, config = _catalog_status(obj)
    # Which config and catalog were asked: from another folder, `not running` may only
    # mean "not this catalog".
    doc.update(config=config.source, catalog=shown_url(config.database))
    # Free space measured now; the guard's state as the daemon last reported it.
    doc["disk"] = disk_status(config, doc["disk"], running=bool(doc["running"]))
    doc.setdefault("catalog_disk_full", None)
    if as_json:
        emit_json(doc)  # the service's health document (`service.health`), as it is
        return
    if doc["catalog_disk_full"]:
        echo(
            f"{doc['catalog_disk_full']}: nothing can be recorded, heartbeats "
            "included (a daemon waits for space, event=catalog_disk_full in its log, and "
            "resumes by itself)"
        )
    if not doc["running"]:
        echo(f"not running: {doc['reason']} ({doc['checkpoints']} checkpoints catalogued)")
    else:
        echo(
            f"running: pid {doc['pid']} on {doc['host']} since {doc['started_at']}, "
            f"heartbeat {doc['heartbeat_at']}"
        )
        for root in doc["roots"]:
            on = f", {root['filesystem']}" if root.get("filesystem") else ""
            trash = ", trash in the catalog" if root.get("trash") == "in_place" else ""
            echo(f"  root {root['path']} ({root['observer']}{on}{trash})")
        echo(
            f"  {doc['checkpoints']} checkpoints, queue {doc['queue']}, last indexed "
            f"{doc['last_index_at'] or '-'}, last error {doc['last_error'] or 'none'}"
        )
    _failed_save_lines(doc["last_save_failed"])
    _disk_lines(doc["disk"])
    _remote_lines(doc.get("remotes") or [])
    _daemon_lines(doc.get("daemons") or [])
    echo(f"  config {doc['config']}, catalog {doc['catalog']}")


def _catalog_status(obj: Context) -> tuple[dict[str, Any], Any]:
    """The status document from the catalog, with why its disk is full (`catalog_disk_full`:
    less than 1 MiB free), when it is; when it is too full for SQLite to open the catalog (no
    room for its `-shm` file), the catalog read as a file."""
    from ..api import catalog_as_file
    from ..catalog.space import disk_full, nearly_full
    from ..settings.config import sqlite_file

    try:
        with obj.catalog() as cat:
            doc, config = cat.status(), cat.config
        doc["catalog_disk_full"] = nearly_full(sqlite_file(config.database))
        return doc, config
    except Exception as exc:
        config = obj.config()
        reason = disk_full(exc, sqlite_file(config.database))
        frozen = catalog_as_file(config) if reason is not None else None
        if frozen is None:
            raise
        with frozen:
            doc = frozen.status()
        doc["catalog_disk_full"] = reason
        return doc, config


def _failed_save_lines(saves: list[dict[str, Any]]) -> None:
    """One line per run whose last save did not complete (keras#23609: it looks finished)."""
    for save in saves:
        echo(
            f"  run {save['run']}: last save did not complete: {save['path']} "
            f"({save['status']}: {save['reason'] or 'no reason recorded'})"
        )


def _disk_lines(disk: list[dict[str, Any]]) -> None:
    """One line per guarded filesystem: free, threshold, state (and why it cannot free)."""
    from ..core.units import format_size

    for fs in disk:
        limit = format_size(fs["min_free_bytes"])
        if str(fs["min_free"]).endswith("%"):
            limit += f" ({fs['min_free']})"
        echo(
            f"  disk {', '.join(fs['roots'])}: free {format_size(fs['free_bytes'])}, "
            f"min_free {limit}: {fs['state']}"
        )
        if fs["why"]:
            echo(f"    {fs['why']}")
        for lost in fs.get("gave_up") or []:  # evaluations the guard gave up, this episode
            echo(f"    gave up stage(s) {', '.join(lost['stages'])} of {lost['path']}")


def _daemon_lines(daemons: list[dict[str, Any]]) -> None:
    """One line per daemon node of the catalog, when there is more than one."""
    if len(daemons) < 2:
        return
    echo(f"  daemons ({sum(d['running'] for d in daemons)} of {len(daemons)} running):")
    for d in daemons:
        state = "running" if d["running"] else f"not running ({d['reason']})"
        echo(f"    {d['node']}: pid {d['pid']} on {d['host']}, {state}")


@click.group()
def db() -> None:
    """Catalog schema: `ckpt db upgrade` migrates (after a backup), `ckpt db current` reports,
    `ckpt db copy --to URL` copies the catalog into an empty one (SQLite <-> PostgreSQL)."""


@db.command()
@pass_context
def upgrade(obj: Context) -> None:
    """Migrate the catalog to this version's schema (SQLite: a backup copy is made first).

    `ckpt serve` does it at start; other commands refuse a catalog not at the head (exit 5).

    \b
    Example:  ckpt --config /etc/ckpt/config.yaml db upgrade
    """
    from ..catalog import db as database

    url = obj.config().database
    with obj.new_catalog_notice():
        backup = database.upgrade(url)
    suffix = f" (backup: {backup})" if backup else ""
    echo(f"catalog schema at {database.SCHEMA_HEAD}{suffix}")


@db.command()
@pass_context
def current(obj: Context) -> None:
    """Print the catalog's schema revision and whether it is the one this ckpt needs.

    \b
    Example:  ckpt db current     # "0007 (head)"; "0006 (needs 0007)": run `ckpt db upgrade`
    """
    from ..catalog import db as database

    url = obj.config().database
    database.check_url(url)
    # No catalog file yet: nothing to create just to say it is empty.
    revision = None if obj.missing_catalog() else database.revision_at(url)
    state = "head" if revision == database.SCHEMA_HEAD else f"needs {database.SCHEMA_HEAD}"
    echo(f"{revision or 'empty'} ({state})")


@db.command(name="copy")
@click.option(
    "--to",
    "target",
    required=True,
    metavar="URL",
    help="The catalog to copy into: a new SQLite file or an empty PostgreSQL database "
    "(e.g. postgresql+psycopg://user@host/ckpt). Created at the schema head if new.",
)
@pass_context
def copy_command(obj: Context, target: str) -> None:
    """Copy the whole catalog (every table, ids kept) into an empty one, and verify it.

    Moves a catalog from SQLite to PostgreSQL and back. Each table's row count and a checksum
    of its rows are compared on both sides after the copy; exit 1 if they differ. A target
    that holds any row is refused (exit 2). Stop the daemon first: rows it writes meanwhile
    are not copied.

    \b
    Example:  ckpt db copy --to postgresql+psycopg://ckpt@db.example/ckpt
    """
    from ..catalog import db as database
    from ..catalog.copy import copy_catalog
    from ..settings.config import shown_url

    source = obj.config().database
    database.check_url(target)
    copied = copy_catalog(source, target)
    for table in copied:
        echo(f"{table.table}: {counted(table.rows, 'row')}, sha256 {table.checksum[:16]}")
    total = sum(t.rows for t in copied)
    echo(
        f"copied {counted(total, 'row')} from {shown_url(source)} to {shown_url(target)}: verified"
    )


@click.group(name="config")
def config_group() -> None:
    """Configuration: `ckpt config check [PATH]`."""


@config_group.command()
@click.argument("path", required=False)
@pass_context
def check(obj: Context, path: str | None) -> None:
    """Validate a config file (default: the one `ckpt` would use) and summarize it: for each
    root, its filesystem (from the mount table), whether inotify events arrive there (else it
    is polled) and whether its trash moves files or is kept in the catalog (a delayed delete,
    where rename is impossible: object-store FUSE mounts, a rename probe that fails).

    \b
    Example:  ckpt config check /etc/ckpt/config.yaml
    """
    loaded = obj.validated_config(obj.config_path if path is None else path)
    echo(f"ok: {loaded.source}")
    echo(f"  database: {loaded.database}")
    from ..usecases.storage import lines, root_storage

    for root in loaded.roots:
        echo(f"  root: {root.path} (observer {root.observer}, trash {root.trash})")
        for line in lines(root_storage(root)):
            echo(line)


def _remote_lines(remotes: list[dict[str, Any]]) -> None:
    """Each object store as the daemon's start probed it."""
    for r in remotes:
        if r.get("conditional_writes"):
            echo(f"  remote {r['url']}: conditional writes honoured")
        else:
            echo(
                f"  remote {r['url']}: WARNING: it ignores conditional writes (If-None-Match): "
                "keep one catalog per key prefix (docs/object-storage.md)"
            )
