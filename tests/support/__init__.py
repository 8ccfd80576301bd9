"""What tests share, in one place (conftest.py files only declare fixtures built from it).

- `workspace`: `Workspace` (a root, a config, a catalog; the CLI run as a subprocess),
  `zip_run` and the generated checkpoints' names the tests copy;
- `daemon`: `Daemon` (`ckpt serve` as a subprocess) and `service_workspace`;
- `checkpoints`: where the generated Keras/TF checkpoints come from (``CKPT_TEST_FIXTURES``);
- `metric_logs`: training logs as Keras writes them;
- `event_files` (imported by name): TensorBoard event files built by hand, a protobuf encoder;
- `keras_fixtures`: the generator of those checkpoints, a script
  (``python3 tests/support/keras_fixtures.py OUT_DIR``), never imported here: it is the only
  test code that imports TensorFlow, and only in its own child processes;
- `hostile_files`: builders of hostile files (also used by bench/hostile_corpus.py).
- `hostile_models`: hostile Keras models (Lambda, custom objects, function references) written
  by real Keras 3 and tf-keras, a script run as a child (it imports Keras), like `keras_fixtures`.
"""

from .daemon import Daemon, kill_started, service_workspace
from .metric_logs import keras_csv
from .workspace import (
    TEMPLATES,
    ZIP_FILES,
    ZIP_RUN,
    Workspace,
    copy_generated,
    rewritten_best,
    zip_run,
)

__all__ = [
    "TEMPLATES",
    "ZIP_FILES",
    "ZIP_RUN",
    "Daemon",
    "Workspace",
    "copy_generated",
    "keras_csv",
    "kill_started",
    "rewritten_best",
    "service_workspace",
    "zip_run",
]
