"""docs/cli-contract.md is the CLI's contract: its JSON documents, statuses and exit-code table,
checked against what the real `ckpt` prints and exits with (subprocesses, a real catalog, real
checkpoints)."""

from __future__ import annotations

import ast
import json
import re
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ckpt_daemon.cli.main import all_commands
from ckpt_daemon.core import errors
from tests.support import Workspace

REPO = Path(__file__).resolve().parents[2]
CONTRACT = (REPO / "docs" / "cli-contract.md").read_text()


# ---- the contract's JSON notation: `{a, b: [{c}], d: x|y, e?, NAME: value}`, `[ROW]`, `A + {...}`


@dataclass
class Obj:
    fields: dict[str, tuple[Any, bool]] = field(default_factory=dict)  # name -> (spec, optional)
    any_key: Any = None  # the spec of every value, when an UPPERCASE key stands for any name
    open_keys: bool = False


@dataclass
class ListOf:
    item: Any


@dataclass
class Choice:
    values: set[str]


LEAF = None
_TOKEN = re.compile(r"\s*(\.\.\.|[{}\[\],:+|]|[A-Za-z_][\w?-]*)")


class Parser:
    def __init__(self, text: str, names: dict[str, Any]) -> None:
        self.tokens = _TOKEN.findall(text)
        assert "".join(self.tokens) == re.sub(r"\s+", "", text), f"cannot read {text!r}"
        self.names, self.at = names, 0

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.tokens[self.at]
        assert expected is None or token == expected, (expected, token, self.tokens)
        self.at += 1
        return token

    def document(self) -> Any:
        spec = self.value()
        assert self.peek() is None, f"left over: {self.tokens[self.at :]}"
        return spec

    def value(self) -> Any:
        token = self.take()
        if token == "{":
            spec: Any = self.object()
        elif token == "[":
            if self.peek() == "...":
                self.take()
                spec = ListOf(LEAF)
            else:
                spec = ListOf(self.value())
            self.take("]")
        elif token in self.names:
            spec = self.names[token]
        else:
            choices = {token}
            while self.peek() == "|":
                self.take()
                choices.add(self.take())
            spec = Choice(choices) if len(choices) > 1 else LEAF
        if self.peek() == "+":
            self.take()
            more = self.value()
            assert isinstance(spec, Obj) and isinstance(more, Obj)
            spec = Obj({**spec.fields, **more.fields}, spec.any_key, spec.open_keys)
        return spec

    def object(self) -> Obj:
        spec = Obj()
        while self.peek() != "}":
            name = self.take()
            sub = LEAF
            if self.peek() == ":":
                self.take()
                sub = self.value()
            if name.isupper():
                spec.any_key, spec.open_keys = sub, True
            else:
                spec.fields[name.rstrip("?")] = (sub, name.endswith("?"))
            if self.peek() == ",":
                self.take()
        self.take("}")
        return spec


def contract_documents() -> dict[str, Any]:
    """{"list": spec, "trash purge": spec, ...} from the contract page's bullets."""
    section = CONTRACT.split("JSON documents (`--json`", 1)[1].split("\n\n", 2)[1]
    bullets = re.split(r"\n(?=- )", section.strip())
    names: dict[str, Any] = {}
    found: dict[str, Any] = {}
    for bullet in bullets:
        text = " ".join(line.strip() for line in bullet.splitlines())
        match = re.match(r"- (ROW|`ckpt ([a-z ]+) --json`): `([^`]+)`", text)
        assert match, f"a JSON bullet the test cannot read: {text[:80]}"
        spec = Parser(match.group(3), names).document()
        if match.group(1) == "ROW":
            names["ROW"] = spec
        else:
            found[match.group(2)] = spec
    return found


