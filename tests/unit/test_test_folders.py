"""The test folders keep their promises, checked statically (ast), like the architecture test:
unit tests import no TensorFlow/Keras and start no processes (directly, through a support
module or through a fixture); every test file sits in unit/, integration/ or e2e/; conftest.py
files only declare fixtures and nobody imports from them."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
FOLDERS = ("unit", "integration", "e2e")

# Importing any of these means TensorFlow/Keras/torch in the process or a process started.
FORBIDDEN_MODULES = {"tensorflow", "keras", "tf_keras", "subprocess", "multiprocessing", "pty"}
FORBIDDEN_MODULES |= {
    "torch",
    "lightning",
    "pytorch_lightning",
    "safetensors",
    "transformers",
    "jax",
}
FORBIDDEN_CALLS = {
    ("os", name)
    for name in (
        "system",
        "popen",
        "fork",
        "forkpty",
        "posix_spawn",
        "posix_spawnp",
        "spawnl",
        "spawnle",
        "spawnlp",
        "spawnlpe",
        "spawnv",
        "spawnve",
        "spawnvp",
        "spawnvpe",
        "execl",
        "execle",
        "execlp",
        "execlpe",
        "execv",
        "execve",
        "execvp",
        "execvpe",
    )
} | {("asyncio", "create_subprocess_exec"), ("asyncio", "create_subprocess_shell")}
FORBIDDEN_NAMES = {"ProcessPoolExecutor"}

# Every fixture of a conftest.py is one or the other; a new fixture must be classified here.
PROCESS_FIXTURES = {  # generate checkpoints with TensorFlow, or run the CLI or the daemon
    "keras_checkpoints",
    "manifest",
    "workspace",
    "keras_root",
    "scanned",
    "daemon_ws",
    "training_runs",
    "torch_files",
    "async_saves",  # Orbax (jax, Keras) and DCP (torch) saves written in child processes
    "hf_runs",  # a real transformers Trainer run, in a child
    "deepspeed_runs",  # real DeepSpeed ZeRO saves (torchrun, 2 ranks), in children
    "peft_runs",  # real peft LoRA adapters (save_pretrained), in a child
    "postgres",  # starts a PostgreSQL server; the two below may ask it for a database
    "catalog_url",
    "empty_catalog_url",
}
# Autouse: they stop nothing a unit test started, only check that no thread is left, or put
# the `ckpt` logger back as they found it.
PURE_FIXTURES = {
    "_no_daemon_outlives_its_test",
    "_no_thread_outlives_its_test",
    "_no_thread_outlives_its_module",
    "_no_thread_outlives_the_session",
    "_the_ckpt_logger_is_left_as_found",  # puts back the `ckpt` logger's handlers
}


def module_name(node: ast.ImportFrom, path: Path) -> str:
    """The absolute module an `import from` names (relative ones resolved against `path`)."""
    if not node.level:
        return node.module or ""
    package = path.relative_to(TESTS.parent).with_suffix("").parts[: -node.level]
    return ".".join([*package, *([node.module] if node.module else [])])


def support_module(dotted: str) -> Path | None:
    if dotted != "tests.support" and not dotted.startswith("tests.support."):
        return None
    path = TESTS.parent.joinpath(*dotted.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def imported_support(tree: ast.Module, path: Path) -> set[Path]:
    """The support modules `tree` imports, names taken from the package resolved to the
    submodule that defines them (the package re-exports them)."""
    found: set[Path] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {p for alias in node.names if (p := support_module(alias.name))}
        elif isinstance(node, ast.ImportFrom):
            module = module_name(node, path)
            target = support_module(module)
            if target is None:
                continue
            found.add(target)
            defined_in = reexports(target)
            for alias in node.names:
                sub = support_module(f"{module}.{alias.name}")
                if sub is not None and sub.is_file():
                    found.add(sub)  # `from tests.support import hostile_files`
                elif alias.name in defined_in:
                    found.add(defined_in[alias.name])
    return found


def reexports(init: Path) -> dict[str, Path]:
    """{name: the module it comes from} for a package's `from .x import name` lines."""
    if init.name != "__init__.py" or not init.is_file():
        return {}
    tree = ast.parse(init.read_text())
    names: dict[str, Path] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = init.parent / f"{node.module}.py"
    return names


def process_or_tensorflow(tree: ast.Module) -> list[str]:
    """What in `tree` imports TensorFlow/Keras or starts a process (one line each)."""
    found = []
    for node in ast.walk(tree):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            modules = [node.module]
            if node.module in ("os", "asyncio"):
                modules += [f"{node.module}.{a.name}" for a in node.names]
        for module in modules:
            top, _, rest = module.partition(".")
            if top in FORBIDDEN_MODULES or (top, rest) in FORBIDDEN_CALLS:
                found.append(f"line {node.lineno}: imports {module}")
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and (node.value.id, node.attr) in FORBIDDEN_CALLS
        ):
            found.append(f"line {node.lineno}: uses {node.value.id}.{node.attr}")
        if isinstance(node, ast.Name | ast.alias):
            name = node.id if isinstance(node, ast.Name) else node.name
            if name in FORBIDDEN_NAMES:
                found.append(f"line {node.lineno}: uses {name}")
    return found


