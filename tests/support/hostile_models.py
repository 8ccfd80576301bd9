"""Hostile Keras models, written by real Keras 3 and tf-keras: code that runs when loaded.

Usage (a child process, forked by tests/support/forked_python.py from an interpreter that has
imported both libraries: the only test code besides keras_fixtures.py that imports Keras):

    python3 tests/support/hostile_models.py keras|tf_keras OUT_DIR MARKER

writes into OUT_DIR, for that library (`<lib>-<kind>.<ext>`):
- `lambda.h5`, `lambda.keras`: a `Lambda` layer whose function (marshalled bytecode in the
  file) appends a line to MARKER when it runs;
- `custom.h5`, `custom.keras`: a custom layer (`Hostile>MarkerLayer`) of the module
  `hostile_layers` (written into OUT_DIR too: importing it appends to MARKER);
- `function.h5`, `function.keras`: a Dense layer whose activation is a function of that module.

MARKER must be outside every root, in a folder anyone may write (the load child runs as
`nobody`): a line in it means the file's code ran. The generator removes it at the end (its
own saves ran the code). `KINDS` lists what a test expects of each.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

LIBS = ("keras", "tf_keras")
# kind -> what its refusal names (the layer, the class or the function)
KINDS = {
    "lambda": "'evil' (Lambda)",
    "custom": "MarkerLayer",
    "function": "marker_activation",
}
SUFFIXES = (".h5", ".keras")
MODULE = "hostile_layers"

_MODULE_SOURCE = '''"""Imported by a loader that follows a checkpoint's config: each import, call or
activation appends to the marker file."""
import os
import sys

MARKER = {marker!r}
open(MARKER, "a").write("imported " + __name__ + "\\n")
# The generator names its library (it may run forked from a process that imported both); a
# loader has imported the one it loads with.
LIB = os.environ.get("HOSTILE_LAYERS_KERAS") or (
    "tf_keras" if "tf_keras" in sys.modules else "keras"
)
k = __import__(LIB)


def marker_activation(x):
    open(MARKER, "a").write("activation ran\\n")
    return x


@k.utils.register_keras_serializable(package="Hostile")
class MarkerLayer(k.layers.Layer):
    def call(self, x):
        open(MARKER, "a").write("layer ran\\n")
        return x
'''


def files(folder: Path) -> dict[tuple[str, str, str], Path]:
    """(lib, kind, suffix) -> the file the generator writes for it in `folder`."""
    return {
        (lib, kind, suffix): folder / f"{lib}-{kind}{suffix}"
        for lib in LIBS
        for kind in KINDS
        for suffix in SUFFIXES
    }


def _model(keras: Any, kind: str, marker: str) -> Any:
    import hostile_layers  # written into OUT_DIR, first on sys.path

    inp = keras.Input(shape=(4,), name="x")
    if kind == "function":
        h = keras.layers.Dense(3, name="fc", activation=hostile_layers.marker_activation)(inp)
        return keras.Model(inp, h, name=kind)
    h = keras.layers.Dense(3, name="fc")(inp)
    if kind == "lambda":
        # Built from source so the marker's path is a constant of the marshalled code.
        function = eval(f"lambda x: (open({marker!r}, 'a').write('lambda ran\\n'), x)[1]")
        h = keras.layers.Lambda(function, name="evil")(h)
    else:
        h = hostile_layers.MarkerLayer(name="marked")(h)
    return keras.Model(inp, h, name=kind)


def main(argv: list[str]) -> int:
    lib, out, marker = argv[0], Path(argv[1]), argv[2]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    out.mkdir(parents=True, exist_ok=True)
    module = out / f"{MODULE}.py"
    if not module.exists():
        module.write_text(_MODULE_SOURCE.format(marker=marker))
    sys.path.insert(0, str(out))
    os.environ["HOSTILE_LAYERS_KERAS"] = lib
    import importlib
    import warnings

    import numpy as np

    warnings.simplefilter("ignore")
    k = importlib.import_module(lib)
    for (wanted, kind, _suffix), path in files(out).items():
        if wanted != lib:
            continue
        model = _model(k, kind, marker)
        model.compile(optimizer="adam", loss="mse")
        model.fit(np.ones((4, 4)), np.ones((4, 3)), verbose=0)
        model.save(path)
    Path(marker).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
