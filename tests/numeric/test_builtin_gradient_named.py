"""A whole-model gradient mismatch in a model with no custom gradient is traced to the op whose registered gradient
(TensorFlow's own) is not its derivative at the values the model gives it: at p = 0, TensorFlow's gradients of
xlogy(p, q) and xdivy(p, q) with respect to p are 0 by convention, while the derivatives are log(q) and 1/q. The
GA201 names the op, with a fix about TensorFlow's gradient, not "no op ... was found" (tester 17). Truth:
TensorFlow's tape on the loaded model against float64 central differences of the same forward."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model

Q = np.array([[0.5, 2.0, 3.0, 0.25]])


class Model(tf.Module):
    def __init__(self, f):
        self.f = f

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="p")])
    def __call__(self, p):
        return {"y": tf.reduce_sum(self.f(p, tf.constant(Q, tf.float32)) + tf.sin(p), axis=-1)}


CASES = {"Xlogy": (tf.math.xlogy, lambda p, q: p * np.log(q)),
         "Xdivy": (tf.math.xdivy, lambda p, q: p / q)}


@pytest.mark.parametrize("op_type", sorted(CASES))
def test_tensorflows_own_gradient_at_a_boundary_is_named(tmp_path, op_type):
    f, twin = CASES[op_type]
    path = save_module(Model(f), str(tmp_path / op_type))
    p = np.array([[0.0, 0.0, 0.7, 1.2]])
    fn = tf.saved_model.load(path).signatures["serving_default"]
    x = tf.constant(p, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(p=x)["y"]
    g = tape.gradient(y, x).numpy()[0]
    h = 1e-6
    true = [(np.sum(twin(p + h * e, Q) + np.sin(p + h * e)) - np.sum(twin(p - h * e, Q) + np.sin(p - h * e))) / (2 * h)
            for e in np.eye(4)[:, None, :]]
    assert abs(g[0] - true[0]) > 0.1 and abs(g[3] - true[3]) < 1e-4  # wrong at p = 0 only

    np.savez(tmp_path / "inputs.npz", p=p.astype(np.float32))
    report = audit_saved_model(path, AuditOptions(inputs_file=str(tmp_path / "inputs.npz")))
    assert report.verdict() == "fail"
    own = [f for f in report.findings if f.rule == "gradient-mismatch" and not f.message.startswith("At the probe")]
    assert own and all(f.op is not None and f.op.op_type == op_type for f in own), [f.message for f in own]
    assert all("registered gradient" in f.message and "TensorFlow's registered gradient" in f.fix for f in own)