def conforms(value: Any, spec: Any, where: str) -> None:
    if spec is LEAF:
        return
    if isinstance(spec, Choice):
        assert value in spec.values, f"{where}: {value!r} is not one of {sorted(spec.values)}"
    elif isinstance(spec, ListOf):
        assert isinstance(value, list), f"{where}: not a list: {value!r}"
        for i, item in enumerate(value):
            conforms(item, spec.item, f"{where}[{i}]")
    else:
        assert isinstance(value, dict), f"{where}: not an object: {value!r}"
        for name, (sub, optional) in spec.fields.items():
            assert name in value or optional, f"{where}: no field {name!r} (has {sorted(value)})"
            if value.get(name) is not None:
                conforms(value[name], sub, f"{where}.{name}")
        if spec.open_keys:
            for name, item in value.items():
                if item is not None:
                    conforms(item, spec.any_key, f"{where}.{name}")


def test_the_notation_catches_a_missing_field() -> None:
    spec = Parser("{a, b: [{c, d: x|y}], e?, m: {NAME: v}}", {}).document()
    conforms({"a": 1, "b": [{"c": 1, "d": "x"}], "m": {"k": 1}}, spec, "doc")
    for broken in (
        {"b": []},  # no a
        {"a": 1, "b": [{"d": "x"}]},  # no c
        {"a": 1, "b": [{"c": 1, "d": "z"}]},  # d not x|y
        {"a": 1, "b": {}},  # b not a list
    ):
        with pytest.raises(AssertionError):
            conforms(broken, spec, "doc")


def test_every_json_option_is_in_the_contract() -> None:
    with_json = {
        name
        for name, command in all_commands()
        if any(param.name == "as_json" for param in command.params)
    }
    assert with_json == set(contract_documents())


# ---- the real output of every --json command


@pytest.fixture(scope="module")
def contract_ws(tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path) -> Workspace:
    """A root with one run of two real Keras `.h5` checkpoints (val_loss in their names)."""
    ws = Workspace(tmp_path_factory.mktemp("contract"))
    shutil.copytree(keras_checkpoints / "tfk" / "run_h5", ws.root / "exp1")
    # A pipeline stage, for `ckpt stage run` and `ckpt jobs` (it prints one result line).
    result = 'print(\'{"metrics": {"score": 0.5}, "note": "contract"}\')'
    stage = json.dumps([sys.executable, "-c", result])
    ws.config.write_text(
        ws.config.read_text() + f"pipeline:\n  - name: probe\n    command: {stage}\n"
    )
    return ws


@pytest.fixture(scope="module")
def documents(contract_ws: Workspace) -> dict[str, Any]:
    """Every --json command run once, in an order that leaves each something to report."""
    ws = contract_ws
    generations = [
        (ws.root / "exp1" / name).read_bytes()
        for name in ("weights.01-1.69.hdf5", "weights.02-1.68.hdf5")
    ]
    out: dict[str, Any] = {"scan": ws.json("scan")}
    out["list"] = ws.json("list")
    out["best"] = ws.json("best", "--metric", "val_loss")
    out["latest"] = ws.json("latest", "--run", "exp1")
    out["wait"] = ws.json("wait", "--run", "exp1", "--newer-than", "0", "--timeout", "5s")
    best = out["best"]["id"]
    other = next(r["id"] for r in out["list"] if r["id"] != best)
    out["show"] = ws.json("show", str(best))
    out["runs"] = ws.json("runs")
    out["status"] = ws.json("status")
    out["split"] = ws.json("split", str(best))
    out["compress"] = ws.json("compress", str(other))
    out["verify"] = ws.json("verify")
    out["prune"] = ws.json("prune", "--keep-last", "1")
    out["trash list"] = ws.json("trash", "list")
    out["trash purge"] = ws.json("trash", "purge", "--older-than", "0s", "--dry-run")
    out["log"] = ws.json("log")
    out["history"] = ws.json("history", "--run", "exp1")
    out["plot"] = ws.json("plot", "--run", "exp1", "--metric", "val_loss", "-o", "exp1.png")
    out["du"] = ws.json("du")
    out["stage run"] = ws.json("stage", "run", "probe", str(best))
    out["integrity"] = ws.json("integrity", str(best))  # a tf-keras .h5: its datasets read
    out["jobs"] = ws.json("jobs")
    out["tier"] = ws.json("tier", str(other), "--dry-run")  # no remote here: a skip, with why
    out["trash remote"] = ws.json("trash", "remote", str(other), "--dry-run")  # kept: no copy
    # A fixed name rewritten in place (its generations kept), then its first one put back.
    fixed = ws.root / "fixed" / "best.hdf5"
    fixed.parent.mkdir()
    for data in generations:
        fixed.write_bytes(data)
        ws.run("scan", str(fixed.parent))
    out["restore"] = ws.json("restore", str(fixed), "--version", "1")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(contract_documents()))
