"""The layer rules of docs/architecture.md, checked on the source so they stay true.

Modules are named by their path inside the package folder (`daemon/`, installed as
`ckpt_daemon`): `core.retention`, `fs.fsops`, `cli.main`. A layer is a module's first part."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "daemon"

# Which layers each layer may import (its own always). Top-level modules are layers of their own:
# `api` (the Python API), `logs` (the structured log line every layer writes), `__init__`
# (the package's import name), `__main__` (`python -m ckpt_daemon`).
MAY_IMPORT: dict[str, set[str]] = {
    "core": set(),
    "settings": {"core"},
    "fs": {"core", "logs"},
    "catalog": {"core", "fs", "__init__"},
    "formats": {"core", "fs", "children"},  # the TF readers ask a child (children.tf_child)
    "children": {"core", "fs", "formats", "__init__"},  # reader_child runs the readers
    "transforms": {"core", "fs", "formats"},
    "remote": {"core", "fs", "settings"},  # the object store (the only boto3 import: remote.s3)
    "usecases": {
        "core",
        "fs",
        "catalog",
        "formats",
        "children",
        "transforms",
        "settings",
        "remote",
        "logs",
        "__init__",
    },
    "service": {"core", "fs", "catalog", "children", "settings", "usecases", "logs", "__init__"},
    "api": {"core", "catalog", "settings", "usecases", "transforms", "service"},
    "cli": {"core", "catalog", "settings", "usecases", "service", "api", "logs"},
    "logs": {"core"},
    "__init__": set(),
    "__main__": {"cli"},
}
# Modules that must stay pure: no I/O library, no clock. All of core, and two format helpers that
# interpret already-read JSON.
PURE_ELSEWHERE = {"formats.keras_config", "formats.tf_state"}
IO_LIBRARIES = {
    "h5py",
    "sqlalchemy",
    "alembic",
    "watchdog",
    "apscheduler",
    "os",
    "shutil",
    "subprocess",
    "socket",
    "tensorflow",
    "keras",
    "numpy",
    "blake3",
    "logging",
    "prometheus_client",
}
CLOCK_READS = ("time.time(", "time.time_ns(", "monotonic(", "perf_counter(", ".now(", ".today(")
# Where each third-party library may be imported: a layer name or one module.
OWNERS = {
    "sqlalchemy": {"catalog"},
    "alembic": {"catalog.db"},
    "h5py": {"formats", "transforms"},
    "watchdog": {"service.watcher"},
    "apscheduler": {"service.jobs"},
    "tensorflow": {"children.tf_probe"},
    "keras": set(),  # imported by name in children.keras_load_probe, a child process
    "tf_keras": set(),
    "blake3": {"fs.hashing"},
    "yaml": {"settings.config"},
    "click": {"cli"},
    "rich": {"cli"},
    "prometheus_client": {"service.exporter"},
    "matplotlib": {"cli.plot_png"},
    "boto3": {"remote.s3"},  # an optional extra (ckpt-daemon[s3]), imported when first used
    "botocore": {"remote.s3"},
}
MUTATING_CALLS = {"remove", "unlink", "rename", "replace", "rmtree", "rmdir", "move", "truncate"}
# Path methods that change files whatever the receiver is called (str.replace is not one).
PATH_MUTATORS = {"unlink", "rmdir", "write_bytes", "write_text", "symlink_to", "hardlink_to"}
# fsswap: the renameat2 half of fsops; fsclone: its copying half (kept versions); fsfetch: its
# receiving half (a file streamed back from the object store)
MUTATORS = {"fs.fsops", "fs.fsswap", "fs.fsclone", "fs.fsfetch"}
# Programs run with `python -m`: they talk to their parent on stdout and exit with a code.
PROGRAMS = {
    "__main__",
    "children.tf_probe",
    "children.keras_load_probe",
    "children.config_child",
    "children.json_h5_probe",
}


@cache
def modules() -> dict[str, ast.Module]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        found[".".join(parts)] = ast.parse(path.read_text())
    return found


def layer(module: str) -> str:
    return module.split(".")[0]


def in_owner(module: str, owners: set[str]) -> bool:
    return module in owners or layer(module) in owners


def third_party(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def ours(module: str, tree: ast.Module, *, top_level_only: bool = False) -> set[str]:
    """Our modules that `module` imports (relative imports resolved)."""
    is_package = (PACKAGE / module.replace(".", "/") / "__init__.py").exists()
    here = module.split(".") if is_package else module.split(".")[:-1]
    if module in ("__init__", "__main__", "api", "logs"):
        here = []
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        base = here[: len(here) - (node.level - 1)]
        target = base + (node.module.split(".") if node.module else [])
        for alias in node.names:
            candidate = ".".join([*target, alias.name])
            if candidate in modules():
                found.add(candidate)
            else:
                found.add(".".join(target) or "__init__")
    return found


def test_every_import_of_our_own_code_is_relative() -> None:
    """The folder is `daemon/`, the installed name `ckpt_daemon`: an absolute `daemon` import
    would find python-daemon, or nothing."""
    for name, tree in modules().items():
        assert not third_party(tree) & {"daemon", "ckpt_daemon", "migrations"}, name


def test_layers_import_only_the_layers_below_them() -> None:
    for name, tree in modules().items():
        for target in ours(name, tree):
            source, dest = layer(name), layer(target)
            if source != dest:
                assert dest in MAY_IMPORT[source], f"{name} imports {target}"


def test_no_import_cycles_at_module_level() -> None:
    graph = {name: ours(name, tree, top_level_only=True) for name, tree in modules().items()}
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt == node or nxt.startswith(node + "."):
                continue  # a package's __init__ importing its own modules
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path, node, nxt]))
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])


def test_pure_modules_import_no_io_and_read_no_clock() -> None:
    for name, tree in modules().items():
        if layer(name) != "core" and name not in PURE_ELSEWHERE:
            continue
        assert not third_party(tree) & IO_LIBRARIES, name
        source = ast.unparse(tree)
        assert not [call for call in CLOCK_READS if call in source], name


def test_third_party_libraries_stay_in_their_owners() -> None:
    for name, tree in modules().items():
        for library in third_party(tree) & set(OWNERS):
            assert in_owner(name, OWNERS[library]), f"{name} imports {library}"


def test_only_fs_fsops_mutates_the_filesystem() -> None:
    for name, tree in modules().items():
        if name in MUTATORS:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                receiver = ast.unparse(node.func.value)
                if node.func.attr in MUTATING_CALLS and receiver in ("os", "shutil", "Path"):
                    raise AssertionError(f"{name} calls {receiver}.{node.func.attr}")
                assert node.func.attr not in PATH_MUTATORS, f"{name}: {ast.unparse(node)}"


def test_only_the_cli_prints_or_exits() -> None:
    for name, tree in modules().items():
        if layer(name) == "cli" or name in PROGRAMS:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                call = ast.unparse(node.func)
                assert call not in ("print", "sys.exit", "exit", "os._exit"), f"{name}: {call}"


def test_the_rules_know_every_layer() -> None:
    assert {layer(name) for name in modules()} == set(MAY_IMPORT)
