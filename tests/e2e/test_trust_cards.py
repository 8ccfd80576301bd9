"""Issue 20 item 9: `ckpt describe`'s Markdown card greps (`hidden_a`, `learning_rate`, not
`hidden\\_a`) and stays harmless for hostile names: parsed by a real CommonMark + GFM-tables
parser (markdown-it-py), every table keeps its columns, every name reads back exactly as it is,
and nothing turns into emphasis, a link or HTML. The optimizer table says the learning rate once.

A real Keras 3 model (layers `hidden_a`, `_private_`, `a.b-c>d`; a metric named with pipes,
stars, backticks and `<i>`) trained in a child process into a run folder whose name is markup
too; scanned and described by the CLI.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

import pytest
from markdown_it import MarkdownIt

from tests.support import Workspace, forked_python

pytestmark = pytest.mark.slow
LAYERS = ["in_put", "hidden_a", "_private_", "a.b-c>d"]  # TensorFlow allows [A-Za-z0-9_.>-]
METRIC = "m|a*e*`x`_<i>"
RUN = "exp_*b*|p"
TRAIN = """
import os, sys
os.environ["KERAS_BACKEND"] = "tensorflow"
import keras, numpy as np
out, metric, *layers = sys.argv[1:]
keras.utils.set_random_seed(5)
inp = keras.Input(shape=(4,), name=layers[0])
h = inp
for name in layers[1:]:
    h = keras.layers.Dense(3, name=name)(h)
model = keras.Model(inp, h, name="net_model")
model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01), loss="mse",
              metrics=[keras.metrics.MeanAbsoluteError(name=metric)])
x = np.ones((12, 4), "float32"); y = np.zeros((12, 3), "float32")
model.fit(x, y, epochs=3, batch_size=4, verbose=0, callbacks=[
    keras.callbacks.ModelCheckpoint(out + "/model_{epoch:02d}.keras"),
    keras.callbacks.CSVLogger(out + "/training.log")])
"""


@pytest.fixture(scope="module")
def card(tmp_path_factory: pytest.TempPathFactory) -> str:
    base = tmp_path_factory.mktemp("cards")
    ws = Workspace(base)
    ws.config.write_text(
        f"state_dir: {base / 'state'}\nroots:\n  - path: {ws.root}\n"
        "completion:\n  settle_seconds: 0\n"
    )
    run = ws.root / RUN
    run.mkdir()
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"}
    env.pop("TF_USE_LEGACY_KERAS", None)
    done = forked_python.run(
        [sys.executable, "-c", TRAIN, str(run), METRIC, *LAYERS],
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ws.run("scan")
    return ws.run("describe", str(run / "model_03.keras")).stdout


def inline_text(token: Any) -> str:
    """What a reader sees of an inline token: its text and code spans, markup removed."""
    return "".join(c.content for c in token.children or [] if c.type in ("text", "code_inline"))


def tables(md: str) -> dict[str, list[list[str]]]:
    """Each table under its `##` heading, as rows of the cells' rendered text (header first)."""
    out: dict[str, list[list[str]]] = {}
    heading, row, in_heading = "", None, False
    for token in MarkdownIt("commonmark").enable(["table", "strikethrough"]).parse(md):
        if token.type == "heading_open":
            in_heading = True
        elif token.type == "inline" and in_heading:
            heading, in_heading = token.content, False
        elif token.type == "tr_open":
            row = []
        elif token.type == "inline" and row is not None:
            row.append(inline_text(token))
        elif token.type == "tr_close" and row is not None:
            out.setdefault(heading, []).append(row)
            row = None
    return out


def test_identifiers_are_greppable_as_written(card: str) -> None:
    for name in ("hidden_a", "_private_", "in_put", "learning_rate", "run_eagerly", "net_model"):
        assert name in card, name
    assert not re.search(r"[A-Za-z0-9]\\_[A-Za-z0-9]", card), card  # no intraword escape


def test_hostile_names_read_back_exactly_and_make_no_markup(card: str) -> None:
    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    kinds = {c.type for t in md.parse(card) if t.type == "inline" for c in t.children or []}
    assert not kinds & {"em_open", "strong_open", "link_open", "html_inline", "s_open"}, kinds
    found = tables(card)
    layers = found["Layers (4)"]
    assert [r[0] for r in layers[1:]] == LAYERS, layers
    assert all(len(r) == 5 for r in layers), layers
    metrics = {r[0]: r for r in found["Metrics of this epoch"][1:]}
    assert set(metrics) == {"loss", METRIC}, metrics
    assert metrics[METRIC][2] == f"csv:{RUN}/training.log", metrics[METRIC]
    lineage = dict(r for r in found["Lineage"][1:] if len(r) == 2)
    assert lineage["run"] == RUN, lineage
    for rows in found.values():
        assert len({len(r) for r in rows}) == 1, rows  # no row gained or lost a column


def test_the_optimizer_table_says_the_learning_rate_once(card: str) -> None:
    rows = tables(card)["Optimizer"][1:]
    rates = [r for r in rows if r[0] in ("learning rate", "learning_rate")]
    assert rates == [["learning_rate", "0.01"]], rows
