"""A float64 copy of a model whose class ids come from Keras 3's argmax (a Bitcast of the softmax's float32 bits):
the copy casts the float back to float32 before the Bitcast, so its ids are the saved model's, and the float output
is checked in float64 (tester 14: 'Float64 evaluation is not possible (Bitcast ...)' dropped float64 checks for the
probabilities too)."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.numeric.runner import ModelLoads


def _two_outputs(path: str) -> str:
    keras.utils.set_random_seed(0)
    x = keras.Input((6,), name="x")
    probs = keras.layers.Dense(4, activation="softmax", name="probs")(keras.layers.Dense(8, activation="tanh")(x))
    cls = keras.layers.Lambda(lambda p: keras.ops.argmax(p, axis=-1), name="cls")(probs)
    keras.Model(x, {"probs": probs, "cls": cls}).export(path, verbose=False)
    return path


def test_the_float64_copy_keeps_the_class_ids_and_checks_the_probabilities_in_float64(tmp_path):
    path = _two_outputs(str(tmp_path / "m"))
    graph = tf.saved_model.load(path).signatures["serving_default"].graph.as_graph_def()
    bitcasts = [n for f in graph.library.function for n in f.node_def if n.op == "Bitcast"] + \
        [n for n in graph.node if n.op == "Bitcast"]
    assert bitcasts  # what this test is about: Keras' argmax reinterprets the softmax's bits
    x = np.random.default_rng(0).standard_normal((16, 6)).astype(np.float32)
    loads = ModelLoads(path, ("serve",), "serving_default")
    try:
        saved, copy = loads.get(False).fn, loads.get(True).fn
        ids = saved(x=tf.constant(x))
        ids64 = copy(x=tf.constant(x, tf.float64))
        key = next(k for k in ids if ids[k].dtype.is_integer)
        assert np.array_equal(ids[key].numpy(), ids64[key].numpy())  # the same class ids as TensorFlow's own
        probs = next(k for k in ids if ids[k].dtype.is_floating)
        assert ids64[probs].dtype == tf.float64
        assert np.allclose(ids[probs].numpy(), ids64[probs].numpy(), atol=1e-6)
    finally:
        loads.close()
    report = audit_saved_model(path, AuditOptions())
    assert report.verdict() == "pass"
    assert {n.dtype for n in report.numeric if n.scale is None and n.status == "pass"} == {"float64"}
    assert not [n for n in report.notes if "Float64 evaluation is not possible" in n.text]
