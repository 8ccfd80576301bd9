"""Load and validate config.yaml into frozen objects. Bad values are refused, never "fixed".

Every error names the key path (`roots[0].observer`) and the reason, and exits 2 from the CLI.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from ..core.disk_guard import MinFree
from ..core.errors import ConfigError
from ..core.pipeline import Stage
from ..core.retention import Policy
from .bounds import bounded as _number
from .locations import BUILT_IN, find_config_file
from .operations import Hook, Listen
from .operations import hooks as _hooks
from .operations import metrics_listen as _metrics_listen
from .operations import node as _node
from .pipeline import parse_labels, parse_pipeline
from .policies import RunRule
from .policies import policy as _policy
from .policies import run_rules as _run_rules
from .remote import Remote, parse_remote
from .schedule import Schedule, parse_schedule
from .tier_checks import check_remotes
from .values import choice as _choice
from .values import mapping as _mapping
from .values import min_free as _min_free
from .values import path as _path
from .values import root_name as _root_name
from .values import strings as _strings
from .versions import Versions, parse_versions
from .web_view import WebView
from .web_view import web_view as _web_view

OBSERVERS = ("auto", "inotify", "polling")
TRASH_MODES = ("auto", "move", "in_place")  # roots[].trash (fs.mounts.trash_mode)
LOG_LEVELS = ("debug", "info", "warning", "error")
LOAD_SANDBOX_MODES = ("require", "warn")  # `children.sandbox`
PACKAGED_DEFAULT = Path(__file__).with_name("default_config.yaml")


@dataclass(frozen=True)
class RootConfig:
    path: Path
    observer: str
    poll_interval: float
    filename_templates: tuple[str, ...]
    metrics_files: tuple[str, ...]
    retention: Policy | None = None
    min_free: MinFree | None = None  # the disk guard's threshold here (None: the top-level one)
    # The root's stable name (a folder shared by hosts that mount it at different paths): the
    # catalog stores its files relative to it (`core.root_names`). None: stored absolute.
    name: str | None = None
    remote: Remote | None = None  # the object store it tiers to (None: the top-level one)
    # How its trash works: move (rename into .ckpt-trash), in_place (kept in the catalog: a
    # delayed delete), auto (in place on an object store's FUSE mount or where rename fails)
    trash: str = "auto"

    @property
    def remote_name(self) -> str:
        """The root's part of its object keys: its `name`, else its folder's name."""
        return self.name or self.path.name


@dataclass(frozen=True)
class Artifacts:
    """Background split/compress of cold checkpoints (None: that half is off)."""

    split_after: float | None = None
    compress_after: float | None = None
    codec: str = "gzip"
    timeout: float = 3600.0  # seconds one split/compress child may run before it is killed

    @property
    def enabled(self) -> bool:
        return self.split_after is not None or self.compress_after is not None


@dataclass(frozen=True)
class Config:
    source: str  # the file it came from, or BUILT_IN ("<built-in default>")
    database: str
    state_dir: Path
    roots: tuple[RootConfig, ...]
    settle_seconds: float
    min_age_seconds: float
    schedule: Schedule
    heartbeat_seconds: float
    log_level: str
    retention: Policy | None = None
    run_rules: tuple[RunRule, ...] = ()
    purge_after_seconds: float = 7 * 86400.0
    artifacts: Artifacts = Artifacts()
    versions: Versions = field(default_factory=Versions)
    metrics_listen: Listen | None = None  # where `ckpt serve` serves /metrics (None: off)
    node: str | None = None  # `service.node`: this daemon's identity (None: the host name)
    lease_seconds: float = 120.0  # `service.lease_ttl`: a dead holder's run is free after it
    hooks: tuple[Hook, ...] = ()
    min_free: MinFree | None = None  # the disk guard's default threshold (None: off)
    remote: Remote | None = None  # the object store of every root without its own (None: off)
    pipeline: tuple[Stage, ...] = ()  # stages run on each complete checkpoint (core.pipeline)
    labels: tuple[str, ...] = ()  # `service.labels`: what a stage's `runs_on` asks of a host

    def remote_for(self, root: RootConfig) -> Remote | None:
        """The object store `root` tiers to: its own `remote`, else the top-level one."""
        return root.remote or self.remote

    web: WebView | None = None  # `service.web_listen`: the read-only web view (None: off)
    # `completion.abandoned_after`: an unfinished folder save untouched this long, with no
    # writer, is `abandoned` (core.save_verdict)
    abandoned_after_seconds: float = 3600.0
    # `completion.read_timeout`: one file's or folder's metadata read by the reader child; then
    # the child is killed and the checkpoint recorded corrupt (a hung NFS read, a parser loop)
    read_timeout_seconds: float = 30.0
    # `load_sandbox`: where the kernel cannot sandbox a load child, refuse the load (`require`)
    # or run it without the missing layer, saying so (`warn`)
    load_sandbox: str = "require"

    def has_retention(self) -> bool:
        return bool(self.retention or self.run_rules or any(r.retention for r in self.roots))

    def runs_retention(self) -> bool:
        """Whether the service's retention job has work: policies, or kept versions (which
        have a policy of their own where a run has none)."""
        return self.has_retention() or self.versions.capture != "off"

    def policy_for(self, root: str, run: str) -> tuple[Policy | None, str]:
        """The retention policy of a run, and where it came from (first match wins)."""
        for i, rule in enumerate(self.run_rules):
            if fnmatch.fnmatchcase(run, rule.match):
                return rule.retention, f"runs[{i}] ({rule.match})"
        for i, configured in enumerate(self.roots):
            if str(configured.path) == root and configured.retention is not None:
                return configured.retention, f"roots[{i}].retention"
        return self.retention, "retention"

    def min_free_for(self, root: RootConfig) -> MinFree | None:
        """The disk guard's threshold for `root`: its own `min_free`, else the top-level one."""
        return root.min_free or self.min_free

    def named_roots(self) -> dict[str, str]:
        """{name: local path} of the roots with a `name` (stored relative to it)."""
        return {r.name: str(r.path) for r in self.roots if r.name is not None}

    @property
    def node_name(self) -> str:
        """This daemon's node identity: `service.node`, else the host name."""
        import socket

        return self.node or socket.gethostname()

    def root_for(self, path: Path) -> RootConfig | None:
        """The configured root that contains `path` (no symlinks resolved: paths as given)."""
        absolute = Path(os.path.abspath(path))
        for root in self.roots:
            if absolute == root.path or root.path in absolute.parents:
                return root
        return None


