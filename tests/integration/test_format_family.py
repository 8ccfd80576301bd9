"""A new format is one module and one row (issue 42): a toy format, written here into a module
of its own outside the package and registered through `core.families.register`, is indexed,
judged complete or not, resumed from, refused a split, described, shown and load-checked by
the real CLI (`cli.main.run`, in this process; the reader child imports the module from the
row's `module`), with no other file of the package touched. The toy reader is real code
reading real bytes: a bad toy file is caught like any other format's."""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ckpt_daemon.children import reader_child
from ckpt_daemon.cli.main import run
from ckpt_daemon.core import families
from ckpt_daemon.core.errors import CorruptCheckpoint, UsageError
from ckpt_daemon.core.model import Format
from tests.support.workspace import Workspace

# The whole format: its bytes, its reader, its resume rule, its load check, and its row.
TOY_MODULE = '''
"""Toy checkpoints: `TOYCKPT\\n`, one JSON line of facts, `END\\n` once the save is whole."""

import json

from ckpt_daemon.core import families
from ckpt_daemon.core.errors import CorruptCheckpoint
from ckpt_daemon.core.resume import Resumability
from ckpt_daemon.core.model import CheckpointInfo, Format, Kind, OptimizerInfo

MAGIC, END = b"TOYCKPT\\n", b"END\\n"
TOY = Format.add("toy-ckpt")


def read(raw, head, size):
    if not head.startswith(MAGIC):
        return None  # not ours: the next row's reader looks
    raw.seek(0)
    data = raw.read(size)
    if not data.endswith(END):
        raise CorruptCheckpoint("toy checkpoint without its END line")
    facts = json.loads(data[len(MAGIC) : -len(END)])
    optimizer = facts.get("optimizer_bytes", 0)
    return CheckpointInfo(
        format=TOY,
        kind=Kind.FULL if optimizer else Kind.WEIGHTS,
        model_class="ToyNet",
        n_params=facts["n_params"],
        optimizer=OptimizerInfo("ToySGD", state_bytes=optimizer) if optimizer else None,
        recorded={"epoch": facts["epoch"], "step": None, "metrics": {}},
    )


def resume(facts):
    if facts.optimizer_bytes:
        return Resumability(True, "toy checkpoint with its optimizer: toy.resume(path)")
    return Resumability(False, "toy weights alone: the toy optimizer would restart")


def load(c, mode):
    return True, f"loads with toy ({c.path})"


ROW = families.register(
    families.Family(
        TOY,
        resume,
        reader=read,
        suffixes=(".toy",),
        split_refusal="a toy checkpoint keeps its optimizer inside its weights",
        load=load,
        load_line="import toy; model = toy.load({path})",
        module=__name__,
    )
)
'''


