"""An op whose gradient raises makes TensorFlow refuse every gradient of the loaded signature: its backward is
built as a whole (nested functions included), so every pair is `blocked` with `raises`, the op named."""

from __future__ import annotations

import tensorflow as tf
from helpers import save_module
from truth import tape_truth

from gradaudit.api import AuditOptions, audit_saved_model


def _prevent_in_a_nested_function():
    """PreventGradient inside a nested tf.function on x * w1; output z = x * w2 never touches it."""
    class M(tf.Module):
        def __init__(self):
            self.w1 = tf.Variable(tf.ones([4]), name="w1")
            self.w2 = tf.Variable(tf.ones([4]), name="w2")

        @tf.function
        def inner(self, x):
            return tf.raw_ops.PreventGradient(input=x * self.w1, message="frozen")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": self.inner(x), "z": x * self.w2}

    return M()


def _dynamic_qr():
    """tf.linalg.qr of a matrix of unknown shape: QrGrad raises for dynamic shapes; `s` never reads the QR."""
    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable(2.0, name="w")
            self.v = tf.Variable(3.0, name="v")

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32, name="a")])
        def __call__(self, a):
            return {"r": tf.linalg.qr(a * self.w, full_matrices=True)[1], "s": a * self.v}

    return M()


def _prevent_on_one_of_two_paths():
    """PreventGradient on one of the two paths from x to y (the other, x * 2, carries a gradient): TensorFlow still
    raises for every pair, so no path's part is "missed"."""
    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable(2.0, name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": tf.raw_ops.PreventGradient(input=x * self.w, message="no") + x * 2.0}

    return M()


def _check(tmp_path, name, module, op_type):
    path = save_module(module, str(tmp_path / name))
    truth = tape_truth(path, ["serving_default"])["serving_default"]
    assert truth and all(t.startswith("error") for t in truth.values()), truth  # TensorFlow refuses every pair
    report = audit_saved_model(path, AuditOptions(static_only=True))
    assert {(e.source, e.output) for e in report.flow} == set(truth)
    for e in report.flow:
        assert e.status == "blocked" and e.raises, (e.source, e.output, e.status)
        assert op_type in {c.op.op_type for c in e.blocked_by}
    [f] = [f for f in report.findings if f.rule == "gradient-raises"]
    assert f.op.op_type == op_type and "every pair of the signature" in f.message
    assert "misses" not in f.message and "cuts" not in f.message  # it raises: it neither cuts nor drops a part
    assert report.flow[0].to_dict()["raises"] is True


def test_prevent_gradient_in_a_nested_function_raises_for_every_pair(tmp_path):
    _check(tmp_path, "prevent", _prevent_in_a_nested_function(), "PreventGradient")


def test_prevent_gradient_beside_a_differentiable_path_raises_for_every_pair(tmp_path):
    _check(tmp_path, "prevent_partial", _prevent_on_one_of_two_paths(), "PreventGradient")


def test_dynamic_shape_qr_raises_for_every_pair(tmp_path):
    _check(tmp_path, "qr", _dynamic_qr(), "Qr")


def test_a_smooth_model_has_no_raising_pairs(tmp_path):
    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable(tf.ones([4]), name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": tf.tanh(x * self.w)}

    report = audit_saved_model(save_module(M(), str(tmp_path / "smooth")), AuditOptions(static_only=True))
    assert {e.status for e in report.flow} == {"connected"} and not any(e.raises for e in report.flow)
