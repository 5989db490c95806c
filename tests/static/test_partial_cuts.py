"""A cut on one path of a pair other paths still connect is one finding whatever cuts it; a mask is none. Where the
cut path's true derivative is zero (a piecewise-constant value: round, argmax, float(int(x))) it is info, as
the gradient misses nothing; where the op is smooth and TensorFlow does not implement its derivative (zeta's x)
it is a warning: the gradient misses that path's part."""

from __future__ import annotations

import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model

CASES = {
    "round": (lambda x, w: x * w + tf.round(x), ("zero-gradient", "info")),
    "float_of_int": (lambda x, w: x * w + tf.cast(tf.cast(x, tf.int32), tf.float32), ("integer-path", "info")),
    "argmax_added": (lambda x, w: x * w + tf.cast(tf.argmax(x, axis=-1), tf.float32)[:, None],
                     ("zero-gradient", "info")),
    "zeta_x": (lambda x, w: x * w + tf.math.zeta(x * x + 2.0, 2.0 + 0.0 * w), ("not-differentiable", "warning")),
    "relu_mask": (lambda x, w: (x * w) * tf.cast(x > 0, tf.float32), None),
    "where_mask": (lambda x, w: tf.where(x > 0, x * w, 0.1 * x), None),
    "stop_gradient": (lambda x, w: x * w + tf.stop_gradient(x), ("stop-gradient", "info")),
    # the max it shifts by is stop_gradient'ed and added back: the shift's derivative cancels exactly
    "logsumexp": (lambda x, w: tf.reduce_logsumexp(x * w, axis=-1, keepdims=True) + 0.0 * x, None),
    "moments": (lambda x, w: tf.nn.moments(x * w, axes=[1], keepdims=True)[1] + 0.0 * x, None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_partial_cut(tmp_path, name):
    fn, expected = CASES[name]

    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable(tf.ones([3]), name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": fn(x, self.w)}

    report = audit_saved_model(save_module(M(), str(tmp_path / name)), AuditOptions(static_only=True))
    assert {(e.source, e.status) for e in report.flow} == {("x", "connected"), ("w", "connected")}
    got = [(f.rule, f.severity.value) for f in report.findings]
    assert got == ([expected] if expected else [])
    if expected:
        [f] = report.findings
        assert f.sources == ("x",) and "other paths still carry one" in f.message
        zero = "true derivative is zero almost everywhere" in f.message
        assert zero == (f.severity.value == "info" and f.rule != "stop-gradient")
        assert ("misses this path's part" in f.message) == (not zero)
