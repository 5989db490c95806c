"""Ground truth for the third-party fixtures: what ``tf.GradientTape`` says on the loaded SavedModel.

Plain TensorFlow only, so every builder (each in its own library's venv) and the main environment can
run it. Used as::

    from _truth import write_truth
    write_truth(export_dir, {"serving_default": {"x": (array, "N(0, 1)")}},
                library={"name": "tensorflow-probability", "version": "0.25.0"}, builder="build_tfp.py")

For every signature given and every (source, float output) pair it records

* ``"nonzero"``: the gradient exists and is not all zero,
* ``"zero"``: the gradient exists and is exactly zero everywhere,
* ``"none"``: ``tape.gradient`` returns None (no path TensorFlow can differentiate),
* ``"error: <message>"``: calling the model under the tape or taking the gradient raised.

Method: ``tf.saved_model.load`` in a fresh child process (TensorFlow only, no library imported); a fresh
non-persistent tape per gradient; float signature inputs are
watched; trainable variables are those captured by the signature's concrete function (named by their
``SavedVariable.name`` in the object graph, as gradaudit names them); each output is projected on a
fixed random cotangent (never on ones: the gradient of ``sum(softmax(x))`` is exactly zero).
``second_order`` records, per pair, the status of the Hessian-vector product d/dsrc <d loss/d src, v>
(v = 0.5 everywhere; nested non-persistent tapes), what ``gradaudit --order 2`` needs.

It also writes ``inputs.npz`` (the ``serving_default`` inputs, by input key) beside ``truth.json``, inside
the SavedModel folder (TensorFlow ignores extra files there), so that the same inputs can be given to
``gradaudit --inputs``, and the census of op types (``unknown_to_plain_tensorflow``), as truth.py does.
"""

from __future__ import annotations

import json
import os
import subprocess
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


def signature_truth(export_dir, signature_key, inputs, seed=0, second_order=True):
    """The truth of one signature: {"kind", "inputs", "pairs": [rows], "second_order": [rows]}.

    A row is {"source", "kind" ("input" or "variable"), "output", "truth"}, as in truth.py (the
    plain-TensorFlow fixtures' helper), so one reader serves every fixture in this folder.
    """
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

    sources = [(k, "input") for k in float_inputs] + [(k, "variable") for k in variables]
    rows, rows2 = [], []
    for out in float_outputs:
        for src, kind in sources:
            target = feed[src] if kind == "input" else variables[src]
            try:
                with tf.GradientTape() as tape:
                    for k in float_inputs:
                        tape.watch(feed[k])
                    loss = tf.reduce_sum(sig(**feed)[out] * cotangents[out])
                truth = _status(tape.gradient(loss, target))
            except Exception as exc:
                truth = _message(exc)
            rows.append({"source": src, "kind": kind, "output": out, "truth": truth})
            if second_order:
                rows2.append({"source": src, "kind": kind, "output": out,
                              "truth": _second_order(sig, feed, target, out, cotangents[out])})
    # trainable variables of the model that this signature never reads: None by construction
    for name, trainable in _all_variables(export_dir).items():
        if trainable and name not in variables:
            for out in float_outputs:
                rows.append({"source": name, "kind": "variable", "output": out, "truth": "none",
                             "note": "not captured by this entry point"})
    result = {"kind": "signature",
              "inputs": {k: {"dtype": str(np.asarray(v).dtype), "shape": list(np.shape(v)),
                             "value": np.asarray(v).reshape(-1).tolist()} for k, v in inputs.items()},
              "outputs": {k: {"dtype": v.dtype.name, "shape": list(v.shape)} for k, v in plain.items()},
              "pairs": rows}
    if second_order:
        result["second_order"] = rows2
    return result


def _message(exc):
    text = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return f"error: {type(exc).__name__}: {(text[0] if text else '')[:300]}"


def _all_variables(export_dir):
    """SavedVariable name -> trainable, for every variable of the object graph."""
    return {n.variable.name: n.variable.trainable for n in _object_graph(export_dir).nodes
            if n.WhichOneof("kind") == "variable"}