def load(explicit: str | None = None, *, database_override: str | None = None) -> Config:
    path = find_config_file(explicit)
    if path is None:
        text, base, source = PACKAGED_DEFAULT.read_text(), Path.cwd(), BUILT_IN
    else:
        text, base, source = _read(path), path.resolve().parent, str(path)
    return parse(text, base=base, source=source, database_override=database_override)


def require_roots(config: Config) -> None:
    """What `serve` needs and `config check` therefore checks: every root is an existing folder
    (an unedited copy of the reference file names `./runs` beside it). At start, a missing root
    is a mistake, refused (exit 2: the unit does not restart); one that vanishes while the
    service runs is an outage, rescanned when it is back."""
    for i, root in enumerate(config.roots):
        if root.path.is_dir():
            continue
        what = "is not a folder" if root.path.exists() else "does not exist"
        where = "" if config.source == BUILT_IN else f" (in {config.source})"
        raise ConfigError(f"roots[{i}].path", f"{root.path} {what}{where}: create it or fix it")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("(file)", f"{path}: {exc}") from exc


COMPLETION_KEYS = {"settle_seconds", "min_age_seconds", "abandoned_after", "read_timeout"}
SERVICE_KEYS = {"heartbeat", "metrics_listen", "node", "lease_ttl", "web_listen", "web_token_file"}
SERVICE_KEYS |= {"labels"}


