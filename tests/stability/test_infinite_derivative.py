"""A gradient that is infinite or NaN in float64 too, at a finite forward, is no float32 overflow of a large true
value: the derivative is infinite (a square root at 0) or does not exist (the angle of 0 + 0j). Such a probe point
is an unstable gradient that names its op, for every source it reaches, never "an overflow of the value itself".
A model whose synthesised N(0, 1) inputs are outside its domain (a square root) is probed from their absolute
values, as the numeric checks are, so that its ladder observes something. Truth: TensorFlow's tape on the loaded
model in float32 and in float64 at the point."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model

from .conftest import finding, stability


class RootSum(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.reduce_sum(tf.sqrt(x), axis=-1)}


class PowerHalf(tf.Module):  # the same derivative through another op: Pow's gradient x ** -0.5 / 2
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.reduce_sum(tf.pow(x, 0.5), axis=-1)}


class Angle(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="a"),
                                  tf.TensorSpec([None], tf.float32, name="b")])
    def __call__(self, a, b):
        return {"theta": tf.math.angle(tf.complex(a, b))}


class ShiftedRoot(tf.Module):  # healthy: the argument of the square root is at least 1
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.reduce_sum(tf.sqrt(x * x + 1.0), axis=-1)}


@pytest.mark.parametrize("module,op_type,f64", [(RootSum, "Sqrt", tf.sqrt),
                                                (PowerHalf, "Pow", lambda x: tf.pow(x, 0.5))])
def test_a_root_at_zero_is_an_unstable_gradient_named_by_its_op(tmp_path, module, op_type, f64):
    path = save_module(module(), str(tmp_path / module.__name__))
    loaded = tf.saved_model.load(path).signatures["serving_default"]
    x = tf.zeros([2, 3])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = loaded(x=x)["y"]
    assert np.all(np.isfinite(y.numpy())) and not np.any(np.isfinite(tape.gradient(y, x).numpy()))
    x64 = tf.zeros([2, 3], tf.float64)  # and in float64: infinite, not a large finite value
    with tf.GradientTape() as tape:
        tape.watch(x64)
        y64 = tf.reduce_sum(f64(x64), axis=-1)
    assert np.all(np.isinf(tape.gradient(y64, x64).numpy()))

    r = audit_saved_model(path, AuditOptions(timeout=None))
    f = finding(r, "unstable-gradient")
    assert f.severity.value == "error" and f.op is not None and f.op.op_type == op_type
    zero = stability(r, "x", "y", 0.0)
    assert zero.status == "nonfinite_gradient" and zero.reported and "overflow" not in zero.detail
    # The probes started from the absolute values: the positive rungs were observed finite.
    assert any("Stability probes scale the absolute values" in n.text for n in r.notes)
    assert r.verdict() == "fail"


def test_the_angle_at_the_origin_is_named_for_both_sources(tmp_path):
    path = save_module(Angle(), str(tmp_path / "angle"))
    loaded = tf.saved_model.load(path).signatures["serving_default"]
    a, b = tf.zeros([2]), tf.zeros([2])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([a, b])
        theta = loaded(a=a, b=b)["theta"]
    assert np.all(np.isfinite(theta.numpy()))
    assert not np.any(np.isfinite(tape.gradient(theta, a).numpy()))
    assert not np.any(np.isfinite(tape.gradient(theta, b).numpy()))

    r = audit_saved_model(path, AuditOptions(timeout=None))
    f = finding(r, "unstable-gradient")
    assert set(f.sources) == {"a", "b"} and f.op is not None and f.op.op_type == "Angle"
    for source in ("a", "b"):
        row = stability(r, source, "theta", 0.0)
        assert row.reported and row.op_type == "Angle" and "overflow" not in row.detail


def test_a_root_kept_away_from_zero_probes_clean(tmp_path):
    r = audit_saved_model(save_module(ShiftedRoot(), str(tmp_path / "shifted")), AuditOptions(timeout=None))
    assert r.verdict() == "pass"
    assert not [f for f in r.findings if f.rule == "unstable-gradient"]
    assert not any("absolute values" in n.text for n in r.notes)  # its synthesised point was inside the domain


class ComplexExp(tf.Module):  # healthy in float64; float32's complex Exp overflows to inf+infj at x 300
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="a"),
                                  tf.TensorSpec([None], tf.float32, name="b")])
    def __call__(self, a, b):
        z = tf.complex(a, b)
        return {"y": tf.math.real(tf.exp(0.3 * z) * tf.math.conj(z))}


class ComplexPower(tf.Module):  # the same through complex multiplications: z ** 16 by squaring
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="a"),
                                  tf.TensorSpec([None], tf.float32, name="b")])
    def __call__(self, a, b):
        z = tf.complex(a, b)
        for _ in range(4):
            z = z * z
        return {"y": tf.math.real(z)}


@pytest.mark.parametrize("module,op_type", [(ComplexExp, "Exp"), (ComplexPower, "Mul")])
def test_a_complex_intermediate_that_overflows_is_located(tmp_path, module, op_type):
    """The first non-finite value is complex (inf+infj): the forensics look at complex tensors too, so the
    finding names the op, not "could not be located"."""
    path = save_module(module(), str(tmp_path / module.__name__))
    loaded = tf.saved_model.load(path).signatures["serving_default"]
    big = tf.fill([2], 300.0)
    assert not np.all(np.isfinite(loaded(a=big, b=-big)["y"].numpy()))  # truth: float32 overflows at x 300
    r = audit_saved_model(path, AuditOptions(timeout=None))
    f = finding(r, "nonfinite-forward")
    assert f.op is not None and f.op.op_type == op_type, f.message
    assert "could not be located" not in f.message