@pytest.fixture
def toy_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The toy format's module in a folder of its own, on our path and on the reader child's
    (PYTHONPATH); its row and module forgotten afterwards."""
    folder = tmp_path / "plugin"
    folder.mkdir()
    (folder / "toy_format.py").write_text(TOY_MODULE)
    monkeypatch.syspath_prepend(str(folder))
    # Unset in CI (the package is installed): the child then finds it the same way.
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), *inherited]))
    yield
    families.unregister("toy-ckpt")
    sys.modules.pop("toy_format", None)


@pytest.fixture
def toy(toy_module: None) -> Any:
    return importlib.import_module("toy_format")


def toy_file(path: Path, epoch: int, optimizer_bytes: int, *, whole: bool = True) -> Path:
    facts = {"epoch": epoch, "n_params": 1234, "optimizer_bytes": optimizer_bytes}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"TOYCKPT\n" + json.dumps(facts).encode() + (b"END\n" if whole else b""))
    return path


def ckpt(ws: Workspace, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run(["--config", str(ws.config), *args])
    out, err = capsys.readouterr()
    return code, out, err


def listed(ws: Workspace, capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, Any]]:
    code, out, err = ckpt(ws, capsys, "list", "--all", "--json")
    assert code == 0, err
    return {Path(r["path"]).name: r for r in json.loads(out)}


def test_a_toy_format_is_one_module_and_one_row(
    tmp_path: Path, toy: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = Workspace(tmp_path / "ws", settle_seconds=60)
    run_dir = ws.root / "exp1"
    full = toy_file(run_dir / "e01.toy", 1, 4096)
    toy_file(run_dir / "e02.toy", 2, 0)
    saving = toy_file(run_dir / "e03.toy", 3, 4096, whole=False)

    # listing: scanned by the row's suffix and reader (in the reader child)
    code, _out, err = ckpt(ws, capsys, "scan")
    assert code == 0, err
    rows = listed(ws, capsys)
    assert rows["e01.toy"]["format"] == rows["e02.toy"]["format"] == "toy-ckpt"
    assert rows["e01.toy"]["status"] == rows["e02.toy"]["status"] == "ok"
    assert rows["e01.toy"]["kind"] == "full" and rows["e02.toy"]["kind"] == "weights"

    # completion: a save without its END line is incomplete while young, corrupt once settled
    assert rows["e03.toy"]["status"] == "incomplete"
    assert "not settled yet: toy checkpoint without its END line" in rows["e03.toy"]["reason"]
    old = saving.stat().st_mtime - 3600
    os.utime(saving, (old, old))
    assert ckpt(ws, capsys, "scan")[0] != 0  # a corrupt file is a partial failure
    assert listed(ws, capsys)["e03.toy"]["status"] == "corrupt"
    toy_file(saving, 3, 0)  # the save finished: whole, weights only
    assert ckpt(ws, capsys, "scan")[0] == 0
    assert listed(ws, capsys)["e03.toy"]["status"] == "ok"

    # resume: the row's rule, in latest --resumable (its SQL pre-filter too) and its reason
    code, out, err = ckpt(ws, capsys, "latest", "--run", "exp1", "--resumable", "--json")
    assert code == 0, err
    latest = json.loads(out)
    assert latest["path"] == str(full) and latest["resumable"] is True
    assert latest["resume_reason"] == "toy checkpoint with its optimizer: toy.resume(path)"
    code, out, _err = ckpt(ws, capsys, "latest", "--run", "exp1", "--json")
    assert json.loads(out)["resume_reason"] == "toy weights alone: the toy optimizer would restart"

    # split: refused with the row's reason, exit 2, nothing written
    code, _out, err = ckpt(ws, capsys, "split", str(full))
    assert code == UsageError.exit_code
    assert f"not split: {full} is toy-ckpt: a toy checkpoint keeps its optimizer" in err
    assert sorted(p.name for p in run_dir.iterdir()) == ["e01.toy", "e02.toy", "e03.toy"]

    # describe and show: from what the row's reader recorded
    code, out, err = ckpt(ws, capsys, "show", str(full), "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["format"] == "toy-ckpt" and shown["n_params"] == 1234
    code, out, err = ckpt(ws, capsys, "describe", str(full))
    assert code == 0, err
    assert "toy-ckpt" in out and "toy.resume(path)" in out
    assert f"import toy; model = toy.load({json.dumps(str(full))})" in out

    # verify --load: the row's load check
    code, out, err = ckpt(ws, capsys, "verify", str(full), "--load", "--json")
    assert code == 0, err
    assert f"loads with toy ({full})" in out


def test_a_reader_child_started_before_the_row_learns_it(toy_module: None, tmp_path: Path) -> None:
    """The service keeps one reader child: a format registered after it started is read by a
    new child that imports the row's module."""
    path = toy_file(tmp_path / "e01.toy", 1, 4096)
    with reader_child.session():
        with pytest.raises(CorruptCheckpoint):  # unknown: its bytes look like a safetensors
            reader_child.read(path)
        importlib.import_module("toy_format")
        assert reader_child.read(path).format == "toy-ckpt"


def test_the_toy_row_leaves_no_trace_once_forgotten(toy: Any) -> None:
    """The row is the format: while registered every table answers it, and it is a `Format`."""
    assert Format("toy-ckpt") is toy.TOY
    assert ".toy" in families.suffixes()
    families.unregister(toy.TOY)
    assert families.row("toy-ckpt") is None and ".toy" not in families.suffixes()
    assert "toy-ckpt" not in {f.value for f in Format}  # the vocabulary is the built-in one


def test_every_row_names_its_parts_in_the_layer_that_runs_them() -> None:
    """A row's references point into the layer that resolves them, never up from it: readers
    into formats, layouts into fs, splitters into transforms (run by usecases), loads into
    usecases. And each resolves."""
    layers = {"reader": "formats", "layout": "fs", "splitter": "transforms", "load": "usecases"}
    for row in families.rows():
        for field, layer in layers.items():
            ref = getattr(row, field)
            if isinstance(ref, str):
                assert ref.split(".")[0] == layer, (row.format, field, ref)
                assert families.resolve(ref) is not None
