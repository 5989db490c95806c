"""A gradient somebody wrote that is wrong only for small inputs is checked there: in a model holding a saved custom
gradient the probes also check the gradient against finite differences at inputs x 1e-3 (tester 17: a safe log whose
custom gradient is floored at 1e-2, 20 to 120 times too small for p in (1e-6, 1e-2), passed; the 1e-3 rung only
checked finiteness). Healthy twin: the same safe log with its right gradient passes. Truth: TensorFlow's tape on the
loaded model against float64 central differences of the same forward at p = 1e-3."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model


def _safe_log(floor: float):
    @tf.custom_gradient
    def safe_log(x):
        def grad(dy):
            return dy * tf.where(x > 1e-6, 1.0 / tf.maximum(x, floor), tf.zeros_like(x))
        return tf.math.log(tf.maximum(x, 1e-6)), grad
    return safe_log


def _signed_square(floor: float):  # x |x|, whose derivative 2|x| is written floored at `floor`
    @tf.custom_gradient
    def signed_square(x):
        return x * tf.abs(x), lambda dy: dy * 2.0 * tf.maximum(tf.abs(x), floor)
    return signed_square


class Model(tf.Module):
    def __init__(self, f):
        self.f = f

    @tf.function(input_signature=[tf.TensorSpec([None, 6], tf.float32, name="p")])
    def __call__(self, p):
        return {"y": tf.reduce_sum(self.f(p), axis=-1)}


CASES = {"safe_log_floored": (_safe_log(1e-2), lambda p: np.log(np.maximum(p, 1e-6)), True),
         "signed_square_floored": (_signed_square(1e-2), lambda p: p * np.abs(p), True),
         "safe_log_right": (_safe_log(1e-6), lambda p: np.log(np.maximum(p, 1e-6)), False)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_written_gradient_wrong_only_for_small_inputs_fails_there(tmp_path, name):
    f, twin, wrong = CASES[name]
    path = save_module(Model(f), str(tmp_path / name))
    fn = tf.saved_model.load(path).signatures["serving_default"]
    p = np.full((1, 6), 1e-3)
    x = tf.constant(p, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(p=x)["y"]
    g = tape.gradient(y, x).numpy()[0, 0]
    h = 1e-7
    true = (twin(p + h)[0, 0] - twin(p - h)[0, 0]) / (2 * h)
    assert (abs(g - true) > 0.5 * abs(true)) == wrong  # the truth at p = 1e-3

    report = audit_saved_model(path, AuditOptions(timeout=None))
    failing = [f for f in report.findings if f.rule == "gradient-mismatch" and f.severity.value == "error"]
    if wrong:
        assert report.verdict() == "fail" and failing
        assert any("0.001" in f.message for f in failing), [f.message for f in failing]
        assert [r for r in report.numeric if r.scale == 1e-3 and r.status == "fail"]
    else:
        assert report.verdict() == "pass" and not failing
        assert [r for r in report.numeric if r.scale == 1e-3 and r.status == "pass"]
