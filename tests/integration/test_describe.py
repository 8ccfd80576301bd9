"""Model cards (`ckpt describe`) and the json+h5 export on real Keras checkpoints.

What the card says is compared with what Keras itself reports for the same file
(`count_params()`, each layer's `count_params()` and trainable flag, the optimizer's class
and learning rate, the compiled loss and metrics, input and output shapes): read by the
test in one child process (both libraries, one after the other), never by the product. The
json+h5 exports are loaded in that child too (`model_from_json` + `load_weights`) and must
predict bit-identically to the full checkpoint. TensorFlow is never imported into this process
(nor by describe).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from ckpt_daemon.api import open_catalog
from ckpt_daemon.core.errors import UsageError
from ckpt_daemon.core.retention import Policy
from ckpt_daemon.usecases.describe import card_path, render
from tests.support.workspace import Workspace

REPO = Path(__file__).resolve().parents[2]
SUPPORT = REPO / "tests" / "support"
CHILD_ENV = {
    **{k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"},
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "CUDA_VISIBLE_DEVICES": "",
    "KERAS_BACKEND": "tensorflow",
    "PYTHONPATH": os.pathsep.join([str(REPO), str(SUPPORT)]),
}

# What Keras reports for each file (and whether each export predicts as its checkpoint): one
# child answers one spec per stdin line (a `TRUTH {...}` line each), tf-keras's and Keras 3's,
# so TensorFlow starts once for both libraries.
TRUTH = r"""
import json, sys, warnings
import numpy as np
warnings.simplefilter("ignore")
def names(metrics):
    out = []
    for m in metrics or []:
        out += names(m) if isinstance(m, (list, tuple)) else [m if isinstance(m, str) else m.name]
    return out
def answer(spec):
    if spec["lib"] == "tf_keras":
      import tf_keras as keras
    else:
      import keras
    if spec.get("make"):  # a tf-keras `.keras` (the generated fixtures hold only its HDF5 files)
        import keras_fixtures as kf
        x, y = kf.make_data()
        made = kf.build_model(keras, "tfk_zip", kf.LR_TFK)
        made.fit(x, y, epochs=2, batch_size=kf.BATCH, verbose=0)
        made.save(spec["make"])
    report = {}
    for path in spec["files"]:
        model = keras.models.load_model(path)
        lines = []
        model.summary(print_fn=lambda line, *a, **k: lines.append(line))
        opt = model.optimizer
        compiled = getattr(model, "compiled_loss", None)
        loss = model.loss if not hasattr(model.loss, "name") else model.loss.name
        if spec["lib"] == "keras":
            metrics = [m.name for m in model.metrics if m.name not in ("loss", "compile_metrics")]
            inner = [m for m in model.metrics if m.name == "compile_metrics"]
            metrics += [n for m in inner for n in names(m.metrics)]
        else:
            metrics = names(model.compiled_metrics._user_metrics)
        report[path] = {
            "summary": "\n".join(lines),
            "n_params": int(model.count_params()),
            "n_trainable": int(sum(int(np.prod(w.shape)) for w in model.trainable_weights)),
            "layers": [
                [x.name, type(x).__name__, int(x.count_params()), bool(x.trainable)]
                for x in model.layers
            ],
            "optimizer": type(opt).__name__,
            "learning_rate": float(np.asarray(opt.learning_rate)),
            "loss": loss if isinstance(loss, str) else type(loss).__name__,
            "metrics": metrics,
            "inputs": [[None if d is None else int(d) for d in t.shape] for t in model.inputs],
            "outputs": [[None if d is None else int(d) for d in t.shape] for t in model.outputs],
        }
    exports = {}
    for full, config, weights in spec["exports"]:
        reference = keras.models.load_model(full, compile=False)
        model = keras.models.model_from_json(open(config).read())
        model.load_weights(weights)
        x = np.random.default_rng(7).standard_normal((5, 8)).astype("float32")
        same = np.array_equal(reference.predict(x, verbose=0), model.predict(x, verbose=0))
        exports[full] = bool(same)
    return {"files": report, "exports": exports}
for line in sys.stdin:
    print("TRUTH " + json.dumps(answer(json.loads(line))), flush=True)
