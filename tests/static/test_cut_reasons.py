"""A cut's reason is the true one, from the registry and the op's own forward: a smooth op whose registered
gradient gives an input none is TensorFlow not implementing that derivative (GA102), not "piecewise constant";
a cut where the true derivative is zero (Floor for an integer count, the backward of a ReLU-like activation, a
stop_gradient on a max that is subtracted and added back) loses nothing and never says the gradient misses a
part. The truth: TensorFlow's gradient on the loaded float64 model against central differences."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model

D = tf.float64


def _model(tmp_path, name, fn, shape=(2, 3), input_name="x"):
    m = tf.Module()
    m.w = tf.Variable(tf.constant(0.7, D, [shape[-1]]) if len(shape) == 2 else tf.constant(0.3, D), name="w")
    m.call = tf.function(lambda x: fn(m, x), input_signature=[tf.TensorSpec(shape, D, name=input_name)])
    return save_module(m, str(tmp_path / name), m.call)


def _truth(path, output, x0, source="x"):
    """(TensorFlow's directional derivative or None, the central difference) of <u, output> along v."""
    loaded = tf.saved_model.load(path)
    fn = loaded.signatures["serving_default"]
    key = next(iter(fn.structured_input_signature[1]))
    rng = np.random.default_rng(0)
    x = tf.constant(x0, D)
    u = rng.normal(size=fn(**{key: x})[output].shape)
    target = x if source == "x" else loaded.w
    v = rng.normal(size=target.shape)

    def f(at):
        if source == "x":
            return float(np.sum(fn(**{key: tf.constant(at, D)})[output].numpy() * u))
        loaded.w.assign(at)
        return float(np.sum(fn(**{key: x})[output].numpy() * u))

    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(fn(**{key: x})[output] * u)
    g = tape.gradient(loss, target)
    base, h = target.numpy(), 1e-5
    fd = (f(base + h * v) - f(base - h * v)) / (2 * h)
    if source != "x":
        loaded.w.assign(base)
    return (None if g is None else float(np.sum(g.numpy() * v))), fd


def _only(report, rule):
    [f] = [f for f in report.findings if f.rule == rule]
    return f


X0 = np.array([[0.3, -0.8, 1.1], [0.6, 0.2, -0.4]])


def test_betainc_is_smooth_and_tensorflow_does_not_implement_its_a_b_gradient(tmp_path):
    path = _model(tmp_path, "betainc", lambda m, x: {"y": tf.math.betainc(tf.nn.softplus(x) + 1.0,
                                                                          2.0 + 0.0 * x, tf.sigmoid(x)) * m.w})
    tape, fd = _truth(path, "y", X0)
    assert abs(tape - fd) > 1e-3 * abs(fd)  # the gradient really misses the a-path's part
    f = _only(audit_saved_model(path, AuditOptions(static_only=True)), "not-differentiable")
    assert f.op.op_type == "Betainc" and f.severity.value == "warning"
    assert "does not implement" in f.message and "piecewise constant" not in f.message.split(";")[0]
    assert "misses this path's part" in f.message and "argmax" not in f.fix


def test_zeta_in_x_is_smooth_and_its_gradient_is_not_implemented(tmp_path):
    def fn(m, x):
        q = tf.fill(tf.shape(x), tf.constant(2.0, D))  # depends on x's shape only
        return {"y": tf.math.zeta(x * x + 2.0, q) * m.w}

    path = _model(tmp_path, "zeta", fn)
    tape, fd = _truth(path, "y", X0)
    assert not tape and abs(fd) > 1e-3  # TensorFlow gives zero (None inside the function); the value moves
    report = audit_saved_model(path, AuditOptions(static_only=True))
    f = _only(report, "not-differentiable")
    assert f.op.op_type == "Zeta" and f.severity.value == "error" and "does not implement" in f.message
    assert next(e for e in report.flow if e.source == "x").status == "blocked"


@pytest.mark.slow  # a model's numeric checks, seconds
def test_the_floor_inside_expm_loses_nothing(tmp_path):
    path = _model(tmp_path, "expm", lambda m, a: {"y": tf.linalg.expm(a * m.w)}, shape=(3, 3), input_name="a")
    a0 = np.array([[0.5, 1.2, -0.3], [0.1, -0.7, 0.9], [1.4, 0.2, 0.3]]) * 3
    tape, fd = _truth(path, "y", a0)
    assert abs(tape - fd) < 1e-6 * abs(fd)  # TensorFlow's gradient is the derivative
    f = _only(audit_saved_model(path, AuditOptions(static_only=True)), "zero-gradient")
    assert f.op.op_type == "Floor" and f.severity.value == "info"
    assert "true derivative is zero almost everywhere" in f.message and "misses this path's part" not in f.message


@pytest.mark.slow  # a model's numeric checks, seconds
def test_a_gradient_penalty_through_leaky_relu_is_exact(tmp_path):
    def fn(m, x):
        with tf.GradientTape() as t:
            t.watch(x)
            s = tf.reduce_sum(tf.nn.leaky_relu(x * m.w, 0.2))
        g = t.gradient(s, x)
        return {"pen": tf.reduce_sum(g * g * x, -1)}

    path = _model(tmp_path, "gp", fn)
    for source in ("x", "w"):
        tape, fd = _truth(path, "pen", X0, source)
        assert abs((tape or 0.0) - fd) < 1e-6 * max(1.0, abs(fd)), source
    report = audit_saved_model(path, AuditOptions(static_only=True))
    f = _only(report, "zero-gradient")
    assert f.op.op_type == "LeakyReluGrad" and f.severity.value == "info" and report.verdict() == "pass"
    assert "misses this path's part" not in f.message


def test_a_hand_written_logsumexp_shift_is_exact(tmp_path):
    def fn(m, x):
        z = x * m.w
        s = tf.stop_gradient(tf.reduce_max(z, -1, keepdims=True))
        return {"y": tf.math.log(tf.reduce_sum(tf.exp(z - s), -1, keepdims=True)) + s,
                "e": tf.exp(z - tf.stop_gradient(tf.reduce_max(z, -1, keepdims=True)))}  # not added back: a cut

    path = _model(tmp_path, "lse", fn)
    tape, fd = _truth(path, "y", X0)
    assert abs(tape - fd) < 1e-6 * abs(fd)
    report = audit_saved_model(path, AuditOptions(static_only=True))
    stops = [f for f in report.findings if f.rule == "stop-gradient"]
    assert [f.outputs for f in stops] == [("e",)]


def test_the_analysis_of_a_measured_cut_still_travels_to_the_child(tmp_path):
    """The child that runs the model receives the parent's static pass: it must pickle (no protobuf maps)."""
    import pickle

    from gradaudit.flow import analyse
    from gradaudit.graph.gradients import GradientOracle
    from gradaudit.safety.gate import is_pure
    from gradaudit.targets.saved_model import SavedModelFile

    path = _model(tmp_path, "round", lambda m, x: {"y": x * m.w + tf.round(x)})
    target = SavedModelFile(path)
    analysis = analyse(target, target.signature("serving_default"), GradientOracle(may_run=is_pure))
    assert [c.piecewise for c in analysis.cuts.values()] == [True]
    assert pickle.loads(pickle.dumps(analysis)).cuts.keys() == analysis.cuts.keys()


def test_only_pure_ops_run_on_synthetic_values():
    """The oracle runs an op's kernel to tell a flat op from a smooth one only when the caller allows it (the
    safety gate's pure ops): without that, nothing runs and the answer is unknown."""
    from gradaudit.graph.gradients import GradientOracle
    from gradaudit.safety.gate import is_pure

    float_ = tf.float32.as_datatype_enum
    ran: list[str] = []

    def allowed(op_type: str) -> bool:
        ran.append(op_type)
        return is_pure(op_type)

    assert GradientOracle().flat_inputs("Floor", (float_,), (float_,), {}) == (None,)
    assert GradientOracle(may_run=allowed).flat_inputs("Floor", (float_,), (float_,), {}) == (True,)
    assert ran == ["Floor"] and not is_pure("WriteFile") and not is_pure("ReadFile")

