"""Which checkpoint variables are model weights, optimizer state or other (pure).

Weights vs optimizer state comes from the object graph, not from key prefixes: with Keras 3,
`tf.train.Checkpoint(model=m, optimizer=m.optimizer)` stores the trainable weights under
`optimizer/_trainable_variables/<i>`, their shortest path. The graph is plain data here
(`formats.tf_protos` parses it from the checkpoint), so this is a walk over lists.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from typing import Any

_OPTIMIZER_EDGES = {"optimizer", "_optimizer"}
_TRAINABLE_EDGES = {"_trainable_variables", "trainable_variables"}
# Metric totals/counts hang off the model in tf-keras SavedModels; they are not weights.
_METRIC_EDGES = {"metrics", "_metrics", "compiled_metrics", "compiled_loss", "_compile_metrics"}
_TF1_SLOT = re.compile(
    r"^((Adam|Nadam|Momentum|RMSProp|Adagrad|Adadelta|Ftrl)(_\d+)?|beta[12]_power)$"
)
_COUNTERS = {"global_step", "save_counter", "step"}

Graph = list[dict[str, Any]]  # {"children": [[edge, id]], "vars": [[name, key]], "slots": [...]}


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
