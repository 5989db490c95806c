"""A blocked pair whose cutting op the static pass cannot locate is an error, never a silent pass (the new-user
tester's m4: a gradient override saved as returning None). The truth: tf.GradientTape on the loaded model gives
the input no gradient."""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from gradaudit.api import AuditOptions, audit_saved_model


@tf.RegisterGradient("GradauditUnlocatedSinh")
def _none_when_saved(op, grad):  # saving traces it with op=None: None is what gets saved
    return None if op is None else grad * tf.cosh(op.inputs[0])


class _M(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(np.linspace(0.1, 0.9, 12).reshape(3, 4).astype("float32"), name="w")
        self.v = tf.Variable(np.ones((4, 2), "float32"), name="v")

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def __call__(self, x):
        h = x @ self.w
        with tf.compat.v1.get_default_graph().gradient_override_map({"Sinh": "GradauditUnlocatedSinh"}):
            h = tf.sinh(h)
        return {"y": h @ self.v}


def test_a_blocked_pair_with_no_located_cut_is_an_error(tmp_path):
    path = os.path.join(tmp_path, "m")
    m = _M()
    tf.saved_model.save(m, path, signatures={"serving_default": m.__call__},
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=True))
    loaded = tf.saved_model.load(path)
    x = tf.ones((2, 3))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = loaded.signatures["serving_default"](x=x)["y"]
    assert tape.gradient(y, x) is None  # the truth: no gradient reaches x
    report = audit_saved_model(path, AuditOptions(static_only=True))
    blocked = {(f.source, f.output) for f in report.flow if f.status == "blocked"}
    assert ("x", "y") in blocked
    errors = [f for f in report.findings if f.code == "GA103" and f.op is None]
    assert errors and "x" in errors[0].sources and "could not locate" in errors[0].message
    assert "Sinh" in errors[0].message  # the written gradient on the path, where to look
    assert report.verdict("error") == "fail"
