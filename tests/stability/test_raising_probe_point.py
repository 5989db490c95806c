"""A probe point where TensorFlow cannot differentiate the model is the hazard itself, and the stage that did
not observe it is incomplete (issue 22): a determinant's gradient at a singular matrix (the probe point
inputs × 0) raises "Input is not invertible"; the audit passed with an empty `incomplete`."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _det_model(path: str) -> str:
    import tensorflow as tf

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3, 3], tf.float32)])
        def __call__(self, x):
            return {"y": tf.linalg.det(x)}

    m = M()
    tf.saved_model.save(m, path, signatures={"serving_default": m.__call__})
    return path


@pytest.fixture(scope="module")
def det(tmp_path_factory):
    return _det_model(str(tmp_path_factory.mktemp("det") / "det"))


def test_tape_on_the_loaded_model_raises_at_the_zero_point(det):
    import tensorflow as tf

    fn = tf.saved_model.load(det).signatures["serving_default"]
    x = tf.zeros([1, 3, 3])
    with pytest.raises(tf.errors.InvalidArgumentError, match="not invertible"):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x=x)["y"]
        tape.gradient(y, x)
    # and elsewhere the gradient is right: float64 differences of det agree with the tape
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 3, 3))
    xa = tf.constant(a, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(xa)
        y = fn(x=xa)["y"]
    g = tape.gradient(y, xa).numpy()
    h = 1e-6
    numeric = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        up, down = a.copy(), a.copy()
        up[i] += h
        down[i] -= h
        numeric[i] = (np.linalg.det(up)[0] - np.linalg.det(down)[0]) / (2 * h)
    assert np.allclose(g, numeric, rtol=1e-3, atol=1e-4)


def test_the_raising_probe_point_is_reported_and_the_verdict_is_not_pass(det):
    from gradaudit.api import AuditOptions, audit_saved_model

    report = audit_saved_model(det, AuditOptions())
    assert report.verdict() != "pass"
    assert any("probe point" in line and "not invertible" in line for line in report.incomplete), report.incomplete
    (found,) = [f for f in report.findings if f.code == "GA310"]
    assert "× 0" in found.message and "not invertible" in found.message
    assert found.op is not None and found.op.op_type == "MatrixDeterminant"
    # the numeric check at the synthesised point still passes: the gradient is right where it runs
    assert [n.status for n in report.numeric if n.scale is None] == ["pass"]


def test_a_gradient_the_static_pass_knows_raises_is_one_cause_not_an_instability(audited):
    """A no-gradient op on the path: TensorFlow raises differentiating the model at every probe point, which
    is the static pass's GA101 (and the checks' GA204), not an unstable gradient with a stable-form fix."""
    report = audited("no_gradient_op")
    rules = {f.rule for f in report.findings}
    assert "unstable-gradient" not in rules and "no-gradient" in rules
    assert any("as the static pass found" in n for n in report.notes_of("stability"))
    assert report.verdict() == "fail"


def test_a_probe_point_where_the_forward_itself_raises_names_the_forward_op(tmp_path):
    """solve(C + 1e-2 x) beside det of the same matrix, C singular (tester 11's m_solve): at inputs × 0 the forward's
    MatrixSolve raises already, which the finding says, naming it, not det's gradient; elsewhere it runs. The truth
    is the loaded model's own forward."""
    import tensorflow as tf

    c = tf.constant([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3, 3], tf.float32, name="x")])
        def __call__(self, x):
            a = c + 1e-2 * x
            b = tf.ones(tf.concat([tf.shape(a)[:-1], [1]], 0))
            return {"solve": tf.reduce_sum(tf.linalg.solve(a, b), axis=[1, 2]), "det": tf.linalg.det(a)}

    m = M()
    path = str(tmp_path / "solve")
    tf.saved_model.save(m, path, signatures={"serving_default": m.__call__})
    fn = tf.saved_model.load(path).signatures["serving_default"]
    with pytest.raises(tf.errors.InvalidArgumentError, match="not invertible"):
        fn(x=tf.zeros([1, 3, 3]))
    fn(x=tf.constant(np.random.default_rng(0).standard_normal((1, 3, 3)), tf.float32))  # runs elsewhere
    from gradaudit.api import AuditOptions, audit_saved_model

    report = audit_saved_model(path, AuditOptions())
    raised = [f for f in report.findings if "raises" in f.message and "probe point" in f.message]
    assert raised and all("its forward already" in f.message for f in raised), [f.message for f in raised]
    assert {f.op.op_type for f in raised if f.op} == {"MatrixSolve"}
    assert report.verdict() == "fail"


def _gram_det_model(path: str) -> str:
    """det(x xᵀ) + sum(x): singular wherever x has rank < 3 (the second model of the class)."""
    import tensorflow as tf

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3, 3], tf.float32)])
        def __call__(self, x):
            return {"y": tf.linalg.det(tf.matmul(x, x, transpose_b=True)) + tf.reduce_sum(x, [-2, -1])}

    m = M()
    tf.saved_model.save(m, path, signatures={"serving_default": m.__call__})
    return path


@pytest.mark.parametrize("build", [_det_model, _gram_det_model])
def test_a_gradient_that_raises_at_the_inputs_given_is_not_the_float64_copys_failure(tmp_path, build):
    """At singular inputs given with --inputs the gradient raises in float32 as in float64: the error is the
    model's (GA204), and no note says the float64 copy is not available or does not run (tester 15)."""
    import tensorflow as tf

    from gradaudit.api import AuditOptions, audit_saved_model

    path = build(str(tmp_path / "m"))
    singular = np.array([[[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 1.0, 1.0]]], np.float32)  # rank 2
    fn = tf.saved_model.load(path).signatures["serving_default"]
    x = tf.constant(singular)
    with pytest.raises(tf.errors.InvalidArgumentError, match="not invertible"):  # the truth
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x=x)["y"]
        tape.gradient(y, x)
    np.savez(tmp_path / "inputs.npz", x=singular)
    report = audit_saved_model(path, AuditOptions(inputs_file=str(tmp_path / "inputs.npz")))
    assert report.verdict() == "fail" and [f.code for f in report.findings if f.severity.value == "error"] == ["GA204"]
    copy = [n.text for n in report.notes if "float64 copy" in n.text]
    assert not [t for t in copy if "not available" in t or "does not run" in t or "no float64 copy" in t], copy
