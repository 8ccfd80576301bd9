"""The module rules of ARCHITECTURE.md, checked on the source so they stay true."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "daemon"
PURE = {
    "model",
    "completion",
    "query",
    "units",
    "views",
    "render",
    "retention",
    "formats/keras_config",
    "formats/tf_state",
}
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
}
CLOCK_READS = ("time.time(", "time.time_ns(", "monotonic(", "perf_counter(", ".now(", ".today(")
# Which of our modules may import each third-party library.
OWNERS = {
    "sqlalchemy": {
        "schema",
        "db",
        "store",
        "store_reads",
        "store_actions",
        "store_recovery",
        "store_leases",
    },
    "alembic": {"db"},
    "h5py": {
        "formats/hdf5",
        "formats/keras_h5",
        "formats/keras_v3",
        "transforms/split",
        "transforms/compress",
        "transforms/bounds",
        "transforms/marker",
    },
    "watchdog": {"watcher"},
    "apscheduler": {"jobs"},
    "tensorflow": {"formats/tf_probe"},
    "keras": set(),  # imported by name in formats/keras_load_probe, a child process
    "tf_keras": set(),
    "blake3": {"hashing"},
    "yaml": {"config"},
    "click": {"cli", "cli_admin", "cli_retention", "cli_artifacts"},
    "rich": {"cli"},
}
MUTATING_CALLS = {"remove", "unlink", "rename", "replace", "rmtree", "rmdir", "move", "truncate"}
# Path methods that change files whatever the receiver is called (str.replace is not one).
PATH_MUTATORS = {"unlink", "rmdir", "write_bytes", "write_text", "symlink_to", "hardlink_to"}
MUTATORS = {"fsops", "fsswap"}  # fsswap: the renameat2 half of fsops


def modules() -> dict[str, ast.Module]:
    return {
        str(path.relative_to(PACKAGE).with_suffix("")): ast.parse(path.read_text())
        for path in PACKAGE.rglob("*.py")
    }


def imported(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_pure_modules_import_no_io_and_read_no_clock() -> None:
    trees = modules()
    for name in PURE:
        assert not imported(trees[name]) & IO_LIBRARIES, name
        source = ast.unparse(trees[name])
        assert not [call for call in CLOCK_READS if call in source], name


def test_third_party_libraries_stay_in_their_modules() -> None:
    for name, tree in modules().items():
        for library in imported(tree) & set(OWNERS):
            assert name in OWNERS[library], f"{name} imports {library}"


def test_only_fsops_mutates_the_filesystem() -> None:
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
        if name in (
            "cli",
            "cli_admin",
            "cli_retention",
            "cli_artifacts",
            "__main__",
            "formats/tf_probe",
            "formats/keras_load_probe",
        ):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                call = ast.unparse(node.func)
                assert call not in ("print", "sys.exit", "exit", "os._exit"), f"{name}: {call}"
