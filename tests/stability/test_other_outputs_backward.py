"""A gradient that is NaN only because TensorFlow differentiates a signature as a whole: the loaded signature's
backward runs every output's backward, with zero cotangents for the outputs not asked for, so an infinite local
derivative in one output's backward (Angle or Atan2 at 0) makes 0 × inf = NaN in the gradient of another output
whose own backward is finite there. Once, the second output's GA310 said "the op at fault could not be located"
and pointed at the other finding, which (for the complex Angle) could not locate its op either, the two pointing
at each other. The truth is the tape on the loaded model and on the second output's function alone."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model


class ComplexHeads(tf.Module):
    """|z| and angle(z) of z = x0 + i x1: Angle's gradient is infinite at z = 0, ComplexAbs's is finite there
    (TensorFlow's gradient divides with div_no_nan)."""

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
    def __call__(self, x):
        z = tf.complex(x[:, 0], x[:, 1])
        return {"y": tf.abs(z), "a": tf.math.angle(z)}


class RealHeads(tf.Module):
    """atan2(x0, x1), whose gradient is 0/0 at the origin, beside x0 · x1."""

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
    def __call__(self, x):
        return {"p": tf.math.atan2(x[:, 0], x[:, 1]), "q": x[:, 0] * x[:, 1]}


def _tape_at_zero(path: str, shape, output: str) -> np.ndarray:
    f = tf.saved_model.load(path).signatures["serving_default"]
    x = tf.zeros(shape)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x=x)[output]
    return tape.gradient(y, x).numpy()


def _alone_at_zero(fn, shape) -> np.ndarray:
    x = tf.zeros(shape)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
    return tape.gradient(y, x).numpy()


def _check(tmp_path, name, module, shape, op_type, made_in, reached, alone):
    path = save_module(module, str(tmp_path / name))
    # the truth: both outputs' gradients are non-finite at 0 on the loaded signature, `reached`'s own is finite
    assert not np.all(np.isfinite(_tape_at_zero(path, shape, made_in)))
    assert not np.all(np.isfinite(_tape_at_zero(path, shape, reached)))
    assert np.all(np.isfinite(_alone_at_zero(alone, shape)))
    r = audit_saved_model(path, AuditOptions())
    [f] = [f for f in r.findings if f.code == "GA310"]  # one cause, one finding
    assert f.op is not None and f.op.op_type == op_type
    assert set(f.outputs) == {made_in, reached}
    assert f"made in {made_in}'s backward" in f.message
    assert "could not be located" not in f.message
    assert r.verdict() == "fail"


def test_angle_at_zero_is_named_for_both_outputs(tmp_path):
    _check(tmp_path, "complex_heads", ComplexHeads(), [2, 2], "Angle", "a", "y",
           lambda x: tf.abs(tf.complex(x[:, 0], x[:, 1])))


def test_atan2_at_zero_is_named_for_the_output_it_does_not_compute(tmp_path):
    _check(tmp_path, "real_heads", RealHeads(), [2, 2], "Atan2", "p", "q", lambda x: x[:, 0] * x[:, 1])