def test_json_output_carries_the_documented_fields(command: str, documents: dict[str, Any]) -> None:
    doc = documents[command]
    assert doc, f"ckpt {command} --json reported nothing to check"
    conforms(doc, contract_documents()[command], f"ckpt {command} --json")


@pytest.mark.slow
def test_the_fixture_exercises_nested_fields(documents: dict[str, Any]) -> None:
    """The nested lists the contract describes are not empty, so their items were checked."""
    assert documents["prune"]["runs"][0]["decisions"]
    assert any(d.get("done") for d in documents["prune"]["runs"][0]["decisions"])
    assert documents["trash purge"]["purged"] and documents["trash list"]
    assert documents["runs"][0]["best"] and documents["list"][0]["metrics"]
    assert documents["history"]["checkpoints"] and documents["history"]["epochs"]
    assert documents["plot"]["series"][0]["markers"] and documents["du"]["roots"][0]["runs"]


@pytest.mark.slow
def test_show_of_a_peft_adapter_carries_its_kind_and_base_model(
    workspace: Workspace, peft_runs: Path
) -> None:
    """The `show` shape's `base_model` object, on a real adapter (a real base's lineage)."""
    shutil.copytree(peft_runs / "models", workspace.root / "models")
    shutil.copytree(peft_runs / "runs" / "linked", workspace.root / "linked")
    workspace.run("scan")
    doc = workspace.json("show", str(workspace.root / "linked" / "lora"))
    conforms(doc, contract_documents()["show"], "ckpt show --json")
    assert doc["kind"] == "adapter" and doc["base_model"]["missing"] is None, doc["base_model"]
    assert doc["training_config"]["adapter"]["peft_type"] == "LORA"


@pytest.mark.slow
def test_plot_writes_a_png_of_every_checkpoint(
    contract_ws: Workspace, documents: dict[str, Any]
) -> None:
    from PIL import Image

    plotted = documents["plot"]
    assert {m["id"] for m in plotted["series"][0]["markers"]} == {
        r["id"] for r in documents["list"]
    }
    with Image.open(contract_ws.base / plotted["output"]) as image:
        assert image.format == "PNG" and image.size == (900, 500)


# ---- statuses: one vocabulary, in core.model, the contract page and `ckpt list --help`


