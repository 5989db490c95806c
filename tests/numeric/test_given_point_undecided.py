"""At the inputs given, a gradient whose difference quotients do not settle is undecided there, even when a nearby
point passes: the inputs given are the point asked about. The top eigenvector of tf.linalg.eigh at a degenerate top
eigenvalue (diag(1, 2, 2), the identity) has no derivative: the output jumps, and a default run passed it "at a
nearby point" (tester 16). Healthy twins: the same model at a generic matrix, and a function of the eigenvalues
alone (sum e**2, smooth everywhere), pass at the degenerate matrices. Truth: float64 one-sided differences of a
numpy twin at the degenerate point disagree (a jump), and agree at the generic one."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model

C = np.array([[1.0, 0.2, -0.3], [0.2, 2.0, 0.5], [-0.3, 0.5, -1.0]])
GENERIC = np.array([[[2.0, 0.3, -0.1], [0.3, 1.0, 0.4], [-0.1, 0.4, 3.5]]])
DEGENERATE = {"diag(1, 2, 2)": np.diag([1.0, 2.0, 2.0])[None], "identity": np.eye(3)[None]}


class TopVector(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 3, 3], tf.float32, name="a")])
    def __call__(self, a):
        e, v = tf.linalg.eigh(0.5 * (a + tf.linalg.matrix_transpose(a)))
        top = v[..., :, 2:3]
        return {"y": tf.reduce_sum(tf.constant(C, tf.float32) * tf.matmul(top, top, transpose_b=True), axis=[-2, -1])
                + tf.reduce_sum(e * tf.constant([1.0, 2.0, 3.0]), -1)}


class SquaredEigenvalues(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 3, 3], tf.float32, name="a")])
    def __call__(self, a):
        e, _ = tf.linalg.eigh(0.5 * (a + tf.linalg.matrix_transpose(a)))
        return {"y": tf.reduce_sum(e * e, -1)}


def _top_vector(a: np.ndarray) -> float:
    e, v = np.linalg.eigh(0.5 * (a + a.T))
    top = v[:, 2:3]
    return float(np.sum(C * (top @ top.T)) + e @ np.array([1.0, 2.0, 3.0]))


def _jumps(a: np.ndarray) -> bool:
    """Whether float64 one-sided differences along a fixed direction disagree: no derivative at `a`."""
    d = np.random.default_rng(0).standard_normal((3, 3))
    h = 1e-7
    up, down = (_top_vector(a + h * d) - _top_vector(a)) / h, (_top_vector(a) - _top_vector(a - h * d)) / h
    return abs(up - down) > 1e-3 * max(abs(up), abs(down), 1.0)


def _audit(path: str, tmp_path, a: np.ndarray):
    np.savez(tmp_path / "inputs.npz", a=a.astype(np.float32))
    return audit_saved_model(path, AuditOptions(inputs_file=str(tmp_path / "inputs.npz")))


@pytest.mark.parametrize("name", sorted(DEGENERATE))
def test_no_derivative_at_the_inputs_given_is_not_a_pass(tmp_path, name):
    a = DEGENERATE[name]
    assert _jumps(a[0]) and not _jumps(GENERIC[0])  # the truth
    path = save_module(TopVector(), str(tmp_path / "top"))
    report = _audit(path, tmp_path, a)
    assert report.verdict() == "incomplete", [(r.source, r.status, r.reason) for r in report.numeric]
    (row,) = [r for r in report.numeric if r.scale is None]
    assert row.status == "inconclusive" and "does not decide the inputs given" in row.reason
    # No note calls the jump a true gradient too small for float32 (tester 16).
    assert not any("true gradient is below" in n.text for n in report.notes)
    assert _audit(path, tmp_path, GENERIC).verdict() == "pass"


def test_a_smooth_function_of_the_eigenvalues_passes_at_a_degenerate_matrix(tmp_path):
    path = save_module(SquaredEigenvalues(), str(tmp_path / "squares"))
    for a in DEGENERATE.values():
        assert _audit(path, tmp_path, a).verdict() == "pass"


class GatedRoot(tf.Module):  # where(x > 0, sqrt(x), 0): no derivative at 0 (one-sided slope +inf), TF gives 0
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.reduce_sum(tf.where(x > 0, tf.sqrt(tf.maximum(x, 0.0)), 0.0), axis=-1)}


class GatedLogRoot(tf.Module):  # log(1 + sqrt(x)) for x > 0: the same point (slope +inf at 0), through other ops
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        root = tf.math.log1p(tf.sqrt(tf.maximum(x, 0.0)))
        return {"y": tf.reduce_sum(tf.where(x > 0, root, 0.0) * tf.constant([1.0, 2.0, 3.0, 4.0]), axis=-1)}


@pytest.mark.parametrize("module", [GatedRoot, GatedLogRoot])
def test_a_zero_gradient_where_the_differences_grow_is_not_a_pass_at_the_inputs_given(tmp_path, module):
    """At x = 0 given with --inputs TensorFlow's gradient is 0 and float64 differences grow like 1/sqrt(h): the
    check did not pass (it said "both zero", tester 17), and the probe points, elsewhere, do not decide the point
    asked about: incomplete. At a generic point the same model passes."""
    path = save_module(module(), str(tmp_path / module.__name__))
    fn = tf.saved_model.load(path).signatures["serving_default"]
    x = tf.zeros([1, 4])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x=x)["y"]
    assert np.all(tape.gradient(y, x).numpy() == 0)  # TensorFlow's gradient at 0
    d = np.ones((1, 4))
    quotients = [float(fn(x=tf.constant(h * d, tf.float32))["y"][0]) / h for h in (1e-2, 1e-4)]
    assert quotients[1] > 5 * quotients[0] > 0  # the one-sided differences grow as the step shrinks: no derivative
    np.savez(tmp_path / "zeros.npz", x=np.zeros((1, 4), np.float32))
    report = audit_saved_model(path, AuditOptions(inputs_file=str(tmp_path / "zeros.npz")))
    assert report.verdict() == "incomplete", [(r.source, r.scale, r.status, r.reason) for r in report.numeric]
    (row,) = [r for r in report.numeric if r.scale is None]
    assert row.status == "inconclusive" and row.unsettled and "both zero" not in (row.reason or "")
    np.savez(tmp_path / "generic.npz", x=np.array([[0.5, 1.5, 2.0, 0.7]], np.float32))
    assert audit_saved_model(path, AuditOptions(inputs_file=str(tmp_path / "generic.npz"))).verdict() == "pass"
