"""Ground truth for the third-party fixtures: what ``tf.GradientTape`` says on the loaded SavedModel.

Used by every ``build_<lib>.py`` in the environment where the model's ops are known (the library's venv,
or system python with the custom-op package imported), and run with the system python3 as a script to
record which op types a plain TensorFlow does not know::

    python3 sample_models/thirdparty/truth.py census sample_models/thirdparty/<name> ...

Depends on numpy and tensorflow only, so that the library venvs can import it by path.

Truth of one (source, float output) pair: a fresh non-persistent tape watching every float input (trainable
variables are watched by the tape as they are read), the output projected on a random cotangent
(``sum(out * c)``; never on ones: the gradient of sum(softmax) is exactly 0), then the gradient with
respect to that one source: ``nonzero``, ``zero`` (all zeros), ``none`` (TensorFlow returns None) or
``error: <Type>: <first line of the message>`` (the call or the gradient raised; with an op that has no
gradient the call itself raises, for every source of the function).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import tensorflow as tf

FLOAT_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
COTANGENT_SEED = 0


def _message(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = next((line.strip() for line in text if line.strip()), "")
    return f"error: {type(exc).__name__}: {first[:300]}"


def _status(grad) -> str:
    if grad is None:
        return "none"
    if isinstance(grad, tf.IndexedSlices):
        grad = tf.convert_to_tensor(grad)
    value = np.asarray(grad.numpy(), dtype=np.float64)
    return "zero" if not np.any(value) else "nonzero"


def _jsonable(value: np.ndarray):
    if value.dtype.kind in ("S", "O", "U"):
        return [v.decode() if isinstance(v, bytes) else str(v) for v in value.reshape(-1)]
    return value.reshape(-1).tolist()


def _object_graph_variables(export_dir: str) -> dict[str, bool]:
    """SavedVariable name -> trainable, from the object graph (the names gradaudit reports)."""
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    out = {}
    for node in sm.meta_graphs[0].object_graph_def.nodes:
        if node.WhichOneof("kind") == "variable":
            out[node.variable.name] = node.variable.trainable
    return out


def pair_truths(fn, inputs: dict[str, np.ndarray], variables, output_keys=None) -> list[dict]:
    """Truth of every (source, float output) pair of ``fn`` called as ``fn(**inputs)``.

    ``variables``: (name, tf.Variable) pairs of the trainable variables the function captures.
    ``output_keys``: the float outputs to check (default: every float output of the first call)."""
    feeds = {k: tf.constant(v) for k, v in inputs.items()}
    first = fn(**feeds)
    if not isinstance(first, dict):
        raise TypeError(f"expected a dict of outputs, got {type(first).__name__}")
    if output_keys is None:
        output_keys = sorted(k for k, v in first.items() if v.dtype in FLOAT_DTYPES)
    rng = np.random.default_rng(COTANGENT_SEED)
    cotangents = {k: tf.constant(rng.normal(size=first[k].shape).astype(first[k].dtype.as_numpy_dtype))
                  for k in output_keys}
    float_inputs = [k for k, v in feeds.items() if v.dtype in FLOAT_DTYPES]
    sources = [(k, "input", None) for k in float_inputs] + [(n, "variable", v) for n, v in variables]
    rows = []
    for out_key in output_keys:
        for name, kind, var in sources:
            try:
                with tf.GradientTape() as tape:
                    for k in float_inputs:
                        tape.watch(feeds[k])
                    out = fn(**feeds)[out_key]
                    loss = tf.reduce_sum(out * cotangents[out_key])
                truth = _status(tape.gradient(loss, feeds[name] if kind == "input" else var))
            except Exception as exc:
                truth = _message(exc)
            rows.append({"source": name, "kind": kind, "output": out_key, "truth": truth})
    return rows


def uncaptured(og_vars: dict[str, bool], captured, structured_outputs) -> list[dict]:
    """Rows for the model's trainable variables the entry point never reads: None by construction."""
    names = {n for n, _ in captured}
    outs = sorted(k for k, v in structured_outputs.items() if v.dtype in FLOAT_DTYPES)
    return [{"source": name, "kind": "variable", "output": o, "truth": "none",
             "note": "not captured by this entry point"}
            for name, trainable in og_vars.items() if trainable and name not in names for o in outs]


def signature_truth(export_dir: str, inputs_by_signature: dict[str, dict[str, np.ndarray]]) -> dict:
    """Load ``export_dir`` and compute the truth of each named signature on the given inputs."""
    loaded = tf.saved_model.load(export_dir)
    og_vars = _object_graph_variables(export_dir)
    result = {"entry_points": {}}
    for key, inputs in inputs_by_signature.items():
        fn = loaded.signatures[key]
        captured = [(v.name.split(":")[0], v) for v in fn.trainable_variables]
        rows = pair_truths(fn, inputs, captured) + uncaptured(og_vars, captured, fn.structured_outputs)
        result["entry_points"][key] = {
            "kind": "signature",
            "inputs": {k: {"dtype": str(np.asarray(v).dtype), "shape": list(np.shape(v)),
                           "value": _jsonable(np.asarray(v))}
                       for k, v in inputs.items()},
            "pairs": rows,
        }
    result["variables"] = og_vars
    return result


def environment(library: str | None = None, version: str | None = None) -> dict:
    env = {"tensorflow": tf.__version__, "python": sys.version.split()[0]}
    if library:
        env["library"] = {"name": library, "version": version}
    return env


def write(export_dir: str, truth: dict) -> str:
    path = os.path.join(export_dir, "truth.json")
    existing = {}
    if os.path.exists(path):  # keep the census (written by the system python) across rebuilds
        with open(path, encoding="utf-8") as f:
            existing = json.load(f)
    for key in ("op_types", "unknown_to_plain_tensorflow", "census_tensorflow"):
        if key in existing and key not in truth:
            truth[key] = existing[key]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(truth, f, indent=1, sort_keys=True)
        f.write("\n")
    return path


# --------------------------------------------------------------------------------------------------
# census: which op types a plain TensorFlow (no third-party package imported) does not know
# --------------------------------------------------------------------------------------------------

def op_types(export_dir: str) -> list[str]:
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    types = set()
    for mg in sm.meta_graphs:
        types.update(n.op for n in mg.graph_def.node)
        functions = {f.signature.name for f in mg.graph_def.library.function}
        for fdef in mg.graph_def.library.function:
            types.update(n.op for n in fdef.node_def)
        types -= functions  # calls of library functions by name
    return sorted(types)


def census(export_dir: str) -> dict:
    from tensorflow.python.framework import op_def_registry

    types = op_types(export_dir)
    return {"op_types": types,
            "unknown_to_plain_tensorflow": [t for t in types if op_def_registry.get(t) is None],
            "census_tensorflow": tf.__version__}


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "census":
        sys.exit("usage: truth.py census MODEL_DIR...")
    for d in sys.argv[2:]:
        c = census(d)
        path = os.path.join(d, "truth.json")
        data = {}
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        data.update(c)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"{d}: unknown to TensorFlow {tf.__version__}: {', '.join(c['unknown_to_plain_tensorflow']) or 'none'}")