def _second_order(sig, feed, target, out, cotangent):
    """Status of the Hessian-vector product d/dsrc <d loss/d src, v> (nested non-persistent tapes)."""
    v = tf.ones_like(target) * 0.5
    try:
        with tf.GradientTape() as outer:
            outer.watch(target)
            with tf.GradientTape() as inner:
                inner.watch(target)
                loss = tf.reduce_sum(sig(**feed)[out] * cotangent)
            g = inner.gradient(loss, target)
            if g is None:
                return "none (first order is None)"
            if isinstance(g, tf.IndexedSlices):
                g = tf.convert_to_tensor(g)
            dot = tf.reduce_sum(g * v)
        return _status(outer.gradient(dot, target))
    except Exception as exc:
        return _message(exc)


_CENSUS = """
import json, os, sys
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import op_def_registry
sm = saved_model_pb2.SavedModel()
sm.ParseFromString(open(os.path.join(sys.argv[1], "saved_model.pb"), "rb").read())
types = set()
for mg in sm.meta_graphs:
    types.update(n.op for n in mg.graph_def.node)
    for f in mg.graph_def.library.function:
        types.update(n.op for n in f.node_def)
    types -= {f.signature.name for f in mg.graph_def.library.function}
print(json.dumps({"op_types": sorted(types), "census_tensorflow": tf.__version__,
                  "unknown_to_plain_tensorflow": sorted(t for t in types if op_def_registry.get(t) is None)}))
"""


def census(export_dir):
    """Op types of the model, and those a plain TensorFlow (no library imported) does not know.

    Run in a child process of this interpreter that imports TensorFlow only."""
    out = subprocess.run([sys.executable, "-c", _CENSUS, export_dir], check=True, capture_output=True,
                         text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")).stdout
    return json.loads(out.strip().splitlines()[-1])


def fresh_signature_truth(export_dir, signature_key, npz_path):
    """signature_truth in a child process of this interpreter that imports TensorFlow only.

    The building process is not a fair place to take the truth: it still holds the Python objects the
    model was traced from (e.g. the second derivative of a jax2tf model raises TypeError "out of scope"
    there, LookupError for IdentityN in a fresh process, which is what gradaudit sees)."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "signature", export_dir, signature_key,
                          npz_path], check=True, capture_output=True, text=True,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    return json.loads(out.stdout.strip().splitlines()[-1])


def write_truth(export_dir, signatures, library, builder, notes=None, extra=None):
    """Compute the truth for ``signatures`` = {key: {input: (array, domain text)}} and write truth.json.

    The layout is truth.py's (``entry_points`` of ``pairs`` rows, ``environment``, ``variables``,
    the op census), plus ``second_order`` rows, each input's ``domain`` and ``notes``.
    """
    doc = {
        "model": os.path.basename(os.path.normpath(export_dir)),
        "builder": builder,
        "environment": {"tensorflow": tf.__version__, "python": sys.version.split()[0],
                        "library": library},
        "method": ("tf.saved_model.load + one fresh non-persistent tf.GradientTape per (source, output); "
                   "float inputs watched; trainable variables captured by the signature (named by "
                   "SavedVariable.name); output projected on a fixed N(0,1) cotangent (numpy "
                   "default_rng(0)). second_order: d/dsrc <d loss/d src, 0.5> with nested tapes"),
        "entry_points": {},
        "variables": _all_variables(export_dir),
    }
    for key, ins in signatures.items():
        arrays = {k: np.asarray(v[0]) for k, v in ins.items()}
        npz = os.path.join(export_dir, "inputs.npz" if key == "serving_default" else f"inputs.{key}.npz")
        np.savez(npz, **arrays)
        entry = fresh_signature_truth(export_dir, key, npz)
        if key != "serving_default":
            os.remove(npz)
        for k, v in ins.items():
            entry["inputs"][k]["domain"] = v[1]
        doc["entry_points"][key] = entry
    doc.update(census(export_dir))
    if notes:
        doc["notes"] = notes
    if extra:
        doc.update(extra)
    with open(os.path.join(export_dir, "truth.json"), "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    return doc


def table(doc):
    """{signature: {source: {output: truth}}}, for printing."""
    return {key: {r["source"] + "->" + r["output"]: r["truth"] for r in ep["pairs"]}
            for key, ep in doc["entry_points"].items()}


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] != "signature":
        sys.exit("usage: _truth.py signature EXPORT_DIR SIGNATURE_KEY INPUTS.npz")
    with np.load(sys.argv[4]) as data:
        _inputs = {k: data[k] for k in data.files}
    print(json.dumps(signature_truth(sys.argv[2], sys.argv[3], _inputs)))
