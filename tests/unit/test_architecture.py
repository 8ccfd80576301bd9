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
    "formats": {"core", "fs"},
    "children": {"core", "fs", "formats", "__init__"},  # reader_child runs the readers
    "transforms": {"core", "fs", "formats"},
    "remote": {"core", "fs", "settings"},  # the object store: remote.store, its adapters
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
    "cli": {"core", "catalog", "settings", "usecases", "service", "api", "logs", "web"},
    # the read-only web view: reads through the API as the CLI does; `ckpt serve` is handed it
    # by the cli (service.web_host), so the service never imports it
    "web": {"core", "settings", "usecases", "api", "logs"},
    "logs": {"core"},
    "__init__": set(),
    "__main__": {"cli"},
}
# Modules that must stay pure: no I/O library, no clock. All of core, and two format helpers that
# interpret already-read JSON.
PURE_ELSEWHERE = {"formats.keras_config", "formats.tf_state", "formats.tf_protos"}
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
    "tensorflow": set(),  # TF checkpoints are parsed by formats.tensor_bundle
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
    "jinja2": {"web.app"},
}
MUTATING_CALLS = {"remove", "unlink", "rename", "replace", "rmtree", "rmdir", "move", "truncate"}
# Path methods that change files whatever the receiver is called (str.replace is not one).
PATH_MUTATORS = {"unlink", "rmdir", "write_bytes", "write_text", "symlink_to", "hardlink_to"}
# fsswap: the renameat2 half of fsops; fsclone: its copying half (kept versions); fsfetch: its
# receiving half (a file streamed back from the object store); fsunpack: its unpacking half (a
# tar object of several files streamed back)
MUTATORS = {"fs.fsops", "fs.fsswap", "fs.fsclone", "fs.fsfetch", "fs.fsunpack"}
# Programs run with `python -m`: they talk to their parent on stdout and exit with a code.
PROGRAMS = {
    "__main__",
    "children.keras_load_probe",
    "children.config_child",
    "children.json_h5_probe",
    "children.torch_load_probe",
    "children.folder_load_probe",
    "children.hf_load_probe",
    "children.sandbox",
    "children.protocol",  # their shared half that prints the answer (`protocol.answer`)
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
    if module in ("__init__", "__main__", "logs"):
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


def test_every_import_of_our_own_code_names_a_module_that_exists() -> None:
    """mypy ignores missing imports (for third-party packages without stubs), so it would
    pass an import of a module of ours that was renamed away; an import inside a function
    then fails only when that code runs (a renamed `core.metrics` did, in `ckpt scan`)."""
    known = set(modules()) | {"__init__"}
    missing = {
        f"{name} imports {target}"
        for name, tree in modules().items()
        for target in ours(name, tree)
        if target not in known and not target.startswith("migrations")
    }
    assert not missing, sorted(missing)


def test_layers_import_only_the_layers_below_them() -> None:
    for name, tree in modules().items():
        for target in ours(name, tree):
            source, dest = layer(name), layer(target)
            if source != dest:
                assert dest in MAY_IMPORT[source], f"{name} imports {target}"


def lazy_commands() -> set[str]:
    """The command modules `cli.group` imports by name (`COMMANDS`, "module:attribute")."""
    for node in ast.walk(modules()["cli.group"]):
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "COMMANDS":
            table = ast.literal_eval(node.value)
            return {"cli." + target.split(":")[0] for target in table.values()}
    raise AssertionError("cli.group has no COMMANDS table")


def import_graph() -> dict[str, set[str]]:
    """Who imports whom, counting every import: at module level, inside functions, and under
    `if TYPE_CHECKING:` too (a type-only cycle is two modules that still need each other to be
    read), plus the command modules `cli.group` imports by name. A package importing its own
    modules is no cycle: Python runs its `__init__` before any of them."""
    graph = {
        name: {t for t in ours(name, tree) if t != name and not t.startswith(name + ".")}
        for name, tree in modules().items()
    }
    graph["cli.group"] |= lazy_commands()
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's components of more than one module: each is one or more import cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_counting_imports_inside_functions() -> None:
    """A function-level import hides a cycle from Python, not from the design: the two modules
    still need each other. Every edge inside a cycle must be one the rail branch removes."""
    graph = import_graph()
    unexplained = []
    for component in strongly_connected(graph):
        edges = {(a, b) for a in component for b in graph[a] & component}
        if edges:
            unexplained.append(" ".join(f"{a}->{b}" for a, b in sorted(edges)))
    assert not unexplained, "import cycles:\n" + "\n".join(unexplained)


def test_the_cycle_check_counts_hidden_imports() -> None:
    """The graph sees an import inside a function and under TYPE_CHECKING, and a component of
    two modules importing each other is found (the cycles the module-level check missed)."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .model import Format\n"
        "def f():\n    from .card import facts\n"
    )
    assert ours("core.example", ast.parse(source)) == {"core.model", "core.card"}
    assert strongly_connected({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [{"a", "b"}]
    assert "cli.checkpoints" in import_graph()["cli.group"]


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


# The filesystem calls that move, delete or rewrite a checkpoint's files (fs.fsops, its halves
# fs.fsswap and fs.fsclone). Outside fs/ only the rail makes them, and the writers below, which
# write an artifact beside a checkpoint or a checkpoint's compressed form over it.
RAIL = "usecases.rail"
CHECKPOINT_ACTS = {
    "fs.fsops": {"move_to_trash", "restore", "purge", "rewrite"},
    "fs.fsswap": {"publish_new", "replace_if_same", "move_new"},
    "fs.fsclone": {"clone_new", "copy_into", "new_folder"},
    "fs.fsfetch": {"receive"},
    "fs.fsunpack": {"receive_tree"},
}
# Writer module -> its entry points: each called only inside the rail's `acting_on` block (the
# run's lease held, the checkpoint re-checked under it, the act audited).
WRITERS = {
    "transforms.split": {"split"},
    "transforms.torch_split": {"split"},
    "transforms.safetensors_out": {"write"},
    "transforms.consolidate": {"split"},
    "transforms.hf_split": {"split"},
    "transforms.deepspeed_consolidate": {"split"},
    "transforms.compress": {"compress"},
    "transforms.export_json_h5": {"export"},
    "usecases.describe": {"write_card"},
}


def _imported_names(name: str, tree: ast.Module) -> dict[str, str]:
    """local name -> our module or `module.function` it stands for, in module `name`."""
    is_package = (PACKAGE / name.replace(".", "/") / "__init__.py").exists()
    here = name.split(".") if is_package else name.split(".")[:-1]
    if name in ("__init__", "__main__", "api", "logs"):
        here = []
    found = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        base = here[: len(here) - (node.level - 1)]
        target = ".".join(base + (node.module.split(".") if node.module else []))
        for alias in node.names:
            found[alias.asname or alias.name] = f"{target}.{alias.name}".lstrip(".")
    return found


def _called(node: ast.Call, names: dict[str, str]) -> str | None:
    """`module.function` a call calls, when it is one of ours imported by name or by module."""
    func = node.func
    if isinstance(func, ast.Name):
        return names.get(func.id)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        module = names.get(func.value.id)
        return f"{module}.{func.attr}" if module else None
    return None


def _inside_the_rail(tree: ast.Module, names: dict[str, str]) -> set[int]:
    """ids of the call nodes inside a `with rail.acting_on(...)` block."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.With):
            continue
        if any(
            isinstance(item.context_expr, ast.Call)
            and _called(item.context_expr, names) == f"{RAIL}.acting_on"
            for item in node.items
        ):
            for statement in node.body:
                inside |= {id(n) for n in ast.walk(statement) if isinstance(n, ast.Call)}
    return inside


def test_only_the_rail_moves_deletes_or_rewrites_a_checkpoint() -> None:
    """Prune, purge, trash restore, restore --version, the disk guard, the space reserve and
    version capture act through `usecases.rail`; nothing else calls the mutator's acts."""
    acts = {f"{module}.{fn}" for module, fns in CHECKPOINT_ACTS.items() for fn in fns}
    offenders = []
    for name, tree in modules().items():
        if layer(name) == "fs" or name == RAIL or name in WRITERS:
            continue
        names = _imported_names(name, tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _called(node, names) in acts:
                offenders.append(f"{name}:{node.lineno} calls {_called(node, names)}")
    assert not offenders, "act through usecases.rail instead: " + "; ".join(offenders)


def test_the_writers_run_only_inside_the_rails_acting_on() -> None:
    """Split, export, compress and the card write under the lease, after the re-check, audited."""
    entries = {f"{module}.{fn}" for module, fns in WRITERS.items() for fn in fns}
    offenders = []
    for name, tree in modules().items():
        if name in WRITERS:
            continue
        names = _imported_names(name, tree)
        inside = _inside_the_rail(tree, names)
        for node in ast.walk(tree):
            called = _called(node, names) if isinstance(node, ast.Call) else None
            if called in entries and id(node) not in inside:
                offenders.append(f"{name}:{node.lineno} calls {called}")
    assert not offenders, "call it inside `with rail.acting_on(...)`: " + "; ".join(offenders)


def test_the_rail_itself_takes_the_lease_rechecks_and_audits() -> None:
    """The rail is no pass-through: its acts take the run's lease, re-check, and audit."""
    source = ast.unparse(modules()[RAIL])
    for step in (
        "store.leases.lease(",
        "guards.recheck(",
        "store.acts.audited(",
        "store.acts.claim(",
    ):
        assert step in source, step


# The object store's adapters (client libraries behind `remote.store.ObjectStore`): a use case
# names the interface, never one of them, so another service joins as one more adapter.
STORE_ADAPTERS = {"remote.s3", "remote.s3_multipart"}


def test_use_cases_reach_the_object_store_only_through_its_interface() -> None:
    offenders = [
        f"{name} imports {target}"
        for name, tree in modules().items()
        if layer(name) != "remote"
        for target in ours(name, tree)
        if target in STORE_ADAPTERS
    ]
    assert not offenders, "use remote.store.ObjectStore / open_store: " + "; ".join(offenders)
    store = next(t for t in modules().items() if t[0] == "remote.store")[1]
    assert not third_party(store) & {"boto3", "botocore"}


def test_the_tier_act_goes_through_the_rails_acting_on() -> None:
    """`tier_one` takes the lease, re-checks and audits by `rail.acting_on`, never by copies of
    its steps."""
    name = "usecases.tier.tiering"
    tree, names = modules()[name], _imported_names(name, modules()[name])
    [tier_one] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "tier_one"]
    calls = {_called(n, names) for n in ast.walk(tier_one) if isinstance(n, ast.Call)}
    assert f"{RAIL}.acting_on" in calls
    source = ast.unparse(tree)
    assert "guards.recheck(" not in source and "store.acts.audited(" not in source


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path, node, nxt]
            if nxt not in state and (found := visit(nxt, [*path, node])):
                return found
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node, [])):
            return found
    return None


def test_no_import_cycle_among_the_use_cases_counting_imports_in_functions() -> None:
    """The use cases compose downwards: the indexer may call versions and recovery, never the
    reverse (callers re-index after a restore), and the disk guard sits above retention."""
    cases = {name: tree for name, tree in modules().items() if layer(name) == "usecases"}
    graph = {
        name: {t for t in ours(name, tree) if t in cases} - {name} for name, tree in cases.items()
    }
    found = _cycle(graph)
    assert found is None, "import cycle: " + " -> ".join(found or [])


def test_use_cases_call_no_private_function_of_another_module() -> None:
    """A use case that needs another's helper gets a public function, named for what it does."""
    offenders = []
    for name, tree in modules().items():
        if layer(name) != "usecases":
            continue
        names = _imported_names(name, tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                module = names.get(node.value.id)
                private = node.attr.startswith("_") and not node.attr.startswith("__")
                if module in modules() and private:
                    offenders.append(f"{name}:{node.lineno} uses {module}.{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                offenders += [
                    f"{name}:{node.lineno} imports {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert not offenders, "; ".join(offenders)
