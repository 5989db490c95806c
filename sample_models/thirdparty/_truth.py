"""Ground truth for the third-party fixtures: what ``tf.GradientTape`` says on the loaded SavedModel.

Plain TensorFlow only, so every builder (each in its own library's venv) and the main environment can
run it. Used as::

    from _truth import write_truth
    write_truth(export_dir, {"serving_default": {"x": (array, "N(0, 1)")}}, library={"tfp": "0.25.0"})

For every signature given and every (source, float output) pair it records

* ``"nonzero"``: the gradient exists and is not all zero,
* ``"zero"``: the gradient exists and is exactly zero everywhere,
* ``"none"``: ``tape.gradient`` returns None (no path TensorFlow can differentiate),
* ``"error: <message>"``: calling the model under the tape or taking the gradient raised.

Method: ``tf.saved_model.load``; a fresh non-persistent tape per gradient; float signature inputs are
watched; trainable variables are those captured by the signature's concrete function (named by their
``SavedVariable.name`` in the object graph, as gradaudit names them); each output is projected on a
fixed random cotangent (never on ones: the gradient of ``sum(softmax(x))`` is exactly zero).

It also writes ``inputs.npz`` (the ``serving_default`` inputs, by input key) beside ``truth.json``, inside
the SavedModel folder (TensorFlow ignores extra files there), so
that the same inputs can be given to ``gradaudit --inputs``.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2


def _object_graph(export_dir):
    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    return sm.meta_graphs[0].object_graph_def


def _signature_variable_names(export_dir, signature_key):
    """Map the signature's bound inputs (in order) to (SavedVariable.name, trainable)."""
    og = _object_graph(export_dir)
    sig_node = None
    for child in og.nodes[0].children:
        if child.local_name == "signatures":
            for c in og.nodes[child.node_id].children:
                if c.local_name == signature_key:
                    sig_node = og.nodes[c.node_id]
    if sig_node is None:
        return []
    kind = sig_node.WhichOneof("kind")
    if kind == "bare_concrete_function":
        names = [sig_node.bare_concrete_function.concrete_function_name]
    else:
        names = list(sig_node.function.concrete_functions)
    bound = og.concrete_functions[names[0]].bound_inputs
    out = []
    for node_id in bound:
        node = og.nodes[node_id]
        if node.WhichOneof("kind") == "variable":
            out.append((node.variable.name, node.variable.trainable))
        else:
            out.append((None, False))
    return out


def _status(grad) -> str:
    if grad is None:
        return "none"
    if isinstance(grad, tf.IndexedSlices):
        grad = tf.convert_to_tensor(grad)
    arr = np.asarray(grad)
    return "nonzero" if np.any(arr != 0) else "zero"


def signature_truth(export_dir, signature_key, inputs, seed=0):
    """Return {"sources": {...}, "float_outputs": [...], "pairs": {source: {output: status}}}."""
    loaded = tf.saved_model.load(export_dir)
    sig = loaded.signatures[signature_key]
    feed = {k: tf.constant(v) for k, v in inputs.items()}
    float_inputs = [k for k, v in feed.items() if v.dtype.is_floating]

    bound = _signature_variable_names(export_dir, signature_key)
    handle_name = {}
    for handle, (name, trainable) in zip(sig.captured_inputs, bound):
        if name is not None:
            handle_name[id(handle)] = (name, trainable)
    variables = {}
    for var in sig.variables:
        name, trainable = handle_name.get(id(var.handle), (var.name.split(":")[0], var.trainable))
        if trainable:
            variables.setdefault(name, var)

    plain = sig(**feed)
    float_outputs = sorted(k for k, v in plain.items() if v.dtype.is_floating)
    rng = np.random.default_rng(seed)
    cotangents = {k: tf.constant(rng.normal(size=plain[k].shape).astype(plain[k].dtype.as_numpy_dtype))
                  for k in float_outputs}

    sources = {k: "input" for k in float_inputs}
    sources.update({k: "variable" for k in variables})
    pairs = {}
    for src in sources:
        pairs[src] = {}
        for out in float_outputs:
            try:
                with tf.GradientTape() as tape:
                    if src in feed:
                        tape.watch(feed[src])
                        target = feed[src]
                    else:
                        target = variables[src]
                    y = sig(**feed)[out]
                    loss = tf.reduce_sum(y * cotangents[out])
                pairs[src][out] = _status(tape.gradient(loss, target))
            except Exception as exc:  # noqa: BLE001 - the truth records what TensorFlow raised
                msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                pairs[src][out] = f"error: {type(exc).__name__}: {msg[:300]}"
    return {"sources": sources, "float_outputs": float_outputs, "pairs": pairs,
            "outputs": {k: {"dtype": v.dtype.name, "shape": list(v.shape)} for k, v in plain.items()}}


def write_truth(export_dir, signatures, library, notes=None, extra=None):
    """Compute the truth for ``signatures`` = {key: {input: (array, domain text)}} and write truth.json."""
    doc = {
        "model": os.path.basename(os.path.normpath(export_dir)),
        "tensorflow": tf.__version__,
        "python": sys.version.split()[0],
        "library": library,
        "method": ("tf.saved_model.load + one fresh non-persistent tf.GradientTape per (source, output); "
                   "float inputs watched; trainable variables captured by the signature; output "
                   "projected on a fixed N(0,1) cotangent (numpy default_rng(0))"),
        "signatures": {},
    }
    for key, ins in signatures.items():
        arrays = {k: np.asarray(v[0]) for k, v in ins.items()}
        entry = {"inputs": {k: {"dtype": arrays[k].dtype.name, "shape": list(arrays[k].shape),
                                "domain": v[1]} for k, v in ins.items()}}
        entry.update(signature_truth(export_dir, key, arrays))
        doc["signatures"][key] = entry
        if key == "serving_default":
            np.savez(os.path.join(export_dir, "inputs.npz"), **arrays)
    if notes:
        doc["notes"] = notes
    if extra:
        doc.update(extra)
    with open(os.path.join(export_dir, "truth.json"), "w") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
    return doc
