"""The float32-against-float64 summary claims agreement only at points where it compared finite gradients (tester
13's m07: 'agree ... at 1 point(s): within 0%' on a model whose gradient is NaN at every input)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model


class PairwiseDistance(tf.Module):  # tf.norm(e_i - e_j): the diagonal is 0 at every input, sqrt's gradient there NaN
    def __init__(self):
        self.p = tf.Variable(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32) * 0.5, name="p")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        e = x @ self.p
        return {"score": tf.reduce_mean(tf.exp(-tf.norm(e[:, None, :] - e[None, :, :], axis=-1)), axis=1)}


def test_no_agreement_is_claimed_where_no_gradient_is_finite(tmp_path):
    path = save_module(PairwiseDistance(), str(tmp_path / "pd"))
    loaded = tf.saved_model.load(path)  # kept alive while its function runs
    fn = loaded.signatures["serving_default"]
    x = tf.constant(np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(fn(x=x)["score"])
    assert np.isnan(tape.gradient(y, x).numpy()).all()  # the truth: NaN everywhere, at any input
    report = audit_saved_model(path, AuditOptions())
    assert report.verdict() == "fail"
    notes = [n.text for n in report.notes]
    assert not [n for n in notes if "gradients agree with the float64 copy's" in n], notes
    assert [n for n in notes if "were not compared at" in n], notes
