"""A wrong gradient of TensorFlow's own (no custom gradient in the model) names the op whose registered
gradient is undefined or wrong at degenerate inputs, on the failing pair's path: Cumprod where a factor is
exactly zero, SelfAdjointEigV2 and Svd at repeated eigenvalues or singular values. Truth: float64 finite
differences against tf.GradientTape on the loaded model, computed here."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model


class _Cumprod(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float64, name="x")])
    def __call__(self, x):
        return {"c": tf.reduce_sum(tf.math.cumprod(x, axis=1) * [1.0, 2.0, 3.0, 4.0], axis=1),
                "s": tf.reduce_sum(tf.sin(x), axis=1)}


class _Eigh(tf.Module):
    """The eigen-decomposition of a variable at the identity: every eigenvalue repeated."""

    def __init__(self):
        self.S = tf.Variable(tf.eye(3, dtype=tf.float64), name="S")

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float64, name="x")])
    def __call__(self, x):
        e, v = tf.linalg.eigh(self.S + tf.transpose(self.S))
        return {"y": tf.reduce_sum((x @ v) ** 2 * e, axis=1)}


def _tape_disagrees(path, inputs, source):
    """Whether tf.GradientTape on the loaded model disagrees with float64 central differences along a random
    direction of `source` (an input name, or a variable of the signature)."""
    loaded = tf.saved_model.load(path)  # kept: the signature's variables live on it
    fn = loaded.signatures["serving_default"]
    rng = np.random.default_rng(0)
    var = next((v for v in fn.trainable_variables if v.name.startswith(source)), None)
    target = var if var is not None else tf.Variable(inputs[source])
    d = rng.normal(size=target.shape)

    def loss():
        feed = {k: tf.constant(v) for k, v in inputs.items()}
        if var is None:
            feed[source] = target
        return tf.add_n([tf.reduce_sum(t) for t in fn(**feed).values()])

    with tf.GradientTape() as tape:
        value = loss()
    g = tape.gradient(value, target).numpy()
    base = target.numpy()
    h = 1e-6
    target.assign(base + h * d)
    up = float(loss())
    target.assign(base - h * d)
    down = float(loss())
    target.assign(base)
    fd, ad = (up - down) / (2 * h), float(np.sum(g * d))
    return abs(fd - ad) > 1e-3 * max(abs(fd), abs(ad))


@pytest.mark.parametrize("name, module, inputs, source, op_type", [
    ("cumprod", _Cumprod, {"x": np.array([[0.5, 0.0, 2.0, 1.5], [1.0, -0.5, 0.0, 2.0]])}, "x", "Cumprod"),
    ("eigh", _Eigh, {"x": np.array([[0.3, -1.0, 2.0], [1.0, 0.5, -0.2]])}, "S", "SelfAdjointEigV2"),
])
def test_the_op_with_the_wrong_registered_gradient_is_named(tmp_path, name, module, inputs, source, op_type):
    path = save_module(module(), str(tmp_path / name))
    np.savez(tmp_path / "in.npz", **inputs)
    assert _tape_disagrees(path, inputs, source)  # the truth: TensorFlow's gradient is wrong there
    report = audit_saved_model(path, AuditOptions(inputs_file=str(tmp_path / "in.npz")))
    wrong = [f for f in report.findings if f.rule == "gradient-mismatch" and f.severity.value == "error"]
    assert wrong and all(f.op is not None and f.op.op_type == op_type for f in wrong), wrong
    assert all(op_type in f.message for f in wrong)
    # the healthy output of the same model is not blamed
    assert not [f for f in wrong if "s" in f.outputs and len(f.outputs) == 1]