def parse(text: str, *, base: Path, source: str, database_override: str | None = None) -> Config:
    import yaml

    try:
        document = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise ConfigError("(file)", f"not valid YAML: {' '.join(str(exc).split())}") from exc
    if document is None:
        document = {}
    raw = _mapping(document, "(top level)", TOP_KEYS)
    state_dir = _path(raw.get("state_dir", "./.ckpt"), "state_dir", base)
    # A URL given on the command line or in the environment is relative to the working folder.
    override = database_override or os.environ.get("CKPT_DB")
    database = override or raw.get("database", "sqlite:///{state_dir}/catalog.db")
    if not isinstance(database, str) or not database.strip():
        raise ConfigError("database", "expected an SQLAlchemy URL")
    completion = _mapping(raw.get("completion", {}), "completion", COMPLETION_KEYS)
    service = _mapping(raw.get("service", {}), "service", SERVICE_KEYS)
    config = Config(
        source=source,
        database=_database_url(database, state_dir, Path.cwd() if override else base),
        state_dir=state_dir,
        roots=_roots(raw.get("roots"), base, state_dir),
        settle_seconds=_number(completion.get("settle_seconds", 5), "completion.settle_seconds"),
        min_age_seconds=_number(
            completion.get("min_age_seconds", 0.2), "completion.min_age_seconds"
        ),
        abandoned_after_seconds=_number(
            completion.get("abandoned_after", "1h"), "completion.abandoned_after"
        ),
        read_timeout_seconds=_number(
            completion.get("read_timeout", "30s"), "completion.read_timeout"
        ),
        schedule=parse_schedule(raw.get("schedule", {})),
        heartbeat_seconds=_number(service.get("heartbeat", 10), "service.heartbeat"),
        log_level=_choice(raw.get("log_level", "info"), "log_level", LOG_LEVELS),
        load_sandbox=_choice(
            raw.get("load_sandbox", "require"), "load_sandbox", LOAD_SANDBOX_MODES
        ),
        retention=_policy(raw["retention"], "retention") if "retention" in raw else None,
        run_rules=_run_rules(raw.get("runs", [])),
        artifacts=_artifacts(raw.get("artifacts", {})),
        versions=parse_versions(raw.get("versions", {})),
        purge_after_seconds=_number(
            _mapping(raw.get("trash", {}), "trash", {"purge_after"}).get("purge_after", "7d"),
            "trash.purge_after",
        ),
        metrics_listen=_metrics_listen(service.get("metrics_listen")),
        node=_node(service.get("node")),
        lease_seconds=_number(service.get("lease_ttl", Config.lease_seconds), "service.lease_ttl"),
        hooks=_hooks(raw.get("hooks")),
        min_free=_min_free(raw["min_free"], "min_free") if "min_free" in raw else None,
        remote=parse_remote(raw["remote"], "remote") if "remote" in raw else None,
        web=_web_view(service, base),
        pipeline=parse_pipeline(raw.get("pipeline")),
        labels=parse_labels(service.get("labels")),
    )
    check_remotes(config)
    return config


TOP_KEYS = {
    "database",
    "state_dir",
    "roots",
    "completion",
    "schedule",
    "service",
    "log_level",
    "load_sandbox",
    "retention",
    "runs",
    "trash",
    "artifacts",
    "versions",
    "hooks",
    "pipeline",
    "min_free",
    "remote",
}
ROOT_KEYS = {
    "path",
    "trash",
    "name",
    "observer",
    "poll_interval",
    "filename_template",
    "metrics_files",
    "retention",
    "min_free",
    "remote",
}


