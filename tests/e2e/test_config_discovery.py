"""Where `ckpt` finds its config, and that it says which config and catalog it uses.

Real `ckpt` subprocesses with real environment variables, real folders and a real SQLite catalog:
HOME and XDG_CONFIG_HOME point into the test's temporary folder. /etc/ckpt cannot be written
here, so the system step is checked as it is on this machine: its config is used if it exists,
else the built-in default is."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from ckpt_daemon.catalog import db
from ckpt_daemon.settings import locations
from ckpt_daemon.settings.config import shown_url, sqlite_file
from tests.support.forked_cli import ckpt_process

SYSTEM_CONFIG = Path("/etc/ckpt/config.yaml")
BUILT_IN = "<built-in default>"


class Place:
    """A working folder, a home folder and the environment of a user who runs `ckpt` there."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.cwd = tmp / "work"
        self.home = tmp / "home"
        self.cwd.mkdir()
        self.home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CKPT_", "XDG_CONFIG"))}
        self.env = {**env, "HOME": str(self.home)}

    def config(self, folder: Path, name: str) -> Path:
        """A config whose own catalog (in `<tmp>/state-<name>`) tells which config was used."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "config.yaml"
        state, runs = self.tmp / f"state-{name}", self.tmp / f"runs-{name}"
        runs.mkdir(exist_ok=True)
        path.write_text(f"state_dir: {state}\nroots:\n  - path: {runs}\n")
        return path

    def catalog(self, name: str) -> Path:
        return self.tmp / f"state-{name}" / "catalog.db"

    def ckpt(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return ckpt_process(args, timeout=300, cwd=self.cwd, env={**self.env, **env})

    def status(self, *args: str, **env: str) -> dict[str, object]:
        done = self.ckpt(*args, "status", "--json", **env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


@pytest.fixture
def place(tmp_path: Path) -> Place:
    return Place(tmp_path)


def test_each_location_in_order(place: Place) -> None:
    flag = place.config(place.tmp / "flag", "flag")
    env = place.config(place.tmp / "env", "env")
    local = place.config(place.cwd, "local")
    xdg = place.config(place.tmp / "xdg" / "ckpt", "xdg")
    dot_config = place.config(place.home / ".config" / "ckpt", "home")
    xdg_home = str(place.tmp / "xdg")

    def in_use(*args: str, **env: str) -> tuple[object, object]:
        doc = place.status(*args, **env)
        return doc["config"], doc["catalog"]

    url = "sqlite:///{}".format
    assert in_use("--config", str(flag), CKPT_CONFIG=str(env), XDG_CONFIG_HOME=xdg_home) == (
        str(flag),
        url(place.catalog("flag")),
    )
    assert in_use(CKPT_CONFIG=str(env), XDG_CONFIG_HOME=xdg_home) == (
        str(env),
        url(place.catalog("env")),
    )
    assert in_use(XDG_CONFIG_HOME=xdg_home)[1] == url(place.catalog("local"))
    local.unlink()
    assert in_use(XDG_CONFIG_HOME=xdg_home) == (str(xdg), url(place.catalog("xdg")))
    # XDG_CONFIG_HOME unset, empty, or relative (invalid by the XDG spec): ~/.config.
    for value in (None, "", "relative/dir"):
        extra = {} if value is None else {"XDG_CONFIG_HOME": value}
        assert in_use(**extra) == (str(dot_config), url(place.catalog("home")))
    dot_config.unlink()
    xdg.unlink()
    # Nothing of the user's: the system config if this machine has one, else the built-in one.
    expected = str(SYSTEM_CONFIG) if SYSTEM_CONFIG.is_file() else BUILT_IN
    assert in_use(XDG_CONFIG_HOME=xdg_home)[0] == expected


def test_the_system_folder_comes_last_and_is_etc_ckpt(place: Place) -> None:
    env = {"HOME": str(place.home), "XDG_CONFIG_HOME": str(place.tmp / "xdg")}
    assert list(locations.SYSTEM_DIRS) == [SYSTEM_CONFIG.parent]
    assert locations.search_path(env) == [
        Path("config.yaml"),
        place.tmp / "xdg" / "ckpt" / "config.yaml",
        SYSTEM_CONFIG,
    ]


@pytest.mark.parametrize("how", ["flag", "env"])
@pytest.mark.parametrize("what", ["missing", "a folder"])
def test_an_explicitly_named_config_must_exist(place: Place, how: str, what: str) -> None:
    # A config that would be found otherwise: naming a missing one must not fall back to it.
    place.config(place.cwd, "local")
    named = place.tmp / "typo.yaml"
    if what == "a folder":
        named.mkdir()
    if how == "flag":
        done = place.ckpt("--config", str(named), "list")
    else:
        done = place.ckpt("list", CKPT_CONFIG=str(named))
    assert done.returncode == 2, done.stderr
    key = "--config" if how == "flag" else "$CKPT_CONFIG"
    reason = "no such file" if what == "missing" else "is not a file"
    assert f"config: {key}: {named}: {reason}" in done.stderr
    assert not place.catalog("local").exists()
    assert not (place.cwd / ".ckpt").exists()


def test_a_new_catalog_is_announced_once(place: Place) -> None:
    (place.cwd / "runs").mkdir()  # the built-in default's root
    catalog = place.cwd / ".ckpt" / "catalog.db"
    notice = f"ckpt: created a new catalog at {catalog} (config: {BUILT_IN})"
    first = place.ckpt("scan")
    assert first.returncode == 0, first.stderr
    assert first.stderr.splitlines() == [notice]
    assert first.stdout.startswith("0 indexed")
    again = place.ckpt("list")
    assert again.returncode == 0 and again.stderr == ""
    # The status of a fresh folder names the catalog it looked for, and creates none.
    catalog.unlink()
    for suffix in ("-wal", "-shm"):
        Path(f"{catalog}{suffix}").unlink(missing_ok=True)
    status = place.ckpt("status")
    assert status.returncode == 0 and status.stderr == ""
    assert status.stdout.splitlines() == [
        f"not running: no catalog at {catalog}: no daemon has run with this config "
        "(0 checkpoints catalogued)",
        f"  config {BUILT_IN}, catalog sqlite:///{catalog}",
    ]
    assert not catalog.exists()


def test_db_commands_in_a_fresh_folder(place: Place) -> None:
    catalog = place.cwd / ".ckpt" / "catalog.db"
    current = place.ckpt("db", "current")
    needs = f"empty (needs {db.SCHEMA_HEAD})\n"
    assert (current.returncode, current.stdout, current.stderr) == (0, needs, "")
    assert not catalog.exists() and not catalog.parent.exists()  # asking created nothing
    upgrade = place.ckpt("db", "upgrade")
    assert upgrade.returncode == 0, upgrade.stderr
    assert upgrade.stderr == f"ckpt: created a new catalog at {catalog} (config: {BUILT_IN})\n"
    assert place.ckpt("db", "current").stdout == f"{db.SCHEMA_HEAD} (head)\n"


def test_serve_creates_its_catalog_as_before_and_says_so_first(place: Place) -> None:
    config = place.config(place.cwd, "local")
    serve = place.ckpt("serve", "--once")
    assert serve.returncode == 0, serve.stderr
    lines = serve.stderr.splitlines()
    assert lines[0] == (
        f"ckpt: creating a new catalog at {place.catalog('local')} (config: {config.name})"
    )
    assert not any("new catalog" in line for line in lines[1:])
    assert place.ckpt("db", "current").stdout == f"{db.SCHEMA_HEAD} (head)\n"
    assert "new catalog" not in place.ckpt("serve", "--once").stderr


def test_debug_says_which_config_and_catalog_first(place: Place) -> None:
    config = place.config(place.home / ".config" / "ckpt", "home")
    done = place.ckpt("--debug", "scan", "--json")
    assert done.returncode == 0, done.stderr
    catalog = place.catalog("home")
    lines = done.stderr.splitlines()
    assert lines[0] == f"ckpt: config {config}, catalog sqlite:///{catalog}"
    assert sum(line.startswith("ckpt: config ") for line in lines) == 1
    assert lines[1:] == [f"ckpt: created a new catalog at {catalog} (config: {config})"]
    listed = place.ckpt("--debug", "list", "--json")
    assert listed.stderr.splitlines() == lines[:1]
    assert json.loads(listed.stdout) == []
    quiet = place.ckpt("list", "--json")
    assert quiet.stderr == ""


def test_a_password_in_the_catalog_url_is_never_shown(place: Place) -> None:
    url = "postgresql+psycopg2://ckpt:s3cr%21t@127.0.0.1:1/catalog"
    done = place.ckpt("--debug", "--db", url, "status", "--json")
    # No server (and maybe no driver) here: the command fails, after saying what it used.
    assert done.returncode != 0
    assert done.stderr.splitlines()[0] == (
        f"ckpt: config {BUILT_IN}, catalog postgresql+psycopg2://ckpt:***@127.0.0.1:1/catalog"
    )
    assert "s3cr" not in done.stderr + done.stdout
    assert shown_url("not a url") == "<not an SQLAlchemy URL>"
    for other in (
        url,
        "postgresql://u:p@h/d",
        "postgresql://u@h/d",
        "postgresql://h/d",
        "mysql+pymysql://a:b:c@h:3306/d?x=1",
        "sqlite:///./.ckpt/catalog.db",
        "postgresql://u:p%40ss@h/d",
    ):  # the same masking as SQLAlchemy's own rendering, without importing it
        assert shown_url(other) == make_url(other).render_as_string(hide_password=True), other


def test_help_tells_where_the_config_is_found(place: Place) -> None:
    done = place.ckpt("--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for where in ("$CKPT_CONFIG", "./config.yaml", "$XDG_CONFIG_HOME/ckpt/config.yaml"):
        assert where in text
    assert "/etc/ckpt/config.yaml" in text and "built-in default" in text


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:////tmp/a%20b.db",
        "sqlite:////tmp/a b.db?mode=ro",
        "sqlite:////tmp/a%3Fb.db",
        "sqlite:////tmp/x#y.db",
        "sqlite:////tmp/%E2%9C%93.db",
        "sqlite+pysqlite:////srv/c.db",
        "sqlite:///relative.db",
        "sqlite:///:memory:",
        "sqlite:///file:x.db?uri=true",
        "postgresql+psycopg://u:p@host/db",
    ],
)
def test_the_new_catalog_check_reads_urls_as_sqlalchemy_does(url: str) -> None:
    # Settings reads the file name without importing SQLAlchemy; the catalog opens what
    # SQLAlchemy reads. They must agree, or the notice would name the wrong file.
    assert sqlite_file(url) == (db.sqlite_path(url) if db.is_sqlite(url) else None)
