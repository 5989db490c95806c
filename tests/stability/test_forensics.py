"""Forensics at chosen points: the op whose forward or backward made the first non-finite value."""

from __future__ import annotations

import os

import numpy as np
import pytest


@pytest.fixture(scope="module")
def forensics(samples):
    """forensics(name) -> Forensics on the loaded sample model (cached, kept alive for the module)."""
    import tensorflow as tf

    from gradaudit.flow import analyse
    from gradaudit.graph.gradients import GradientOracle
    from gradaudit.numeric.forensics import Forensics
    from gradaudit.targets.saved_model import SavedModelFile

    made, loaded = {}, []

    def get(name: str) -> Forensics:
        if name not in made:
            path = os.path.join(samples, name)
            model = SavedModelFile(path)
            analysis = analyse(model, model.signature("serving_default"), GradientOracle())
            obj = tf.saved_model.load(path)
            loaded.append(obj)
            made[name] = Forensics(obj.signatures["serving_default"], analysis.graph, analysis.gradient_functions)
        return made[name]

    yield get
    for f in made.values():
        f.close()


def f32(*values) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def test_backward_names_sqrt_at_the_zero_row(forensics):
    x = np.array([[1, 2, 3, 4], [0, 0, 0, 0]], np.float32)
    c = forensics("unstable_norm").backward({"x": x}, "y", np.array([0.5, -1.0]))
    assert (c.op.op_type, c.op.op_name) == ("Sqrt", "norm/Sqrt") and c.detail.startswith("Sqrt received 0;")
    assert c.op.function.startswith("__inference_")  # the function the static pass names, not the frozen copy


def test_backward_of_a_healthy_point_names_nothing(forensics):
    x = np.array([[1, 2, 3, 4], [0, 1, 0, 0]], np.float32)
    assert forensics("unstable_norm").backward({"x": x}, "y", np.array([0.5, -1.0])) is None
    assert forensics("softplus").backward({"x": f32(100.0, -100.0)}, "y", np.array([1.0, 1.0])) is None


def test_forward_names_the_op_that_overflowed_and_its_input(forensics):
    f = forensics("log1pexp_naive")
    c = f.forward({"x": f32(1.0, 100.0)})
    assert c.op.op_type == "Exp" and c.detail == "Exp received 100 and returned inf"
    assert f.forward({"x": f32(1.0, 2.0)}) is None


def test_unselected_branch_of_a_where(forensics):
    c = forensics("where_nan").backward({"x": f32(2.0, 0.0)}, "y", np.array([1.0, 1.0]))
    assert c.op.op_type == "Log" and c.detail.startswith("Log received 0;")


def test_reciprocal(forensics):
    c = forensics("reciprocal_ratio").backward({"a": f32(1e-20, 1.0), "b": f32(1e-20, 1.0)}, "f",
                                               np.array([1.0, 1.0]))
    assert c.op.op_type == "Reciprocal" and c.detail.startswith("Reciprocal received 1e-20;")


def test_inside_a_saved_custom_gradient(forensics):
    """Seed 000: b**2 underflows to 0 in the hand-written gradient, and a / 0 is inf."""
    c = forensics("ratio_naive").backward({"a": f32(1.0, 1e-20), "b": f32(1.0, 1e-20)}, "f",
                                          np.array([1.0, 1.0]))
    assert (c.op.op_type, c.op.op_name) == ("RealDiv", "truediv_1")
    assert c.op.function.startswith("__inference_internal_grad_fn")
    assert c.detail.startswith("RealDiv received (1e-20, 0) and returned inf, in the custom gradient")
    assert forensics("ratio_stable").backward({"a": f32(1e-20), "b": f32(1e-20)}, "f", np.array([1.0])) is None


def test_a_nan_made_inside_a_while_loop_names_the_op_in_its_body(tmp_path):
    """Graph-mode gradients do not reach inside a loaded While: the op named is the one in its body whose
    backward can make the NaN (pow(|h|, 0.5) at 0), and the lint on it is confirmed."""
    import tensorflow as tf
    from helpers import save_module

    from gradaudit.api import AuditOptions, audit_saved_model

    class Loop(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def __call__(self, x):
            def body(i, h):
                return i + 1, tf.pow(tf.abs(h), 0.5) + h

            return {"y": tf.while_loop(lambda i, h: i < 2, body, [tf.constant(0), x])[1]}

    r = audit_saved_model(save_module(Loop(), str(tmp_path / "loop")), AuditOptions(probe_scales=(0.0, 1.0)))
    (f,) = [f for f in r.findings if f.rule == "unstable-gradient"]
    assert f.op.op_type == "Pow" and f.op.function.startswith("while_body")
    assert "While" in f.message
    (lint,) = [f for f in r.findings if f.rule == "sqrt-at-zero"]
    assert lint.severity.value == "error" and "Confirmed by the stability probes" in lint.message


def test_a_nan_gradient_made_from_a_forward_overflow_names_the_op_that_overflowed(tmp_path):
    """log(1 + exp(h)) overflows to inf where h > 88.7 and tanh after it keeps the output finite; the gradient
    of w2 is then inf * 0 = NaN in the backward of the MatMul that reads it. The op to fix is the Exp."""
    import tensorflow as tf
    from helpers import save_module

    from gradaudit.api import AuditOptions, audit_saved_model

    class SoftplusTanh(tf.Module):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.w1 = tf.Variable(rng.standard_normal((3, 4)).astype("float32"), name="w1")
            self.w2 = tf.Variable(rng.standard_normal((4, 1)).astype("float32"), name="w2")

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def __call__(self, x):
            a = tf.math.log(1.0 + tf.exp(x @ self.w1))
            return {"y": tf.tanh(a @ self.w2)}

    r = audit_saved_model(save_module(SoftplusTanh(), str(tmp_path / "softplus_tanh")),
                          AuditOptions(probe_scales=(1.0, 100.0)))
    (cell,) = [s for s in r.stability if s.source in ("w2", "*") and s.scale == 100.0]
    assert cell.status == "nonfinite_gradient" and cell.op_type == "Exp"
    assert "in the forward pass" in cell.detail and "MatMul" in cell.detail
    unstable = [f for f in r.findings if f.rule == "unstable-gradient"]
    assert unstable and all(f.op.op_type == "Exp" for f in unstable)
