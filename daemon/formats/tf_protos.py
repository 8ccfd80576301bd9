"""The two TensorFlow protos we need, decoded from bytes already read (pure: no TF, no I/O).

* `TrackableObjectGraph` (trackable_object_graph.proto), the `_CHECKPOINTABLE_OBJECT_GRAPH`
  tensor of a TF2 checkpoint: nodes(1) { children(1) {node_id(1), local_name(2)},
  attributes(2) {name(1), full_name(2), checkpoint_key(3)}, slot_variables(3)
  {original_variable_node_id(1), slot_name(2), slot_variable_node_id(3)} }.
* `SavedModel` (saved_model.proto, meta_graph.proto): meta_graphs(2) { meta_info_def(1)
  {tensorflow_version(5)}, signature_def(5) map entries {key(1)} }.

Field numbers are those of TF's own descriptors. The decoding is flat (`core.protowire.fields`
per message, nested messages by a fixed path, no recursion); malformed bytes raise WireError,
which the readers turn into CorruptCheckpoint.
"""

from __future__ import annotations

from ..core.errors import WireError
from ..core.protowire import LENGTH, VARINT, fields
from ..core.tf_roles import Graph

_VARIABLE_VALUE = "VARIABLE_VALUE"


def _messages(buf: bytes, number: int) -> list[bytes]:
    return [v for n, w, v in fields(buf) if n == number and w == LENGTH and isinstance(v, bytes)]


def _text(buf: bytes, number: int) -> str:
    found = [v for n, w, v in fields(buf) if n == number and w == LENGTH]
    value = found[-1] if found else b""  # proto3: the last occurrence wins
    assert isinstance(value, bytes)
    return value.decode("utf-8", "replace")


def _int(buf: bytes, number: int) -> int:
    found = [v for n, w, v in fields(buf) if n == number and w == VARINT]
    value = found[-1] if found else 0
    assert isinstance(value, int)
    return value


def object_graph(raw: bytes) -> Graph:
    """The graph as `core.tf_roles` walks it: per node its children (edge name, node id), its
    VARIABLE_VALUE attributes (full name, checkpoint key) and its slot variables (original
    variable id, slot variable id). Raises WireError on bytes that are not such a graph,
    including node ids that point at no node."""
    graph: Graph = []
    for node in _messages(raw, 1):
        graph.append(
            {
                "children": [(_text(c, 2), _int(c, 1)) for c in _messages(node, 1)],
                # VARIABLE_VALUE only: older Keras objects also save OBJECT_CONFIG_JSON strings.
                "vars": [
                    (_text(a, 2), _text(a, 3))
                    for a in _messages(node, 2)
                    if _text(a, 1) == _VARIABLE_VALUE
                ],
                "slots": [(_int(s, 1), _int(s, 3)) for s in _messages(node, 3)],
            }
        )
    if not graph:
        raise WireError("object graph without nodes")
    for entry in graph:
        ids = [i for _, i in entry["children"]] + [i for pair in entry["slots"] for i in pair]
        bad = next((i for i in ids if i >= len(graph)), None)
        if bad is not None:
            raise WireError(f"object graph points at node {bad} of {len(graph)}")
    return graph


def savedmodel_facts(raw: bytes) -> tuple[list[str], list[str]]:
    """(signature names, TensorFlow versions) of a serialized SavedModel, each sorted."""
    signatures: set[str] = set()
    versions: set[str] = set()
    for meta_graph in _messages(raw, 2):
        for info in _messages(meta_graph, 1):
            versions.add(_text(info, 5))
        signatures |= {_text(entry, 1) for entry in _messages(meta_graph, 5)}
    return sorted(signatures), sorted(versions - {""})