def fixtures_requested(tree: ast.Module) -> set[str]:
    """Argument names of every function (tests and local fixtures) plus `usefixtures` names."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            names |= {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "usefixtures"
        ):
            names |= {a.value for a in node.args if isinstance(a, ast.Constant)}
    return names


def unit_violations(path: Path, source: str | None = None) -> list[str]:
    tree = ast.parse(path.read_text() if source is None else source)
    found = process_or_tensorflow(tree)
    for module in sorted(imported_support(tree, path)):
        if not module.is_file():
            continue
        for problem in process_or_tensorflow(ast.parse(module.read_text())):
            found.append(f"imports {module.relative_to(TESTS)}, which {problem.split(': ')[1]}")
    for fixture in sorted(fixtures_requested(tree) & PROCESS_FIXTURES):
        found.append(f"requests fixture {fixture}, which starts processes")
    return found


def python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def declared_fixtures(conftest: Path) -> set[str]:
    names = set()
    for node in ast.parse(conftest.read_text()).body:
        if isinstance(node, ast.FunctionDef) and any(
            "fixture" in ast.unparse(d) for d in node.decorator_list
        ):
            names.add(node.name)
    return names


def test_unit_tests_import_no_tensorflow_and_start_no_processes() -> None:
    problems = [
        f"{path.relative_to(TESTS)}: {problem}"
        for path in python_files(TESTS / "unit")
        for problem in unit_violations(path)
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import subprocess\n", "imports subprocess"),
        ("import tensorflow as tf\n", "imports tensorflow"),
        ("from keras import layers\n", "imports keras"),
        ("import tf_keras\n", "imports tf_keras"),
        ("from multiprocessing import Pool\n", "imports multiprocessing"),
        ("import os\nos.system('ckpt scan')\n", "uses os.system"),
        ("from os import fork\n", "imports os.fork"),
        ("from concurrent.futures import ProcessPoolExecutor\n", "uses ProcessPoolExecutor"),
        ("from tests.support import Workspace\n", "support/workspace.py, which imports"),
        ("from tests.support.daemon import Daemon\n", "support/daemon.py, which imports"),
        ("def test_x(scanned):\n    pass\n", "requests fixture scanned"),
        ("@pytest.mark.usefixtures('daemon_ws')\ndef test_x():\n    pass\n", "fixture daemon_ws"),
    ],
)
def test_the_guard_catches_what_it_forbids(source: str, expected: str) -> None:
    found = unit_violations(TESTS / "unit" / "test_example.py", source)
    assert any(expected in problem for problem in found), found


def test_the_guard_lets_pure_tests_use_pure_support() -> None:
    source = "import os\nfrom tests.support import keras_csv\ndef test_x(tmp_path):\n    pass\n"
    assert unit_violations(TESTS / "unit" / "test_example.py", source) == []


def test_every_fixture_is_classified() -> None:
    declared = set().union(*(declared_fixtures(p) for p in TESTS.rglob("conftest.py")))
    assert declared == PROCESS_FIXTURES | PURE_FIXTURES


def test_every_test_file_is_in_a_level_folder_that_is_a_package() -> None:
    for path in python_files(TESTS):
        if path.name.startswith("test_"):
            assert path.relative_to(TESTS).parts[0] in FOLDERS, path
        # Packages: same-named test modules in different folders stay apart, and
        # `tests.support` imports the same way under `pytest` and `python -m pytest`.
        assert (path.parent / "__init__.py").is_file(), path


def test_conftest_files_only_declare_fixtures_and_are_never_imported() -> None:
    for conftest in TESTS.rglob("conftest.py"):
        for node in ast.parse(conftest.read_text()).body:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # the docstring
            if isinstance(node, ast.Import | ast.ImportFrom):
                continue
            assert isinstance(node, ast.FunctionDef), (conftest, ast.unparse(node)[:80])
            assert node.name in declared_fixtures(conftest) or node.name.startswith("pytest_")
    for path in python_files(TESTS):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
            assert not any(n.split(".")[-1] == "conftest" for n in names), (path, node.lineno)


def test_conftest_is_loaded_once_as_part_of_the_tests_package() -> None:
    """Loaded as a top-level `conftest` and imported again as `tests.conftest`, it was two
    modules with two lists of started daemons, one of which nothing ever stopped."""
    assert "conftest" not in sys.modules
    assert "tests.conftest" in sys.modules
