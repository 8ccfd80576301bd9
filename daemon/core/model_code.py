"""What in a Keras model config would run code from the file when the model is loaded. Pure.

Refused, each with the layer it is in and why:
- a `Lambda` layer: its function is Python bytecode stored in the file (tf-keras `function`
  as a marshalled list, Keras 3 `__lambda__`), or a function the file names by module and name;
- `TFOpLambda` / `SlicingOpLambda` (tf-keras): a TensorFlow function the file names;
- a Python lambda anywhere else (`__lambda__`);
- a function reference outside Keras (`{"class_name": "function", "module": "os", ...}`);
- a custom object: a class of a module that is not Keras's, a registered `package>name`, or a
  class name the loading library does not know (`known`: tf-keras and Keras 3 legacy `.h5`
  configs name no module, so the child asks its library).

The config is parsed JSON: reading it runs nothing. A loader with no code of its own may only
build Keras's classes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MAX_FINDINGS = 8
_OP_LAYERS = {"TFOpLambda", "SlicingOpLambda"}
_KERAS_PACKAGES = {"keras", "tf_keras"}
# Keras's own markers for values that are not objects (tensors, arrays, tuples, slices...).
_VALUE_MARKERS = {"__keras_tensor__", "__tensor__", "__numpy__", "__bytes__", "__typespec__"}
_VALUE_MARKERS |= {"__ellipsis__", "__slice__", "__tuple__", "__list__"}


def code_in_config(doc: Any, known: Callable[[str], bool] | None = None) -> list[str]:
    """Why loading `doc` (a model config, a `config.json`) would run the file's code: one line
    per finding (at most MAX_FINDINGS), empty when it builds only Keras's own classes."""
    found: list[str] = []
    _walk(doc, "", found, known)
    return found[:MAX_FINDINGS]


def _walk(node: Any, where: str, found: list[str], known: Callable[[str], bool] | None) -> None:
    if len(found) >= MAX_FINDINGS:
        return
    if isinstance(node, list | tuple):
        for item in node:
            _walk(item, where, found, known)
        return
    if not isinstance(node, dict):
        return
    class_name = node.get("class_name")
    if isinstance(class_name, str) and class_name not in _VALUE_MARKERS:
        inner = node.get("config")
        inner = inner if isinstance(inner, dict) else {}
        name = inner.get("name", node.get("name"))
        here = f"layer {name!r} ({class_name})" if isinstance(name, str) else where
        why = _why(node, class_name, inner, known)
        if why is not None:
            found.append(f"{here or class_name}: {why}")
            return  # what is inside a refused object adds nothing
        where = here
    for value in node.values():
        _walk(value, where, found, known)


def _why(
    node: dict[str, Any],
    class_name: str,
    inner: dict[str, Any],
    known: Callable[[str], bool] | None,
) -> str | None:
    if class_name == "Lambda":
        return _lambda_layer(inner)
    if class_name in _OP_LAYERS:
        return f"it calls tf.{inner.get('function')}, a TensorFlow function the file names"
    if class_name == "__lambda__":
        return "a Python lambda stored in the file as bytecode (marshalled), run when loaded"
    module = node.get("module")
    if class_name == "function":
        if isinstance(module, str) and _is_keras(module):
            return None
        return f"a reference to the function {module}.{inner or node.get('config')}, not Keras's"
    if isinstance(module, str) and not _is_keras(module):
        return f"a custom object {module}.{class_name}: its code is not Keras's"
    registered = node.get("registered_name")
    if isinstance(registered, str) and ">" in registered and not _is_keras(module):
        return f"a custom object registered as {registered!r}: its code is not Keras's"
    plain = class_name.removeprefix("Custom>")  # tf-keras names its own optimizers so
    if ">" in plain:
        return f"a custom object registered as {class_name!r}: its code is not Keras's"
    if module is None and known is not None and not known(plain):
        return f"a custom object {class_name!r}: not a class of the loading Keras"
    return None


def _lambda_layer(inner: dict[str, Any]) -> str:
    function = inner.get("function")
    kind = inner.get("function_type")
    if isinstance(function, dict):
        kind = "lambda" if function.get("class_name") == "__lambda__" else "function"
        named = f"{function.get('module')}.{function.get('config')}"
    else:
        named = f"{inner.get('module')}.{function}"
    if kind == "lambda" or isinstance(function, list):
        return "its function is Python bytecode stored in the file (marshalled): loading runs it"
    return f"it calls {named}, a Python function the file names"


def _is_keras(module: object) -> bool:
    return isinstance(module, str) and module.split(".", 1)[0] in _KERAS_PACKAGES
