"""A gradient TensorFlow registered that raises at the values it is given (a determinant's gradient inverts the
matrix: "Input is not invertible" at a singular one) is that op's gradient at those values, not a gradient
TensorFlow lacks: GA204 names the op and says so, and its fix is about the values, not about replacing the op.
Truth: the loaded model's forward runs at the singular input and its tape raises there, and gives a gradient at an
invertible one."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model

SINGULAR = np.array([[[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.5, -1.0, 2.0]]], np.float32)


class Det(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 3, 3], tf.float32, name="a")])
    def __call__(self, a):
        return {"y": tf.linalg.det(a)}


def _tape_raises(path: str, a: np.ndarray) -> bool:
    fn = tf.saved_model.load(path).signatures["serving_default"]
    x = tf.constant(a)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(a=x)["y"]
    try:
        tape.gradient(y, x)
    except tf.errors.InvalidArgumentError:
        return True
    return False


@pytest.fixture()
def det_model(tmp_path):
    return save_module(Det(), str(tmp_path / "det"))


def test_a_gradient_that_raises_at_the_values_given_names_its_op(det_model, tmp_path):
    assert _tape_raises(det_model, SINGULAR) and not _tape_raises(det_model, SINGULAR + np.eye(3, dtype=np.float32))
    np.savez(tmp_path / "inputs.npz", a=SINGULAR)
    report = audit_saved_model(det_model, AuditOptions(inputs_file=str(tmp_path / "inputs.npz")))
    assert report.verdict() == "fail"
    (found,) = [f for f in report.findings if f.code == "GA204"]
    assert found.message.startswith("TensorFlow's gradient of MatrixDeterminant raises at the values")
    assert "away from the values" in (found.fix or "") and "replace it" not in (found.fix or "")
