"""The only daemon module that imports TensorFlow: a short-lived child process.

    python -m ckpt_daemon.children.tf_probe checkpoint PREFIX
    python -m ckpt_daemon.children.tf_probe savedmodel DIR

prints one JSON document on stdout and exits 0; a file TensorFlow refuses to read gives
`{"error": "...", "problem": "corrupt|missing|denied"}` and exit 3. Importing TF costs seconds
and ~0.5 GB, which is why the daemon never does it in-process. Only metadata is read: shapes,
dtypes, the object graph and a few scalars (iterations, learning rate, counters), never weights.

Weights vs optimizer state comes from the object graph, not from key prefixes: with Keras 3,
`tf.train.Checkpoint(model=m, optimizer=m.optimizer)` stores the trainable weights under
`optimizer/_trainable_variables/<i>`, their shortest path. The classification below is plain
Python over the parsed graph (TF is needed only to parse it).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
MAX_SCALARS = 64  # scalars are 8 bytes each; the cap only guards against pathological files
EXIT_UNREADABLE = 3
_OPTIMIZER_EDGES = {"optimizer", "_optimizer"}
_TRAINABLE_EDGES = {"_trainable_variables", "trainable_variables"}
# Metric totals/counts hang off the model in tf-keras SavedModels; they are not weights.
_METRIC_EDGES = {"metrics", "_metrics", "compiled_metrics", "compiled_loss", "_compile_metrics"}
_TF1_SLOT = re.compile(
    r"^((Adam|Nadam|Momentum|RMSProp|Adagrad|Adadelta|Ftrl)(_\d+)?|beta[12]_power)$"
)
_COUNTERS = {"global_step", "save_counter", "step"}

Graph = list[dict[str, Any]]  # {"children": [[edge, id]], "vars": [[name, key]], "slots": [...]}


def _graph_nodes(raw: bytes) -> Graph:
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(raw)
    # Slot variables (TF1 / legacy Keras optimizers) hang off the optimizer node as
    # (original variable, slot variable) pairs, not as children.
    return [
        {
            "children": [(c.local_name, c.node_id) for c in node.children],
            # VARIABLE_VALUE only: older Keras objects also save OBJECT_CONFIG_JSON strings.
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


def _reach(graph: Graph, starts: Iterable[int], blocked: set[str]) -> dict[int, None]:
    """Node ids reachable from `starts` without crossing an edge named in `blocked` (BFS order)."""
    seen: dict[int, None] = dict.fromkeys(starts)
    queue = deque(seen)
    while queue:
        for name, child in graph[queue.popleft()]["children"]:
            if child not in seen and name not in blocked:
                seen[child] = None
                queue.append(child)
    return seen


def _targets(graph: Graph, nodes: Iterable[int], edges: set[str]) -> list[int]:
    return [child for n in nodes for name, child in graph[n]["children"] if name in edges]


def classify(graph: Graph, int_scalars: set[str]) -> dict[str, tuple[str, str, bool]]:
    """checkpoint key -> (role, full name, trainable), in model order, from the object graph.

    Model weight: reachable from the root without crossing an optimizer edge (at any depth: a
    Keras 3 model tracks its optimizer too). The Keras 3 optimizer's `_trainable_variables`
    list points at model weights, so it leads into the model. Optimizer state: reachable only
    through an optimizer, or a slot variable. Integer scalars straight under the root
    (`save_counter`, a user's `step`) and seed-generator states are "other".
    """
    everything = _reach(graph, [0], set())
    slots = [pair for n in everything for pair in graph[n]["slots"]]
    lists = _targets(graph, everything, _TRAINABLE_EDGES)
    not_model = _OPTIMIZER_EDGES | _METRIC_EDGES
    model = _reach(graph, [0, *lists], not_model)
    opt_starts = [*_targets(graph, everything, _OPTIMIZER_EDGES), *(s for _, s in slots)]
    optimizer = _reach(graph, opt_starts, _METRIC_EDGES)
    trainable = {*_reach(graph, lists, not_model), *(original for original, _ in slots)}
    counters = {
        c for _, c in graph[0]["children"] if {k for _, k in graph[c]["vars"]} & int_scalars
    }
    found: dict[str, tuple[str, str, bool]] = {}
    for node in [*model, *optimizer, *range(len(graph))]:
        for name, key in graph[node]["vars"]:
            if key in found:
                continue
            if node in model and node not in counters and not name.endswith("seed_generator_state"):
                found[key] = ("model", name, node in trainable)
            else:
                found[key] = ("optimizer" if node in optimizer else "other", name, False)
    if not any(t for _, _, t in found.values()):
        _trainable_by_slot_names(found)
    return found


def _trainable_by_slot_names(found: dict[str, tuple[str, str, bool]]) -> None:
    # tf-keras names its slots "<Optimizer>/m/<variable name>" and keeps no trainable list.
    opt = [name for role, name, _ in found.values() if role == "optimizer"]
    tails = {n.split("/", i)[-1] for n in opt for i in range(1, n.count("/") + 1)}
    for key, (role, name, _) in found.items():
        found[key] = (role, name, role == "model" and name in tails)


def classify_by_name(keys: Iterable[str]) -> dict[str, tuple[str, str, bool]]:
    """Fallback without an object graph (TF1 `Saver` checkpoints): a guess from variable names."""
    found = {}
    for key in keys:
        last = key.rsplit("/", 1)[-1]
        if last in _COUNTERS:
            role = "other"
        elif key.startswith("optimizer/") or ".OPTIMIZER_SLOT" in key or _TF1_SLOT.match(last):
            role = "optimizer"
        else:
            role = "model"
        found[key] = (role, key, False)
    return found


def probe_checkpoint(tf: Any, prefix: str) -> dict[str, Any]:
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    dtypes = {k: d for k, d in reader.get_variable_to_dtype_map().items() if k != GRAPH_KEY}
    scalars = [k for k in sorted(dtypes) if not shapes[k]]
    int_scalars = {k for k in scalars if dtypes[k].is_integer}
    graph_bytes = 0
    if GRAPH_KEY in shapes:
        raw = reader.get_tensor(GRAPH_KEY)
        graph_bytes = len(raw)
        found = classify(_graph_nodes(raw), int_scalars)
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
                "itemsize": dtypes[key].size,  # 0 for strings and resources
                "value": values.get(key),
            }
        )
    return {"variables": variables, "object_graph": GRAPH_KEY in shapes, "graph_bytes": graph_bytes}


def probe_savedmodel(tf: Any, directory: str) -> dict[str, Any]:
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    pb = Path(directory, "saved_model.pb")
    if pb.exists():
        saved.ParseFromString(pb.read_bytes())
    else:
        from google.protobuf import text_format

        text_format.Parse(Path(directory, "saved_model.pbtxt").read_text(), saved)
    prefix = Path(directory, "variables", "variables")
    return {
        "signatures": sorted({name for mg in saved.meta_graphs for name in mg.signature_def}),
        "tensorflow_version": sorted(
            {mg.meta_info_def.tensorflow_version for mg in saved.meta_graphs} - {""}
        ),
        "checkpoint": (
            probe_checkpoint(tf, str(prefix)) if Path(f"{prefix}.index").exists() else None
        ),
    }


def _import_tf() -> Any:
    # Must be set before the import: TF reads it while loading its C++ runtime.
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    # absl prints "cuda drivers not found" lines before TF_CPP_MIN_LOG_LEVEL applies; hide fd 2
    # during the import only, so a real traceback later still reaches the parent.
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        import tensorflow as tf
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    tf.get_logger().setLevel("ERROR")
    return tf


def _refusal(exc: BaseException, problem: str) -> dict[str, str]:
    # OpError.message is TF's own text; str() would prefix node and op details.
    text = (getattr(exc, "message", None) or str(exc)).strip()
    return {"error": text.splitlines()[0] if text else type(exc).__name__, "problem": problem}


def answer(tf: Any, mode: str, path: str) -> dict[str, Any]:
    """The probe's result for one checkpoint or SavedModel, or `{error, problem}`."""
    from google.protobuf.message import DecodeError

    try:
        if mode == "checkpoint":
            return probe_checkpoint(tf, path)
        return probe_savedmodel(tf, path)
    except (tf.errors.NotFoundError, FileNotFoundError) as exc:
        # A file vanished after the parent's checks (max_to_keep pruning): look again later.
        return _refusal(exc, "missing")
    except (tf.errors.PermissionDeniedError, PermissionError) as exc:
        return _refusal(exc, "denied")
    except IndexError as exc:  # get_tensor on a truncated data shard
        return _refusal(RuntimeError(f"data shard shorter than its index says ({exc})"), "corrupt")
    except (tf.errors.OpError, DecodeError) as exc:
        # A corrupt index raises a bare OpError ("... block checksum mismatch").
        return _refusal(exc, "corrupt")


def serve(tf: Any) -> int:
    """One request per stdin line, `MODE<TAB>PATH`; one JSON line back per request.

    A scan keeps one child for all its TF checkpoints: TensorFlow's import (seconds, ~0.5 GB)
    is paid once per scan instead of once per checkpoint.
    """
    for line in sys.stdin:
        mode, _, path = line.rstrip("\n").partition("\t")
        reply = answer(tf, mode, path) if mode in MODES else {"error": f"bad mode {mode!r}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


MODES = ("checkpoint", "savedmodel")


def main(argv: list[str]) -> int:
    if argv == ["serve"]:
        return serve(_import_tf())
    if len(argv) != 2 or argv[0] not in MODES:
        print(
            "usage: python -m ckpt_daemon.children.tf_probe checkpoint|savedmodel PATH | serve",
            file=sys.stderr,
        )
        return 2
    result = answer(_import_tf(), argv[0], argv[1])
    print(json.dumps(result))
    return EXIT_UNREADABLE if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