"""

K3_FILES = ["k3/run_zip/e03-vl1.643.keras", "k3/legacy/full.h5"]
COPIED = ("k3/run_zip", "k3/legacy", "k3/run_weights", "tfk/run_h5")
TFK_ARCHIVE = "tfk/archive/tfk.keras"
TFK_FILES = ["tfk/run_h5/weights.02-1.68.hdf5", TFK_ARCHIVE]
ARCHIVES = ["k3/run_zip/e03-vl1.643.keras", TFK_ARCHIVE]


class TruthChild:
    """The TRUTH script in one child: `ask(spec)` sends it a spec, returns its answer."""

    def __init__(self, log: Path) -> None:
        self.log = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", TRUTH],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=CHILD_ENV,
        )

    def ask(self, spec: dict[str, Any], timeout_s: float = 600) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(spec) + "\n")
        self.proc.stdin.flush()
        watchdog = threading.Timer(timeout_s, self.proc.kill)  # a hung child ends, and fails
        watchdog.start()
        try:
            for line in iter(self.proc.stdout.readline, ""):  # "": the child ended
                if line.startswith("TRUTH "):
                    answer: dict[str, Any] = json.loads(line.removeprefix("TRUTH "))
                    return answer
        finally:
            watchdog.cancel()
        self.close()
        raise AssertionError(Path(self.log.name).read_text()[-3000:])

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.log.close()


@pytest.fixture(scope="module")
def described(
    tmp_path_factory: pytest.TempPathFactory, keras_checkpoints: Path
) -> tuple[Workspace, dict[str, Any], dict[str, Any]]:
    """A scanned workspace of the generated checkpoints + a tf-keras `.keras` (made by the
    tf-keras truth child, which reports on its files first); the archives exported as json+h5
    by the product (which checks each in its own child); then the Keras 3 truth child, which
    also loads the Keras 3 export independently. The two truth children are one process (asked
    twice), so three TensorFlow processes in all."""
    ws = Workspace(tmp_path_factory.mktemp("describe"))
    for part in COPIED:  # no TF checkpoint or SavedModel: their reader would start TensorFlow
        shutil.copytree(keras_checkpoints / part, ws.root / part)
    shutil.copy2(keras_checkpoints / "tfk/weights_only.h5", ws.root / "tfk/weights_only.h5")
    (ws.root / "tfk/archive").mkdir()
    tfk = {
        "lib": "tf_keras",
        "make": str(ws.root / TFK_ARCHIVE),
        "files": [str(ws.root / f) for f in TFK_FILES],
        "exports": [],
    }
    child = TruthChild(ws.base / "truth-child.log")
    try:
        truth = child.ask(tfk)
        ws, truth, exports = _scanned_and_exported(ws, child, truth)
    finally:
        child.close()
    return ws, truth, exports


def _scanned_and_exported(
    ws: Workspace, child: TruthChild, truth: dict[str, Any]
) -> tuple[Workspace, dict[str, Any], dict[str, Any]]:
    with open_catalog(str(ws.config)) as cat:
        assert not cat.scan().failed
    exports = {}
    with open_catalog(str(ws.config)) as cat:
        for name in ARCHIVES:
            _c, result = cat.export(str(ws.root / name))
            exports[name] = result
    k3 = {
        "lib": "keras",
        "files": [str(ws.root / f) for f in K3_FILES],
        "exports": [
            [str(ws.root / n), str(exports[n].config_path), str(exports[n].weights_path)]
            for n in ARCHIVES
            if n in K3_FILES
        ],
    }
    got = child.ask(k3)
    truth["files"].update(got["files"])
    truth["exports"].update(got["exports"])
    return ws, truth, exports


def _same_weights_without_optimizer(archive_path: Path, weights: Path) -> None:
    """Every dataset of the archive's weights store but optimizer/metrics, equal, and no more
    (the tf-keras export's load-and-predict check is the product's own child's)."""
    import io
    import zipfile

    import h5py
    import numpy as np

    with zipfile.ZipFile(archive_path) as archive:
        store = io.BytesIO(archive.read("model.weights.h5"))

    def datasets(f: h5py.File) -> dict[str, Any]:
        found: dict[str, Any] = {}
        f.visititems(
            lambda n, o: found.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None
        )
        return {n: v for n, v in found.items() if not n.startswith(("optimizer", "metrics"))}

    with h5py.File(store, "r") as src, h5py.File(weights, "r") as dst:
        a, b = datasets(src), datasets(dst)
        assert sorted(a) == sorted(b) and a
        assert all(np.array_equal(a[n], b[n]) for n in a)
        assert "optimizer" not in dst and "metrics" not in dst


def _card(ws: Workspace, ref: str) -> dict[str, Any]:
    with open_catalog(str(ws.config)) as cat:
        return json.loads(render(cat.describe(ref), "json"))


@pytest.mark.parametrize("name", K3_FILES + TFK_FILES)
def test_card_matches_what_keras_reports(
    described: tuple[Workspace, dict[str, Any], dict[str, Any]], name: str
) -> None:
    ws, truth, _exports = described
    path = str(ws.root / name)
    keras_says = truth["files"][path]
    card = _card(ws, path)
    assert card["parameters"]["total"] == f"{keras_says['n_params']:,}"
    assert card["parameters"]["trainable"] == f"{keras_says['n_trainable']:,}"
    non_trainable = keras_says["n_params"] - keras_says["n_trainable"]
    assert card["parameters"]["non-trainable"] == f"{non_trainable:,}"
    # The layer table: Keras's layers (3 lists no InputLayer), each with its count and flag.
    rows = {r["name"]: r for r in card["layers"]}
    for layer_name, class_name, n, trainable in keras_says["layers"]:
        assert rows[layer_name]["class_name"] == class_name, layer_name
        assert rows[layer_name]["n_params"] == n, layer_name
        assert rows[layer_name]["trainable"] == ("yes" if trainable else "no"), layer_name
        assert layer_name in keras_says["summary"]
    assert card["optimizer"]["class"] == keras_says["optimizer"]
    assert float(card["optimizer"]["learning rate"]) == keras_says["learning_rate"]
    assert keras_says["loss"].lower().replace("_", "") in card["training"]["loss"].lower().replace(
        "_", ""
    )
    for metric in keras_says["metrics"]:
        assert metric in card["training"]["metrics"]
    shapes = [p["shape"] for p in card["inputs"]], [p["shape"] for p in card["outputs"]]
    expected = [
        ["(" + ", ".join("None" if d is None else str(d) for d in s) + ")" for s in side]
        for side in (keras_says["inputs"], keras_says["outputs"])
    ]
    assert list(shapes) == expected
    # Keras 3 drops a legacy .h5's optimizer slots on load (keras-formats B1): not resumable.
    resumable = "no" if name == "k3/legacy/full.h5" else "yes"
    assert card["what"]["resumable"].startswith(resumable)
    assert "load_model" in card["load"]


def test_json_h5_exports_are_the_stored_config_and_predict_identically(
    described: tuple[Workspace, dict[str, Any], dict[str, Any]],
) -> None:
    ws, truth, exports = described
    import zipfile

    assert truth["exports"] == {str(ws.root / ARCHIVES[0]): True}  # loaded by the test's child
    for name in ARCHIVES:
        result = exports[name]
        _same_weights_without_optimizer(ws.root / name, result.weights_path)
        with zipfile.ZipFile(ws.root / name) as archive:
            assert result.config_path.read_bytes() == archive.read("config.json")
        assert result.weights_path.name.endswith(".weights.h5")
        assert card_path(result.config_path).is_file()
        card = _card(ws, str(result.weights_path))  # any file of the export names it
        assert card["what"]["format"].startswith("json+h5")
        assert "model_from_json" in card["load"] and "load_weights" in card["load"]
    listed = {c["path"] for c in ws.json("list")}
    assert not any(
        p.endswith((".json", ".md")) or ".weights.h5" in p
        for p in listed
        if "k3/run_zip" in p or "archive" in p
    )


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("k3/run_weights/w.01.weights.h5", "weights only"),
        ("tfk/weights_only.h5", "weights only"),
        ("k3/legacy/full.h5", "legacy .h5 written by Keras 3"),
    ],
)
def test_json_h5_is_refused_with_the_reason(
    described: tuple[Workspace, dict[str, Any], dict[str, Any]], name: str, why: str
) -> None:
    ws, _truth, _exports = described
    with open_catalog(str(ws.config)) as cat, pytest.raises(UsageError) as refused:
        cat.export(str(ws.root / name))
    assert why.lower() in str(refused.value).lower()
    assert not (ws.root / name).with_suffix(".json").exists()


