"""At the probe point inputs × 0, the gradient is checked against finite differences too, not only for being finite:
TensorFlow's registered gradient of some ops is not their derivative exactly where an entry is 0 (Cumprod divides by
its inputs; Xlogy's gradient for x is 0 by convention where the derivative is log y), and exact zeros are ordinary in
real data (padding). A discrepancy there is never confirmed at a nearby point (the gradient is right everywhere
else), so the local checks at the same point name the op, and the row fails with that evidence (tester 21: both
passed before). A ReLU in front masks the op's error (its gradient at 0 is 0): that model's gradient is right and
it passes. Truth: TensorFlow's tape on the loaded model against float64 central differences of a numpy twin."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model

Y = np.array([[0.3, -1.2, 2.0, 0.7]])


def _softplus(v):
    return np.log1p(np.exp(v))


class Model(tf.Module):
    def __init__(self, f):
        self.f = f

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.reduce_sum(self.f(x) + 0.1 * tf.sin(x), axis=-1)}


CASES = {
    "Cumprod": (lambda x: tf.math.cumprod(x, axis=-1), lambda x: np.cumprod(x, axis=-1)),
    "Xlogy": (lambda x: tf.math.xlogy(x, tf.nn.softplus(tf.constant(Y, tf.float32)) + 0.1),
              lambda x: x * np.log(_softplus(Y) + 0.1)),
}


def _truth(path: str, twin, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the loaded model's tape gradient of y at x, float64 central differences of the twin there)"""
    fn = tf.saved_model.load(path).signatures["serving_default"]
    t = tf.constant(x, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(t)
        y = fn(x=t)["y"]
    g = tape.gradient(y, t).numpy()[0]

    def forward(v):
        return float(np.sum(twin(v) + 0.1 * np.sin(v)))

    h = 1e-6
    e = np.eye(4)[:, None, :]
    return g, np.array([(forward(x + h * d) - forward(x - h * d)) / (2 * h) for d in e])


def _wrong_at_zero_only(path: str, twin) -> None:
    """The truth both kinds of case rest on: the model's gradient is wrong at 0 and right away from it."""
    g, true = _truth(path, twin, np.zeros((1, 4)))
    assert np.max(np.abs(g - true)) > 0.1  # wrong at 0
    g, true = _truth(path, twin, np.array([[0.4, -0.8, 1.1, 0.6]]))
    assert np.allclose(g, true, atol=1e-4)  # right away from 0


@pytest.mark.parametrize("op_type", sorted(CASES))
def test_a_registered_gradient_wrong_where_an_entry_is_zero_fails_naming_the_op(tmp_path, op_type):
    f, twin = CASES[op_type]
    path = save_module(Model(f), str(tmp_path / op_type))
    _wrong_at_zero_only(path, twin)

    report = audit_saved_model(path, AuditOptions())
    assert report.verdict() == "fail"
    mismatches = [f for f in report.findings if f.rule == "gradient-mismatch"]
    assert mismatches and all(f.op is not None and f.op.op_type == op_type for f in mismatches), \
        [(f.op, f.message) for f in mismatches]
    assert all("inputs × 0" in f.message and "x" in f.sources for f in mismatches)
    at_zero = [r for r in report.numeric if r.scale == 0.0 and r.source == "x"]
    assert at_zero and all(r.status == "fail" and op_type in (r.evidence or "") for r in at_zero)
    # the own point and the other probe points pass: the error is at 0 only
    assert all(r.status == "pass" for r in report.numeric if r.source == "x" and r.scale not in (0.0,))


def test_an_error_a_relu_masks_at_zero_is_no_finding(tmp_path):
    path = save_module(Model(lambda x: tf.math.cumprod(tf.nn.relu(x), axis=-1)), str(tmp_path / "masked"))
    fn = tf.saved_model.load(path).signatures["serving_default"]
    t = tf.zeros((1, 4))
    with tf.GradientTape() as tape:
        tape.watch(t)
        y = fn(x=t)["y"]
    g = tape.gradient(y, t).numpy()[0]

    def forward(v):
        return float(np.sum(np.cumprod(np.maximum(v, 0), axis=-1) + 0.1 * np.sin(v)))

    h = 1e-6
    below = np.array([(forward(np.zeros(4)) - forward(-h * d)) / h for d in np.eye(4)])
    assert np.allclose(g, below, atol=1e-4)  # TensorFlow's gradient at the kink is the one-sided derivative from below

    report = audit_saved_model(path, AuditOptions())
    assert report.verdict() == "pass", [(f.code, f.message) for f in report.findings]
    assert not [f for f in report.findings if f.rule == "gradient-mismatch"]


@tf.custom_gradient
def _sin_zero_at_zero(x):
    """sin with a custom gradient that is cos(x) everywhere but exactly at 0, where it returns 0 (tester 24)."""
    return tf.sin(x), lambda dy: dy * tf.where(tf.equal(x, 0.0), tf.zeros_like(x), tf.cos(x))


@tf.custom_gradient
def _softplus_zero_at_zero(x):
    """softplus with a custom gradient that is sigmoid(x) everywhere but exactly at 0, where it returns 0."""
    return tf.nn.softplus(x), lambda dy: dy * tf.where(tf.equal(x, 0.0), tf.zeros_like(x), tf.sigmoid(x))


WRITTEN = {"sin": (_sin_zero_at_zero, np.sin), "softplus": (_softplus_zero_at_zero, _softplus)}


@pytest.mark.parametrize("name", sorted(WRITTEN))
def test_a_custom_gradient_wrong_only_at_zero_fails(tmp_path, name):
    """A custom gradient that passes its own check at inputs × 1 and fails it at inputs × 0 is wrong there, not a
    surrogate: the row at 0 fails naming it (before, only TensorFlow's own gradients were named at that point, and
    this passed with the whole-model row at 0 undecided)."""
    f, twin = WRITTEN[name]
    path = save_module(Model(f), str(tmp_path / name))
    _wrong_at_zero_only(path, twin)
    report = audit_saved_model(path, AuditOptions())
    assert report.verdict() == "fail", [(f.code, f.message) for f in report.findings]
    mismatches = [f for f in report.findings if f.rule == "gradient-mismatch" and f.severity.value == "error"]
    assert mismatches and all(f.op is not None and f.op.op_type == "IdentityN" for f in mismatches)
    at_zero = [r for r in report.numeric if r.scale == 0.0 and r.source == "x"]
    assert at_zero and all(r.status == "fail" and "not a surrogate" in (r.evidence or "") for r in at_zero)


class CrossEntropy(tf.Module):
    """-xlogy(labels, softmax(x @ w)) with labels a float input: at labels = 0 TensorFlow's gradient for labels is 0
    (its convention) where the derivative is log p; the gradients for x and w are right there."""

    def __init__(self):
        self.w = tf.Variable(tf.random.stateless_normal([4, 3], [1, 2]), name="w")

    @tf.function(input_signature=[tf.TensorSpec([2, 4], tf.float32, name="x"),
                                  tf.TensorSpec([2, 3], tf.float32, name="labels")])
    def __call__(self, x, labels):
        return {"loss": -tf.reduce_sum(tf.math.xlogy(labels, tf.nn.softmax(x @ self.w)))}


def test_an_op_named_at_zero_is_said_of_the_sources_whose_rows_it_explains(tmp_path):
    path = save_module(CrossEntropy(), str(tmp_path / "xent"))
    loaded = tf.saved_model.load(path)
    fn = loaded.signatures["serving_default"]
    x = tf.random.stateless_normal([2, 4], [3, 4])
    labels = tf.zeros([2, 3])
    with tf.GradientTape() as tape:
        tape.watch([x, labels])
        loss = fn(x=x, labels=labels)["loss"]
    g_x, g_labels = tape.gradient(loss, [x, labels])
    h = 1e-3  # the loss is linear in labels: one-sided differences are exact up to rounding
    moved = float(fn(x=x, labels=labels + h)["loss"] - loss) / h
    assert float(tf.reduce_max(tf.abs(g_labels))) == 0.0 and abs(moved) > 0.5  # TensorFlow's 0, the truth -sum log p
    assert float(tf.reduce_max(tf.abs(g_x))) == 0.0  # and the loss is flat in x at labels 0: right
    report = audit_saved_model(path, AuditOptions())
    named = [f for f in report.findings if f.rule == "gradient-mismatch" and f.op is not None
             and f.op.op_type == "Xlogy"]
    assert named and all(f.sources == ("labels",) for f in named), [(f.sources, f.message) for f in named]