def test_the_contract_and_list_help_name_every_status() -> None:
    from ckpt_daemon.core.model import CheckpointStatus

    section = CONTRACT.split("Statuses: ", 1)[1].split(". Audit event states", 1)[0]
    assert re.findall(r"(?:^|, )`(\w+)`", section) == [s.value for s in CheckpointStatus]
    result = subprocess.run(
        [sys.executable, "-m", "ckpt_daemon", "list", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    named = " ".join(result.stdout.split()).split("Only this status: ", 1)[1].split(".")[0]
    assert named.split(", ") == [s.value for s in CheckpointStatus]


# ---- exit codes: one table, in core.errors, the contract page and `ckpt --help`


def contract_exit_codes() -> dict[int, str]:
    section = CONTRACT.split("**Exit codes**", 1)[1].split("\n\n", 2)[1]
    rows = [line.strip("| ").split(" | ") for line in section.splitlines()[2:]]
    return {int(code): text for code, text in rows}


def test_the_contract_exit_code_table_is_the_code_table() -> None:
    assert contract_exit_codes() == errors.EXIT_CODES


def test_every_error_class_carries_a_documented_exit_code() -> None:
    classes = [
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, errors.CkptError)
    ]
    assert len(classes) >= 15
    for cls in classes:
        assert cls.exit_code in errors.EXIT_CODES, cls


def test_every_exception_class_lives_in_core_errors() -> None:
    """Outside core/errors.py, only a private exception (control flow inside one module) is
    allowed; anything a caller may catch or a user may see is defined there."""
    defined = {name for name, value in vars(errors).items() if isinstance(value, type)}
    bases = defined | {"Exception", "BaseException", "RuntimeError", "ValueError", "OSError"}
    for path in (REPO / "daemon").rglob("*.py"):
        if path.relative_to(REPO).as_posix() == "daemon/core/errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                names = {ast.unparse(b).split(".")[-1] for b in node.bases}
                assert not names & bases, f"{path}: class {node.name} belongs in core/errors.py"


def test_help_ends_with_the_exit_code_table() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ckpt_daemon", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0
    assert " ".join(errors.exit_code_text().split()) in " ".join(done.stdout.split())


def ckpt(ws: Workspace, *args: str) -> subprocess.CompletedProcess[str]:
    return ws.run(*args, check=False)


@pytest.mark.slow
def test_exit_codes_of_real_failures(workspace: Workspace, keras_checkpoints: Path) -> None:
    shutil.copytree(keras_checkpoints / "tfk" / "run_h5", workspace.root / "exp1")
    (workspace.root / "exp1" / "weights.03-1.60.hdf5").write_bytes(b"\x89HDF\r\n\x1a\n" + b"x" * 64)
    scanned = ckpt(workspace, "scan")
    assert scanned.returncode == errors.PartialFailure.exit_code, scanned.stderr
    assert "ckpt: error: scan: 1 item(s) failed" in scanned.stderr
    assert ckpt(workspace, "show", "999999").returncode == errors.NotFound.exit_code
    assert ckpt(workspace, "list", "--where", "val_loss ~ 1").returncode == 2
    assert ckpt(workspace, "no-such-command").returncode == 2


@pytest.mark.slow
def test_debug_is_the_option_not_a_word_in_argv(workspace: Workspace) -> None:
    """`-v` as the value of an option is a value; only the global `-v` shows tracebacks."""
    assert workspace.run("scan").returncode == 0  # creates the catalog at head
    catalog = workspace.base / "state" / "catalog.db"
    with sqlite3.connect(catalog) as conn:
        conn.execute("DROP TABLE metrics")  # any read of metrics now fails unexpectedly
    plain = ckpt(workspace, "best", "--metric", "-v")
    assert plain.returncode == 1, plain.stderr
    assert "ckpt: unexpected error" in plain.stderr and "Traceback" not in plain.stderr
    debug = ckpt(workspace, "-v", "best", "--metric", "val_loss")
    assert debug.returncode == 1 and "Traceback" in debug.stderr, debug.stderr


# ---- the fast commands stay fast: what they import


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ("best", "--metric", "val_loss"),
        ("latest", "--run", "exp1", "--resumable"),
        ("list", "--json"),
        ("status",),
    ],
)
def test_hot_commands_import_no_heavy_library(
    contract_ws: Workspace, documents: dict[str, Any], args: tuple[str, ...]
) -> None:
    """`ckpt best`, `latest`, `list --json` and `status` run in scripts' loops: SQLAlchemy alone
    costs more than the rest of the command, and rich, h5py, numpy are never needed to answer."""
    script = (
        "import atexit, sys\n"
        "atexit.register(lambda: sys.stderr.write('LOADED=' + ','.join(sorted(m for m in "
        "('sqlalchemy', 'alembic', 'rich', 'h5py', 'numpy', 'tensorflow') "
        "if m in sys.modules)) + '\\n'))\n"
        "from ckpt_daemon.cli.main import main\n"
        f"main(['--config', {str(contract_ws.config)!r}, *{list(args)!r}])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "LOADED=\n" in done.stderr
