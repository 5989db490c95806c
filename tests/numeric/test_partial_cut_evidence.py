"""A smooth op whose gradient TensorFlow does not implement for one input (Betainc's a, Zeta's x) on one path
of a pair that other paths still connect: the static pass warns that the gradient misses that path's part
(GA102). The numeric checks decide it: where they measure the part missing, the GA102 is an error with that
measurement as its evidence (the model's gradient is wrong: a CI gate must not pass it); where they agree with
the derivative (the path's part is zero, `a = 2 + 0 * x`), it is info with that evidence. Two ops of the class,
each with a twin; the truth is tf.GradientTape on the loaded model against float64 central differences."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.model import Severity


def _betainc(zero: bool):
    def f(x):
        a = 2.0 + (0.0 if zero else 0.5) * tf.tanh(x)
        return tf.math.betainc(a, 3.0 + 0.0 * x, tf.sigmoid(x))
    return f


def _zeta(zero: bool):
    def f(x):
        s = 3.0 + (0.0 if zero else 0.5) * tf.tanh(x)
        return tf.math.zeta(s, 1.0 + tf.sigmoid(x))
    return f


MODELS = {"betainc_zero": _betainc(True), "betainc_real": _betainc(False), "zeta_zero": _zeta(True),
          "zeta_real": _zeta(False)}


class _Model(tf.Module):
    def __init__(self, f):
        super().__init__()
        self._f = f

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float64, name="x")])
    def __call__(self, x):
        return {"y": self._f(x)}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("partial_cut")
    paths = {}
    for name, f in MODELS.items():
        module = _Model(f)
        paths[name] = str(root / name)
        tf.saved_model.save(module, paths[name], signatures={"serving_default": module.__call__})
    return paths


def _tape_agrees(path: str) -> bool:
    """The loaded model's tape gradient along a random direction against float64 central differences."""
    loaded = tf.saved_model.load(path)  # kept: the function lives on it
    fn = loaded.signatures["serving_default"]
    rng = np.random.default_rng(0)
    x0, d = rng.normal(size=(2, 3)), rng.normal(size=(2, 3))
    x = tf.constant(x0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(fn(x=x)["y"])
    g = float(np.sum(tape.gradient(y, x).numpy() * d))
    h = 1e-5
    fd = (float(tf.reduce_sum(fn(x=tf.constant(x0 + h * d))["y"]))
          - float(tf.reduce_sum(fn(x=tf.constant(x0 - h * d))["y"]))) / (2 * h)
    return abs(g - fd) <= 1e-6 * max(abs(fd), 1e-12)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_numeric_checks_decide_what_a_partial_not_differentiable_cut_leaves_out(saved, name):
    truth_agrees = _tape_agrees(saved[name])
    assert truth_agrees is name.endswith("_zero")
    report = audit_saved_model(saved[name], AuditOptions())
    [cut] = [f for f in report.findings if f.code == "GA102"]
    if truth_agrees:
        assert cut.severity is Severity.INFO and cut.probed and "agree with the derivative" in cut.probed
        assert report.verdict() == "pass", [(f.code, f.severity, f.message) for f in report.findings]
    else:
        assert cut.severity is Severity.ERROR and cut.confirmed_by
        assert "relative error" in cut.confirmed_by
        assert report.verdict() == "fail"
