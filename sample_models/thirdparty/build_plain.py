"""Plain-TensorFlow fixtures for issue 10: registered gradients that raise, and a model without signatures.

Run with the system python3 (TensorFlow 2.21)::

    python3 sample_models/thirdparty/build_plain.py [OUT_DIR]     # default: sample_models/thirdparty

Writes OUT_DIR/<name>/ (SavedModel, truth.json and, for signature models, inputs.npz) for each model in MODELS.
truth.json is what
``tf.GradientTape`` says on the loaded model (see truth.py), on the inputs recorded in it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import truth

_SAVE_OPTIONS = tf.saved_model.SaveOptions(experimental_custom_gradients=True)


def _spec(shape, name, dtype=tf.float32):
    return tf.TensorSpec(shape, dtype, name=name)


def _module(call, input_signature, **attrs) -> tf.Module:
    cls = type("ThirdPartyFixture", (tf.Module,), {
        "__call__": tf.function(call, input_signature=input_signature, autograph=False)})
    m = cls()
    for k, v in attrs.items():
        setattr(m, k, v)
    return m


def _save(m: tf.Module, export_dir: str) -> None:
    tf.saved_model.save(m, export_dir, signatures={"serving_default": m.__call__.get_concrete_function()},
                        options=_SAVE_OPTIONS)


def prevent_gradient(export_dir: str) -> dict:
    """``PreventGradient`` on a float path: its gradient is registered, and raises LookupError when called.

    Input ``x`` float32 [None,3]; trainable ``w_in`` [3] (before the op), ``w_out`` [3] (after).
    Outputs ``y`` = PreventGradient(x * w_in) * w_out and ``direct`` = x * w_out (no PreventGradient).
    """
    def call(self, x):
        h = tf.raw_ops.PreventGradient(input=x * self.w_in, message="gradaudit fixture: frozen feature")
        return {"y": h * self.w_out, "direct": x * self.w_out}

    m = _module(call, [_spec([None, 3], "x")],
                w_in=tf.Variable([1.0, -0.5, 0.75], name="w_in"),
                w_out=tf.Variable([1.0, 0.5, 2.0], name="w_out"))
    _save(m, export_dir)
    return {"serving_default": {"x": np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], np.float32)}}


def lstsq_slow(export_dir: str) -> dict:
    """``tf.linalg.lstsq(a, b, fast=False)``: ``MatrixSolveLs``'s gradient raises ValueError for fast=False only
    (the same op with fast=True is differentiable): a gradient that raises for one attribute value.

    Input ``b`` float32 [3,1]; trainable ``a`` [3,2]. Outputs ``solution`` [2,1] = lstsq(a, b) and
    ``residual_free`` = a @ [[1],[1]] (no MatrixSolveLs).
    """
    def call(self, b):
        return {"solution": tf.linalg.lstsq(self.a, b, fast=False),
                "residual_free": tf.matmul(self.a, tf.ones([2, 1]))}

    m = _module(call, [_spec([3, 1], "b")],
                a=tf.Variable([[1.0, 0.5], [0.25, 2.0], [-1.0, 1.0]], name="a"))
    _save(m, export_dir)
    return {"serving_default": {"b": np.array([[1.0], [2.0], [0.5]], np.float32)}}


def qr_dynamic(export_dir: str) -> dict:
    """``tf.linalg.qr`` of a matrix whose shape is unknown when traced: ``Qr``'s gradient raises
    NotImplementedError ("QrGrad not implemented with dynamic shapes") - a gradient that raises for some
    shapes only (with a static shape it is differentiable).

    Input ``x`` float32 [None,None]; trainable ``w`` (scalar). Output ``r`` = R of qr(x * w) and ``scaled`` = x * w.
    """
    def call(self, x):
        _, r = tf.linalg.qr(x * self.w)
        return {"r": r, "scaled": x * self.w}

    m = _module(call, [_spec([None, None], "x")], w=tf.Variable(1.5, name="w"))
    _save(m, export_dir)
    return {"serving_default": {"x": np.array([[2.0, 1.0], [0.5, 3.0], [1.0, -1.0]], np.float32)}}


def no_signatures(export_dir: str) -> dict:
    """A tf.Module saved with the default ``tf.saved_model.save(m, path)`` and two input-signatured
    tf.functions, ``encode`` and ``decode``: with two candidates TensorFlow exports NO signature, so the saved
    functions are the only entry points (``loaded.encode``, ``loaded.decode``).

    Trainable ``w`` [4,4], ``scale`` (scalar), non-trainable ``count`` (scalar).
    ``encode(x float32 [None,4]) -> {"code": tanh(x @ w)}``;
    ``decode(code float32 [None,4]) -> {"recon": (code @ transpose(w)) * scale}``.
    """
    class Codec(tf.Module):
        def __init__(self):
            super().__init__()
            rng = np.random.default_rng(10)
            self.w = tf.Variable(rng.normal(0, 0.5, (4, 4)).astype(np.float32), name="w")
            self.scale = tf.Variable(2.0, name="scale")
            self.count = tf.Variable(0.0, name="count", trainable=False)

        @tf.function(input_signature=[_spec([None, 4], "x")])
        def encode(self, x):
            return {"code": tf.tanh(tf.matmul(x, self.w))}

        @tf.function(input_signature=[_spec([None, 4], "code")])
        def decode(self, code):
            return {"recon": tf.matmul(code, self.w, transpose_b=True) * self.scale}

    tf.saved_model.save(Codec(), export_dir)  # default: no signatures with two candidate functions
    return {"encode": {"x": np.array([[0.5, -1.0, 2.0, 0.1], [1.5, 0.25, -0.75, 1.0]], np.float32)},
            "decode": {"code": np.array([[0.2, -0.4, 0.6, 0.1], [-0.3, 0.5, 0.05, -0.9]], np.float32)}}


MODELS = {
    "prevent_gradient": prevent_gradient,
    "lstsq_slow": lstsq_slow,
    "qr_dynamic": qr_dynamic,
    "no_signatures": no_signatures,
}


def saved_function_truth(export_dir: str, inputs_by_function: dict[str, dict[str, np.ndarray]]) -> dict:
    """Truth of a model without signatures: each saved function, called as ``loaded.<name>(**inputs)``.

    Besides the stable name, records the concrete function's library name (what gradaudit reports today,
    ``__inference_encode_N``) and the FunctionDef argument names of its inputs and outputs."""
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    mg = sm.meta_graphs[0]
    fdefs = {f.signature.name: f for f in mg.graph_def.library.function}
    nodes = mg.object_graph_def.nodes
    by_child = {c.local_name: nodes[c.node_id] for c in nodes[0].children}

    loaded = tf.saved_model.load(export_dir)
    result = {"entry_points": {}, "signatures": sorted(loaded.signatures.keys()),
              "variables": truth._object_graph_variables(export_dir)}
    for name, inputs in inputs_by_function.items():
        restored = getattr(loaded, name)
        specs = [tf.TensorSpec(np.shape(v), tf.as_dtype(np.asarray(v).dtype)) for v in inputs.values()]
        cf = restored.get_concrete_function(*specs)
        saved_cf = list(by_child[name].function.concrete_functions)
        fdef = fdefs[saved_cf[0]]
        captured = [(v.name.split(":")[0], v) for v in cf.trainable_variables]
        rows = (truth.pair_truths(restored, inputs, captured)
                + truth.uncaptured(result["variables"], captured, cf.structured_outputs))
        out_keys = sorted(cf.structured_outputs)  # a dict's flat order is its sorted keys
        result["entry_points"][name] = {
            "kind": "saved_function",
            "concrete_function": saved_cf[0],
            "function_input_args": [a.name for a in fdef.signature.input_arg],
            "function_output_args": dict(zip(out_keys, [a.name for a in fdef.signature.output_arg])),
            "inputs": {k: {"dtype": str(v.dtype), "shape": list(v.shape), "value": v.reshape(-1).tolist()}
                       for k, v in inputs.items()},
            "pairs": rows,
        }
    return result


def build_one(name: str, out_dir: str) -> str:
    path = os.path.join(out_dir, name)
    inputs = MODELS[name](path)
    if name == "no_signatures":
        data = saved_function_truth(path, inputs)
    else:
        data = truth.signature_truth(path, inputs)
        np.savez(os.path.join(path, "inputs.npz"), **inputs["serving_default"])  # for gradaudit --inputs
    data.update(model=name, environment=truth.environment(), builder="build_plain.py")
    truth.write(path, data)
    return path


def main(out_dir: str) -> None:
    paths = [build_one(name, out_dir) for name in MODELS]
    # the census must run where no third-party package is imported: a fresh system python3
    subprocess.run([os.environ.get("GRADAUDIT_PLAIN_PYTHON", "python3"), os.path.join(HERE, "truth.py"),
                    "census", *paths], check=True)
    for p in paths:
        with open(os.path.join(p, "truth.json"), encoding="utf-8") as f:
            data = json.load(f)
        for ep, info in data["entry_points"].items():
            for row in info["pairs"]:
                print(f"{os.path.basename(p)} [{ep}] {row['source']} -> {row['output']}: {row['truth']}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else HERE)