def test_card_is_created_trashed_and_restored_with_its_artifact(
    described: tuple[Workspace, dict[str, Any], dict[str, Any]],
) -> None:
    ws, _truth, _exports = described
    source = ws.root / "k3/run_zip/e01-vl1.683.keras"
    with open_catalog(str(ws.config)) as cat:
        c, result = cat.split(str(source))
        card = card_path(result.path)
        assert card.name == "e01-vl1.683.inference.md"
        text = card.read_text()
        assert text.startswith("# Model card: k3/run_zip/e01-vl1.683.inference.keras")
        assert "inference artifact" in text and "keras.models.load_model" in text
        kinds = {a["kind"]: a for a in cat.get(c.id).details["artifacts"]}
        assert kinds["card"]["path"] == str(card) and kinds["card"]["hash"]
        # Keep the two newest: epoch 1 goes to the trash, its artifact and card with it.
        report = cat.prune(["k3/run_zip"], Policy(keep_last=2))
        assert sum(r.trashed for r in report.runs) == 1 and not report.failures
    assert not source.exists() and not result.path.exists() and not card.exists()
    trash = list((ws.root / ".ckpt-trash").rglob("e01-vl1.683.inference.*"))
    assert sorted(p.name for p in trash) == [
        "e01-vl1.683.inference.keras",
        "e01-vl1.683.inference.md",
    ]
    with open_catalog(str(ws.config)) as cat:
        cat.restore(c.id)
        assert source.exists() and result.path.exists() and card.read_text() == text
        scan = cat.scan()
        assert not scan.indexed and not scan.failed
        assert str(result.path) in {p for p, _why in scan.skipped}
        assert not [c for c in cat.list() if c.path.endswith(".md")]


