"""`core.model_code`: what in a stored Keras config would run the file's code when loaded.

The configs are excerpts of what Keras 3.15.1 and tf-keras 2.21 write (tests/support/
hostile_models.py writes the whole files; tests/e2e/test_trust_hostile_models.py loads them).
"""

from __future__ import annotations

from typing import Any

from ckpt_daemon.core.model_code import MAX_FINDINGS, code_in_config

DENSE_K3 = {
    "module": "keras.layers",
    "class_name": "Dense",
    "config": {
        "name": "fc",
        "dtype": {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}},
        "activation": "linear",
        "kernel_initializer": {
            "module": "keras.initializers",
            "class_name": "GlorotUniform",
            "config": {"seed": None},
            "registered_name": None,
        },
    },
    "registered_name": None,
    "inbound_nodes": [
        {"args": [{"class_name": "__keras_tensor__", "config": {"keras_history": ["x", 0, 0]}}]}
    ],
}
DENSE_TFK = {"class_name": "Dense", "config": {"name": "fc", "activation": "relu"}}


def model(*layers: dict[str, Any], module: str | None = "keras.src.models.functional") -> Any:
    doc: dict[str, Any] = {"class_name": "Functional", "config": {"name": "m", "layers": layers}}
    if module:
        doc |= {"module": module, "registered_name": "Functional"}
    return doc


def known(name: str) -> bool:
    return name in {"Dense", "InputLayer", "Lambda", "Functional"}


def test_keras_own_classes_are_fine() -> None:
    assert code_in_config(model(DENSE_K3)) == []
    assert code_in_config(model(DENSE_TFK, module=None), known) == []
    optimizer = {"class_name": "Custom>Adam", "config": {"name": "Adam"}}  # tf-keras's own
    assert code_in_config({"optimizer_config": optimizer}, lambda n: n == "Adam") == []


def test_a_lambda_is_refused_with_its_layer_whatever_the_writer() -> None:
    k3 = {
        "class_name": "Lambda",
        "config": {
            "name": "evil",
            "function": {"class_name": "__lambda__", "config": {"code": "4wEAAA=="}},
        },
    }
    tfk = {
        "class_name": "Lambda",
        "config": {"name": "evil", "function": ["4wEAAA==", None, None], "function_type": "lambda"},
    }
    named = {
        "class_name": "Lambda",
        "config": {
            "name": "evil",
            "function": "system",
            "module": "os",
            "function_type": "function",
        },
    }
    for layer in (k3, tfk):
        (why,) = code_in_config(model(DENSE_K3, layer), known)
        assert why.startswith("layer 'evil' (Lambda): its function is Python bytecode"), why
    (why,) = code_in_config(model(named, module=None), known)
    assert why == "layer 'evil' (Lambda): it calls os.system, a Python function the file names"


def test_custom_objects_and_function_references_are_refused() -> None:
    custom_k3 = {"module": "hostile_layers", "class_name": "MarkerLayer", "config": {"name": "m"}}
    registered = {"class_name": "Hostile>MarkerLayer", "config": {"name": "m"}}
    unknown = {"class_name": "MarkerLayer", "config": {"name": "m"}}
    function = {
        "module": "builtins",
        "class_name": "function",
        "config": "marker_activation",
        "registered_name": "function",
    }
    activation = {"class_name": "Dense", "config": {"name": "fc", "activation": function}}
    op = {"class_name": "TFOpLambda", "config": {"name": "w", "function": "io.write_file"}}
    found = [
        code_in_config(model(layer, module=None), known)
        for layer in (custom_k3, registered, unknown, activation, op)
    ]
    assert found == [
        [
            "layer 'm' (MarkerLayer): a custom object hostile_layers.MarkerLayer: "
            "its code is not Keras's"
        ],
        [
            "layer 'm' (Hostile>MarkerLayer): a custom object registered as "
            "'Hostile>MarkerLayer': its code is not Keras's"
        ],
        [
            "layer 'm' (MarkerLayer): a custom object 'MarkerLayer': "
            "not a class of the loading Keras"
        ],
        ["layer 'fc' (Dense): a reference to the function builtins.marker_activation, not Keras's"],
        ["layer 'w' (TFOpLambda): it calls tf.io.write_file, a TensorFlow function the file names"],
    ]


def test_findings_are_bounded() -> None:
    many = [{"class_name": "Lambda", "config": {"name": f"l{i}"}} for i in range(1000)]
    assert len(code_in_config(model(*many), known)) == MAX_FINDINGS
