"""What TensorFlow itself reports for TF checkpoints and SavedModels: the reference our own
reader (`ckpt_daemon.formats.tf_variables`, no TF) is compared with in
tests/integration/test_tf_formats.py.

    python tests/support/tf_truth.py PATH...   # one JSON document on stdout

One child process for every file of a session: TensorFlow's import costs seconds and ~0.5 GB.
For a checkpoint prefix: TF's `tf.train.load_checkpoint` shape and dtype maps (dtype name and
size as `tf.DType` gives them), the object graph as TF's own proto classes parse it, the numeric
scalars' values, and the result dict the former TensorFlow child produced (the roles come from
the same pure `core.tf_roles`, given TF's facts). For a SavedModel folder: the signature names
and TF versions from TF's `SavedModel` proto, and its variables checkpoint as above.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
MAX_SCALARS = 64


def truth_for(paths: list[Path]) -> dict[str, Any]:
    """TF's report for each path (checkpoint prefix or SavedModel folder), keyed by str(path)."""
    from tests.support import forked_python  # here: this file also runs as a script

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    done = forked_python.run(
        [sys.executable, __file__, *map(str, paths)],
        env=env,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _graph(raw: bytes) -> list[dict[str, Any]]:
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(raw)
    return [
        {
            "children": [(c.local_name, c.node_id) for c in node.children],
            "vars": [
                (a.full_name, a.checkpoint_key)
                for a in node.attributes
                if a.name == "VARIABLE_VALUE"
            ],
            "slots": [
                (s.original_variable_node_id, s.slot_variable_node_id) for s in node.slot_variables
            ],
        }
        for node in graph.nodes
    ]


def checkpoint(tf: Any, prefix: str) -> dict[str, Any]:
    from ckpt_daemon.core.tf_roles import classify, classify_by_name

    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    dtypes = {k: d for k, d in reader.get_variable_to_dtype_map().items() if k != GRAPH_KEY}
    scalars = [k for k in sorted(dtypes) if not shapes[k]]
    int_scalars = {k for k in scalars if dtypes[k].is_integer}
    graph, graph_bytes = None, 0
    if GRAPH_KEY in shapes:
        raw = reader.get_tensor(GRAPH_KEY)
        graph, graph_bytes = _graph(raw), len(raw)
        found = classify(graph, int_scalars)
    else:
        found = classify_by_name(sorted(dtypes))
    numeric = [k for k in scalars if dtypes[k].is_integer or dtypes[k].is_floating]
    values = {k: reader.get_tensor(k).item() for k in numeric[:MAX_SCALARS]}
    variables = []
    for key in [*(k for k in found if k in dtypes), *(k for k in sorted(dtypes) if k not in found)]:
        role, name, trainable = found.get(key, ("other", "", False))
        short = key.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE")
        variables.append(
            {
                "key": short,
                "name": name or short,
                "role": role,
                "trainable": trainable,
                "shape": list(shapes[key]),
                "dtype": dtypes[key].name,
                "itemsize": dtypes[key].size,
                "value": values.get(key),
            }
        )
    return {
        "shapes": {k: list(v) for k, v in shapes.items()},
        "dtypes": {k: [d.name, d.size] for k, d in reader.get_variable_to_dtype_map().items()},
        "graph": graph,
        "values": values,
        "probe": {
            "variables": variables,
            "object_graph": GRAPH_KEY in shapes,
            "graph_bytes": graph_bytes,
        },
    }


def savedmodel(tf: Any, directory: str) -> dict[str, Any]:
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString(Path(directory, "saved_model.pb").read_bytes())
    ck = checkpoint(tf, str(Path(directory, "variables", "variables")))
    return {
        "signatures": sorted({name for mg in saved.meta_graphs for name in mg.signature_def}),
        "tensorflow_version": sorted(
            {mg.meta_info_def.tensorflow_version for mg in saved.meta_graphs} - {""}
        ),
        "checkpoint": ck,
    }


def main(argv: list[str]) -> int:
    import tensorflow as tf

    out = {p: savedmodel(tf, p) if Path(p).is_dir() else checkpoint(tf, p) for p in argv}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
