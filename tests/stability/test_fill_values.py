"""A forward that is not finite at any input because an op overflows on a fill value: the max of an empty segment
(the dtype's lowest value) or a mask's dtype.min, times a weight. The verdict is incomplete; the probes' detail names
the op that first returned a non-finite value and says that what it received is a fill value (tester 21: the reason
said only "NaN or Inf"). The truth: the loaded model's own output is -inf at the inputs given here."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model


class EmptySegments(tf.Module):
    def __init__(self):
        self.w = tf.Variable(tf.random.stateless_normal([5, 2], [1, 2]), name="w")

    @tf.function(input_signature=[tf.TensorSpec([6, 5], tf.float32, name="x")])
    def __call__(self, x):
        m = tf.math.unsorted_segment_max(x, tf.constant([0, 0, 1, 1, 3, 3]), num_segments=5)  # 2 and 4: empty
        return {"y": tf.reduce_sum(m @ self.w)}


class MaskFill(tf.Module):
    def __init__(self):
        self.w = tf.Variable(tf.random.stateless_normal([5, 2], [3, 4]), name="w")

    @tf.function(input_signature=[tf.TensorSpec([6, 5], tf.float32, name="x")])
    def __call__(self, x):
        mask = tf.constant([[True] * 3 + [False] * 2] * 6)
        return {"y": tf.reduce_sum(tf.where(mask, x, tf.float32.min) @ self.w)}


# the float64 copy's empty segment is float64's lowest value, which overflows too (not a float32 hazard: not reported);
# its mask fill stays float32's -3.4e38, which float64 holds (a float32 overflow: reported)
@pytest.mark.parametrize(("module", "reported"), [(EmptySegments, False), (MaskFill, True)])
def test_an_overflow_on_a_fill_value_is_located_and_said(tmp_path, module, reported):
    path = save_module(module(), str(tmp_path / module.__name__))
    fn = tf.saved_model.load(path).signatures["serving_default"]
    for seed in range(3):
        y = fn(x=tf.random.stateless_normal([6, 5], [seed, 9]))["y"].numpy()
        assert not np.isfinite(y)  # the truth: not finite at any input
    r = audit_saved_model(path, AuditOptions())
    assert r.verdict() == "incomplete", [f.message for f in r.findings]
    rows = [s for s in r.stability if s.status == "nonfinite_forward"]
    assert rows and all(s.op_type == "MatMul" and s.reported is reported for s in rows), rows[:2]
    assert all("fill value" in (s.detail or "") for s in rows)


class MaskedMean(tf.Module):
    """The mean over a row's non-padding steps: 0/0 for an all-padding input (inputs × 0), in float64 too."""

    def __init__(self):
        self.w = tf.Variable(tf.random.stateless_normal([4, 2], [5, 6]), name="w")

    @tf.function(input_signature=[tf.TensorSpec([2, 5, 4], tf.float32, name="x")])
    def __call__(self, x):
        mask = tf.cast(tf.reduce_any(tf.not_equal(x, 0.0), -1, keepdims=True), x.dtype)
        mean = tf.reduce_sum(x * mask, 1) / tf.reduce_sum(mask, 1)
        return {"y": tf.reduce_sum(mean @ self.w)}


@pytest.mark.parametrize(("module", "value", "op_type"), [(EmptySegments, "-inf", "MatMul"),
                                                          (MaskedMean, "nan", "RealDiv")])
def test_a_forward_not_finite_in_float64_too_is_said_in_a_note(tmp_path, module, value, op_type):
    """Not reported (not a float32 hazard), but said outside the JSON, with the op it starts at (tester 24)."""
    path = save_module(module(), str(tmp_path / module.__name__))
    fn = tf.saved_model.load(path).signatures["serving_default"]
    assert str(fn(x=tf.zeros([6, 5] if module is EmptySegments else [2, 5, 4]))["y"].numpy()) == value  # the truth
    r = audit_saved_model(path, AuditOptions())
    said = [n for n in r.notes_of("stability") if n.startswith(f"The forward is {value} in the float64 copy too")]
    assert said and f"it starts at {op_type} " in said[0] and "× 0" in said[0], r.notes_of("stability")
