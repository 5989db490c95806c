"""--order 2 on a model without a custom gradient whose forward holds a tf.stop_gradient: tf.nn.moments computes a
variance around tf.stop_gradient(mean), whose first derivative is right (the variance does not move with its mean to
first order) and whose second is not. GA320 names the StopGradient, with the float64 copy's second derivative with
every stop_gradient made an identity as its evidence (tester 23: it said only "the ops on the path have TensorFlow's
registered gradients", and advised about a custom gradient the model does not have).

The truth is TensorFlow's own, computed here in float64 on the same function: w·H·v by differentiating the tape's
gradient again against central differences of that gradient; they differ with tf.nn.moments and agree with the
variance written out."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model

W = np.random.default_rng(0).normal(size=(6, 2))


def _norm(x, moments: bool):
    if moments:
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    else:
        mean = tf.reduce_mean(x, -1, keepdims=True)
        var = tf.reduce_mean(tf.square(x - mean), -1, keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + 1e-3)


class Norm(tf.Module):
    def __init__(self, moments: bool):
        self.moments = moments
        self.w = tf.Variable(W.astype(np.float32), name="w")

    @tf.function(input_signature=[tf.TensorSpec([3, 6], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": _norm(x, self.moments) @ self.w}


def _second_order_gap(moments: bool) -> float:
    """|w·H·v by autodiff - by central differences of the gradient| / |the differences|, float64, TensorFlow's own."""
    rng = np.random.default_rng(1)
    x0, v, w, u = (tf.constant(rng.normal(size=s)) for s in ((3, 6), (3, 6), (3, 6), (3, 2)))

    def grad(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            phi = tf.reduce_sum(u * (_norm(x, moments) @ tf.constant(W)))
        return tape.gradient(phi, x)

    with tf.GradientTape() as outer:
        outer.watch(x0)
        s = tf.reduce_sum(grad(x0) * w)
    autodiff = float(tf.reduce_sum(outer.gradient(s, x0) * v))
    h = 1e-5
    numeric = float(tf.reduce_sum((grad(x0 + h * v) - grad(x0 - h * v)) * w)) / (2 * h)
    return abs(autodiff - numeric) / abs(numeric)


def _gaps(report):
    return [f for f in report.findings if f.code == "GA320"]


def test_a_stop_gradient_in_tf_nn_moments_is_named_for_a_wrong_second_derivative(tmp_path):
    assert _second_order_gap(moments=True) > 1e-2  # the truth: TensorFlow's second derivative is off
    r = audit_saved_model(save_module(Norm(True), str(tmp_path / "moments")), AuditOptions(order=2))
    found = _gaps(r)
    assert found and r.verdict() == "fail", [f.message for f in r.findings]
    f = found[0]
    assert f.op is not None and f.op.op_type == "StopGradient" and "moments" in f.op.op_name
    assert "made an identity" in f.message and "as the central differences give" in f.message
    assert "tf.nn.moments" in f.fix and "custom gradient" not in f.fix


def test_the_variance_written_out_passes_second_order(tmp_path):
    assert _second_order_gap(moments=False) < 1e-6
    r = audit_saved_model(save_module(Norm(False), str(tmp_path / "plain")), AuditOptions(order=2))
    assert not _gaps(r) and r.verdict() == "pass", [f.message for f in r.findings]
    assert {n.status for n in r.numeric if n.order == 2} == {"pass"}


@pytest.mark.slow  # a Keras model exported, then audited
def test_keras_layer_normalization_is_the_same_class(tmp_path):
    """A second model of the class: Keras' LayerNormalization, which computes its statistics with tf.nn.moments."""
    inp = keras.Input((6,), name="x")
    out = keras.layers.Dense(2, name="head")(keras.layers.LayerNormalization(name="ln")(keras.layers.Dense(6)(inp)))
    model = keras.Model(inp, out)
    path = str(tmp_path / "keras_ln")
    model.export(path, verbose=False)
    r = audit_saved_model(path, AuditOptions(order=2))
    found = _gaps(r)
    assert found and all(f.op is not None and f.op.op_type == "StopGradient" for f in found), [
        f.message for f in r.findings]
