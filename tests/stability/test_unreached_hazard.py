"""A static hazard lint the stability probes cannot reach (its op reads only a variable: the probes scale the
float inputs) keeps the severity it has in --static-only, and says why the probes did not judge it; one they
reach and see nothing go wrong becomes info. Same evidence, same verdict, on every model."""

from __future__ import annotations

import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model


class _OnVariable(tf.Module):
    """log(1 + exp(w)) on a variable only (GA301), times x."""

    def __init__(self):
        self.w = tf.Variable([0.5, -1.0], name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": x * tf.math.log(1.0 + tf.exp(self.w))}


class _OnInput(tf.Module):
    """The same pattern on a bounded function of the input: the probes reach it and it never overflows."""

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.math.log(1.0 + tf.exp(tf.tanh(x)))}


def _lint(report):
    (f,) = [f for f in report.findings if f.code == "GA301"]
    return f


def test_a_lint_out_of_the_probes_reach_keeps_its_severity_and_says_why(tmp_path):
    path = save_module(_OnVariable(), str(tmp_path / "var"))
    static = _lint(audit_saved_model(path, AuditOptions(static_only=True)))
    full = _lint(audit_saved_model(path, AuditOptions()))
    assert static.severity == full.severity and full.severity.value == "warning"
    assert "Not judged by the stability probes" in full.message and "from w only" in full.message
    assert full.probed is None and full.confirmed_by is None


def test_a_lint_the_probes_reach_without_failure_is_info(tmp_path):
    f = _lint(audit_saved_model(save_module(_OnInput(), str(tmp_path / "in")), AuditOptions()))
    assert f.severity.value == "info" and f.probed
