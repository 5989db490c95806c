"""Static cuts explain numeric mismatches: a deliberate stop_gradient on one path is not a wrong gradient."""

from __future__ import annotations

import pytest
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
    # checked again on the float64 copy with the stop_gradient made an identity: there the gradient matches
    assert x_check.status == "pass" and "what StopGradient" in x_check.reason and "matches" in x_check.reason
    assert not [f for f in report.findings if f.rule == "gradient-mismatch"]
    assert report.verdict() == "pass"
    assert next(n for n in report.numeric if n.source == "w").status == "pass"


@pytest.mark.parametrize("wrong", [False, True])
def test_a_cut_on_one_output_explains_only_that_output(tmp_path, wrong):
    """`target = h + stop_gradient(tanh(h))` beside `main`: the cut explains target's difference and is checked
    apart, so it neither fails a healthy main nor excuses a wrong custom gradient on main."""

    @tf.custom_gradient
    def sq(z):
        return z * z, lambda dy: dy * (3.0 if wrong else 2.0) * z

    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable([1.0, 2.0], name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def __call__(self, x):
            h = x * self.w
            return {"main": sq(h), "target": h + tf.stop_gradient(tf.tanh(h))}

    report = audit_saved_model(save_module(M(), str(tmp_path / "m")), AuditOptions())
    main = [n for n in report.numeric if n.outputs.names == ("main",) and n.scale is None]
    target = [n for n in report.numeric if n.outputs.names == ("target",) and n.scale is None]
    assert main and target and all(n.expected_by for n in target if n.status == "fail")
    assert {n.status for n in main} == ({"fail"} if wrong else {"pass"})
    assert report.verdict() == ("fail" if wrong else "pass")


def test_a_signature_that_writes_its_variable_is_named_and_explains_the_difference():
    """tensorflow-model-optimization's pruning wrapper assigns kernel * mask at every call: the gradient with
    respect to the stored kernel is not the derivative of the output, and the op that writes is named."""
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample_models",
                        "thirdparty", "tfmot_pruned_mlp")
    report = audit_saved_model(path, AuditOptions())
    writes = [f for f in report.findings if f.rule == "writes-variable"]
    assert writes and {f.op.op_type for f in writes} == {"AssignVariableOp"}
    assert {s for f in writes for s in f.sources} == {"dense/kernel", "head/kernel"}
    assert not [f for f in report.findings if f.rule == "gradient-mismatch" and f.severity.value == "error"]
    stripped = audit_saved_model(path.replace("tfmot_pruned_mlp", "tfmot_pruned_stripped_mlp"), AuditOptions())
    assert not [f for f in stripped.findings if f.rule == "writes-variable"] and stripped.verdict() == "pass"


@pytest.mark.parametrize("factor", [1.0, 1.01])
def test_a_cut_beside_a_custom_gradient_is_checked_on_a_copy_without_the_cut(tmp_path, factor):
    """`y = act(x) @ v + stop_gradient(x @ u)` with a custom gradient for act: the finite differences see the cut
    branch, the gradient does not. On the float64 copy with the stop_gradient made an identity the gradient is
    the forward's derivative when the custom gradient is right: the cut explains the difference (a pass that
    says so); a custom gradient 1% off still differs there: a gradient-mismatch error, not "explained"."""

    @tf.custom_gradient
    def act(z):
        return tf.tanh(z), lambda dy: dy * (1.0 - tf.tanh(z) ** 2) * factor

    class M(tf.Module):
        def __init__(self):
            self.v = tf.Variable([[1.0], [-2.0]], name="v")
            self.u = tf.Variable([[0.5], [1.5]], name="u")

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": act(x) @ self.v + tf.stop_gradient(x @ self.u)}

    report = audit_saved_model(save_module(M(), str(tmp_path / "m")), AuditOptions())
    rows = [n for n in report.numeric if n.source == "x"]
    mismatches = [f for f in report.findings if f.rule == "gradient-mismatch" and f.sources == ("x",)]
    if factor == 1.0:
        assert not mismatches and report.verdict() == "pass"
        assert any(n.status == "pass" and "what StopGradient" in (n.reason or "") for n in rows)
    else:
        (f,) = mismatches
        assert f.severity.value == "error" and f.confirmed_by and "does not explain it" in f.message
        assert report.verdict() == "fail"
        assert all(not n.expected_by for n in rows)


def test_a_variable_the_cut_blocks_entirely_does_not_explain_the_variables_check(tmp_path):
    """`y = act(x @ w) @ v + stop_gradient(x @ u)` with act's custom gradient 1% off: u is blocked entirely, so
    it is not in the check of the variables together ("*"); that check fails on w and is not "explained" by
    the stop_gradient on u."""
    import numpy as np

    @tf.custom_gradient
    def act(h):
        t = tf.tanh(h)
        return h * t, lambda dy: dy * (t + h * (1 - t * t)) * 1.01

    class M(tf.Module):
        def __init__(self):
            r = np.random.default_rng(14)
            self.w = tf.Variable(r.standard_normal((4, 6)).astype("float32") * 0.5, name="w")
            self.v = tf.Variable(r.standard_normal((6, 2)).astype("float32"), name="v")
            self.u = tf.Variable(r.standard_normal((4, 2)).astype("float32"), name="u")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": act(x @ self.w) @ self.v + tf.stop_gradient(x @ self.u)}

    report = audit_saved_model(save_module(M(), str(tmp_path / "m")), AuditOptions())
    together = [n for n in report.numeric if n.source == "*" and n.scale is None]
    assert together and all(n.status == "fail" and not n.expected_by for n in together)
    assert "w" in {s for f in report.findings if f.rule == "gradient-mismatch" and f.severity.value == "error"
                   for s in f.sources}
