"""Loading a checkpoint never runs its code (issue 20, item 5): the hostile-model corpus.

Real files written by real Keras 3 and tf-keras (tests/support/hostile_models.py, in a child):
a `Lambda` whose marshalled function, a custom layer, and a custom activation, each as legacy
`.h5` and as `.keras`, every one appending to a marker file outside the root when its code runs
(the custom ones' module, `hostile_layers.py`, lies in the run folder, the cwd of the commands:
importing it writes the marker too). The marker's folder is world-writable, so a load child
that ran with fewer rights could still write it: a clean marker means no code ran.

Every loading path, through the `ckpt` a user runs from the run folder: `verify --load` (with
a split's inference artifact: the split's verification), `split --layout json+h5`. Each file
is refused with the layer and the reason; a plain checkpoint still loads, in the sandbox.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ckpt_daemon.children.sandbox import CONFINED as SANDBOXED
from tests.support import forked_python
from tests.support import hostile_models as hm
from tests.support.workspace import Workspace

SUPPORT = Path(__file__).resolve().parents[1] / "support"
CKPT = Path(sys.executable).with_name("ckpt")  # the console script a user runs
CHILD_ENV = {
    **{k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"},
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "CUDA_VISIBLE_DEVICES": "",
}
SPLIT = [("keras", "lambda", ".h5"), ("tf_keras", "lambda", ".h5")]  # each given an artifact
SLOW = 1800  # a TensorFlow child per file on a loaded 2-core machine


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    marker_dir = Path(tempfile.mkdtemp(prefix="ckpt-hostile-marker-"))
    marker_dir.chmod(0o777)  # anyone may write it: only refusing keeps it empty
    marker = marker_dir / "ran"
    ws = Workspace(tmp_path_factory.mktemp("hostile_models"))
    folder = ws.root / "run"
    for lib in hm.LIBS:
        made = forked_python.run(
            [sys.executable, str(SUPPORT / "hostile_models.py"), lib, str(folder), str(marker)],
            env=CHILD_ENV,
            timeout=600,
        )
        assert made.returncode == 0, made.stderr[-3000:]
    assert not marker.exists()
    ws.run("scan")
    try:
        yield {"ws": ws, "folder": folder, "marker": marker, "files": hm.files(folder)}
    finally:
        shutil.rmtree(marker_dir)


def ckpt(corpus: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    """`ckpt ARGS` as a user runs it, from the run folder (where `hostile_layers.py` is)."""
    ws: Workspace = corpus["ws"]
    return subprocess.run(
        [str(CKPT), "--config", str(ws.config), *args],
        capture_output=True,
        text=True,
        timeout=SLOW,
        cwd=corpus["folder"],
    )


def ran(corpus: dict[str, Any]) -> str:
    marker: Path = corpus["marker"]
    return marker.read_text() if marker.exists() else ""


@pytest.fixture(scope="module")
def verified(corpus: dict[str, Any]) -> dict[str, Any]:
    files = corpus["files"]
    for key in SPLIT:  # h5py only: nothing is loaded to split
        split = ckpt(corpus, "split", str(files[key]))
        assert split.returncode == 0, split.stderr
    done = ckpt(corpus, "verify", "--load", "--json", *map(str, files.values()))
    return {"done": done, "verdicts": json.loads(done.stdout), "ran": ran(corpus)}


def test_verify_load_runs_none_of_the_corpus(verified: dict[str, Any]) -> None:
    assert verified["ran"] == ""
    assert verified["done"].returncode == 3, verified["done"].stderr


@pytest.mark.parametrize("key", list(hm.files(Path())), ids="-".join)
def test_verify_load_refuses_each_file_with_its_reason(
    corpus: dict[str, Any], verified: dict[str, Any], key: tuple[str, str, str]
) -> None:
    path = corpus["files"][key]
    (load,) = [v for v in verified["verdicts"] if v["path"] == str(path) and "load" in v["detail"]]
    assert not load["ok"]
    assert load["detail"].startswith("load refused, nothing of the file run: "), load
    assert f"{path}: layer " in load["detail"] and hm.KINDS[key[1]] in load["detail"], load
    if key in SPLIT:  # its inference artifact is checked (and refused) as well
        artifact = path.with_name(path.name.replace(".h5", ".inference.h5"))
        assert f"{artifact}: layer 'evil' (Lambda)" in load["detail"], load


# Exported as json+h5: archives, and (item 8) legacy `.h5` files of tf-keras (Keras 3's are
# refused before anything is read: its model_from_json cannot take their config).
EXPORTED = [k for k in hm.files(Path()) if k[2] == ".keras" or k[0] == "tf_keras"]


@pytest.mark.parametrize("key", EXPORTED, ids="-".join)
def test_json_h5_export_refuses_each_file_and_writes_nothing(
    corpus: dict[str, Any], key: tuple[str, str, str]
) -> None:
    path = corpus["files"][key]
    done = ckpt(corpus, "split", "--layout", "json+h5", str(path))
    assert ran(corpus) == ""
    assert done.returncode != 0
    assert "load refused, nothing run" in done.stderr and hm.KINDS[key[1]] in done.stderr, (
        done.stderr
    )
    stem = path.name.rsplit(".", 1)[0]
    assert not list(path.parent.glob(f"{stem}.json")), "nothing exported"
    assert not list(path.parent.glob(f"*{stem}*weights.h5"))


def test_a_plain_checkpoint_loads_in_the_sandbox(
    corpus: dict[str, Any], keras_checkpoints: Path
) -> None:
    """The load child runs in the sandbox (`children.sandbox`), and says so."""
    plain = corpus["folder"] / "plain.h5"
    shutil.copy2(keras_checkpoints / "k3/legacy/full.h5", plain)
    corpus["ws"].run("scan")
    done = ckpt(corpus, "verify", "--load", "--json", str(plain))
    assert done.returncode == 0, done.stdout + done.stderr
    (load,) = [v for v in json.loads(done.stdout) if "load" in v["detail"]]
    assert load["ok"] and load["detail"] == f"loads with keras ({SANDBOXED})", load