def _roots(value: Any, base: Path, state_dir: Path) -> tuple[RootConfig, ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError("roots", "expected a non-empty list of {path: ...} entries")
    roots = tuple(_root(item, f"roots[{i}]", base) for i, item in enumerate(value))
    names: dict[str, int] = {}
    for i, r in enumerate(roots):
        if r.name is not None and names.setdefault(r.name, i) != i:
            raise ConfigError(
                f"roots[{i}].name", f"{r.name!r} already names roots[{names[r.name]}]"
            )
    # Compared as the kernel resolves them: a symlink must not make two names for one folder.
    real = [Path(os.path.realpath(r.path)) for r in roots]
    state = Path(os.path.realpath(state_dir))
    for i, path in enumerate(real):
        key = f"roots[{i}].path"
        if path == path.parent:
            raise ConfigError(
                key, f"{roots[i].path} is the filesystem root: name the folder the runs are in"
            )
        # The catalog, its backups and our temp files must never be indexed, trashed or
        # rewritten as checkpoints, nor a root be swept by a state_dir clean-up.
        if path == state or path in state.parents or state in path.parents:
            relation = "is" if path == state else "contains" if path in state.parents else "is in"
            raise ConfigError(
                key, f"{roots[i].path} {relation} state_dir ({state_dir}): keep them apart"
            )
        for j, other in enumerate(real):
            if (path == other and i > j) or other in path.parents:
                raise ConfigError(
                    key,
                    f"{roots[i].path} overlaps roots[{j}] ({roots[j].path}): roots must not"
                    " overlap (symlinks resolved)",
                )
    return roots


def _root(item: Any, key: str, base: Path) -> RootConfig:
    if isinstance(item, str):
        item = {"path": item}
    raw = _mapping(item, key, ROOT_KEYS)
    if "path" not in raw:
        raise ConfigError(f"{key}.path", "required")
    templates = raw.get("filename_template", [])
    templates = [templates] if isinstance(templates, str) else templates
    return RootConfig(
        path=_path(raw["path"], f"{key}.path", base),
        observer=_choice(raw.get("observer", "auto"), f"{key}.observer", OBSERVERS),
        trash=_choice(raw.get("trash", "auto"), f"{key}.trash", TRASH_MODES),
        poll_interval=_number(raw.get("poll_interval", 30), f"{key}.poll_interval"),
        filename_templates=_templates(templates, f"{key}.filename_template"),
        metrics_files=_strings(
            raw.get("metrics_files", ["training.log", "*.csv", "metrics.json"]),
            f"{key}.metrics_files",
        ),
        retention=_policy(raw["retention"], f"{key}.retention") if "retention" in raw else None,
        min_free=_min_free(raw["min_free"], f"{key}.min_free") if "min_free" in raw else None,
        name=_root_name(raw["name"], f"{key}.name") if "name" in raw else None,
        remote=parse_remote(raw["remote"], f"{key}.remote") if "remote" in raw else None,
    )


def _artifacts(value: Any) -> Artifacts:
    raw = _mapping(value, "artifacts", {"split_after", "compress_after", "codec", "timeout"})

    def after(key: str) -> float | None:
        given = raw.get(key)
        return None if given is None else _number(given, f"artifacts.{key}")

    codec = _choice(raw.get("codec", "gzip"), "artifacts.codec", ("gzip", "lzf", "zstd"))
    timeout = _number(raw.get("timeout", Artifacts.timeout), "artifacts.timeout")
    return Artifacts(after("split_after"), after("compress_after"), codec, timeout)


def _templates(value: Any, key: str) -> tuple[str, ...]:
    from ..core.training_metrics import compile_template

    templates = _strings(value, key)
    for i, template in enumerate(templates):
        try:
            compile_template(template)
        except ValueError as exc:
            raise ConfigError(f"{key}[{i}]", str(exc)) from exc
    return templates


def _database_url(url: str, state_dir: Path, base: Path) -> str:
    """Fill in {state_dir}; make a relative SQLite path relative to the config's folder."""
    url = url.replace("{state_dir}", str(state_dir))
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/"):
        rest = url[len(prefix) :]
        if rest and not rest.startswith(":memory:") and not rest.startswith("file:"):
            url = prefix + os.path.abspath(base / rest)
    return url


SQLITE_URL = re.compile(r"sqlite(?:\+\w+)?:///(?P<database>[^?]*)(?:\?.*)?", re.DOTALL)


def sqlite_file(url: str) -> Path | None:
    """The file an SQLite catalog URL names, read as SQLAlchemy reads it but without importing
    it (None: another database, in memory, or a `file:` URI). The CLI asks before it opens the
    catalog, so that it can say when it has made a new, empty one."""
    match = SQLITE_URL.fullmatch(url)
    database = unquote(match["database"]) if match else ""
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


# SQLAlchemy's own URL pattern, its user:password part (the password runs to the `@`).
_URL = re.compile(r"(?P<head>[\w+]+://[^:/]*):(?P<password>[^@]*)@", re.DOTALL)


def shown_url(url: str) -> str:
    """The catalog URL as shown to a person: a password in it masked (`***`), read as SQLAlchemy
    reads it but without importing it (`ckpt status` stays fast). Not a URL at all: it may
    still hold a secret, so only say that."""
    if not re.match(r"[\w+]+://", url):
        return "<not an SQLAlchemy URL>"
    return _URL.sub(lambda m: f"{m['head']}:***@", url, count=1)