def test_describe_cli_formats_and_output_file(
    described: tuple[Workspace, dict[str, Any], dict[str, Any]],
) -> None:
    ws, _truth, _exports = described
    ref = str(ws.root / "tfk/run_h5/weights.02-1.68.hdf5")
    md = ws.run("describe", ref).stdout
    assert "| `head` | `Dense` | 51 | 16x3, 3 | yes |" in md
    assert "import tf_keras; model = tf_keras.models.load_model(" in md
    txt = ws.run("describe", ref, "--format", "txt").stdout
    assert "non-trainable  32" in txt
    out = ws.base / "card.md"
    ws.run("describe", ref, "-o", str(out))
    assert out.read_text() == md
    assert (
        json.loads(ws.run("describe", ref, "--format", "json").stdout)["parameters"]["total"]
        == "259"
    )


def _normalized(card_text: str, root: str) -> str:
    """A card without what differs from machine to machine: the root, times, who, hashes."""
    text = card_text.replace(root, "ROOT").replace(root.replace("_", "\\_"), "ROOT")
    text = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "TIME", text)
    text = re.sub(r" by [^ |]+ \|", " by WHO |", text)
    # Training on another CPU (or with the other core busy) moves a metric's last digits: a
    # float reduction's order differs. Four significant decimals are the model's, not the noise.
    text = re.sub(r"(\d\.\d{4})\d+", r"\1", text)
    return re.sub(r"blake3:[0-9a-f]{64}", "HASH", text)


def test_the_docs_card_is_what_describe_prints(tmp_path: Path, keras_checkpoints: Path) -> None:
    """docs/model-cards.md's card, generated again the way its text says (a copy of the fixture run
    as `exp1`, scanned, split, described): the same card but for root, times and hashes."""
    page = (REPO / "docs" / "model-cards.md").read_text()
    shown = page.split("````markdown\n", 1)[1].split("````", 1)[0]
    root_line = re.search(r"^\| root \| (.+) \|$", shown, re.M)
    assert root_line is not None
    ws = Workspace(tmp_path)
    shutil.copytree(keras_checkpoints / "k3/run_zip", ws.root / "exp1")
    path = ws.root / "exp1/e03-vl1.643.keras"
    with open_catalog(str(ws.config)) as cat:
        cat.scan()
        cat.split(str(path))
        generated = render(cat.describe(str(path)), "md")
    assert _normalized(generated, str(ws.root)) == _normalized(shown, root_line.group(1))
