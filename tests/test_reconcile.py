"""Static cuts explain numeric mismatches: a deliberate stop_gradient on one path is not a wrong gradient."""

from __future__ import annotations

import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model


def test_partial_stop_gradient_mismatch_is_explained(tmp_path):
    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable(1.5, name="w")

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": x * self.w + tf.stop_gradient(tf.sin(x))}

    report = audit_saved_model(save_module(M(), str(tmp_path / "partial")), AuditOptions())
    x_check = next(n for n in report.numeric if n.source == "x")
    assert x_check.status == "fail" and "StopGradient" in x_check.reason
    mismatch = next(f for f in report.findings if f.rule == "gradient-mismatch")
    assert mismatch.severity.value == "info" and "StopGradient" in mismatch.message
    assert report.verdict() == "pass"
    assert next(n for n in report.numeric if n.source == "w").status == "pass"
