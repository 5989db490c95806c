"""GA104 on an op that computes an integer from a float value other than a cast (Bucketize, tf.searchsorted's
LowerBound): the cut is true (the value selects a bucket; its derivative is zero almost everywhere), and the fix says
so and how to mark it intended, not to round in float instead of a cast to int (tester 23). The truth: TensorFlow's
tape on the loaded model gives x no gradient, and central differences away from the boundaries are zero."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import audit

BOUNDARIES = [-1.0, 0.0, 1.0]
INDEX = {
    "Bucketize": lambda x: tf.raw_ops.Bucketize(input=x, boundaries=BOUNDARIES),
    "LowerBound": lambda x: tf.searchsorted(tf.constant([BOUNDARIES] * 2), x, side="left", out_type=tf.int32),
}


class Lookup(tf.Module):
    def __init__(self, index):
        self.index = index
        self.table = tf.Variable(tf.random.stateless_normal([4, 3], [1, 2]), name="table")

    @tf.function(input_signature=[tf.TensorSpec([2, 5], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.reduce_sum(tf.gather(self.table, self.index(x)), axis=1)}


@pytest.mark.parametrize("op_type", sorted(INDEX))
def test_an_index_from_a_float_is_cut_with_advice_that_fits(tmp_path, op_type):
    path = save_module(Lookup(INDEX[op_type]), str(tmp_path / op_type))
    loaded = tf.saved_model.load(path)
    x = tf.constant(np.array([[-1.7, -0.4, 0.3, 0.6, 1.4], [-0.2, 0.8, -1.3, 2.2, 0.45]], np.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = loaded.signatures["serving_default"](x=x)["y"]
    assert tape.gradient(y, x) is None  # TensorFlow's own: no gradient to x
    fn = loaded.signatures["serving_default"]
    moved = float(tf.reduce_sum(fn(x=x + 1e-3)["y"] - fn(x=x - 1e-3)["y"]))
    assert moved == 0.0  # the true derivative away from the boundaries

    r = audit(path, static_only=True)
    (cut,) = [f for f in r.findings if f.code == "GA104"]
    assert cut.op is not None and cut.op.op_type == op_type and cut.sources == ("x",) and r.verdict() == "fail"
    assert "piecewise constant" in cut.fix and "soft surrogate" in cut.fix and "cast to int" not in cut.fix
    glob = cut.fix.split("--ignore-ops '")[1].split("'")[0]
    kept = audit(path, static_only=True, ignore_ops=[glob])  # the advice works as written
    assert [f.suppressed is not None for f in kept.findings if f.code == "GA104"] == [True]
    assert kept.verdict() == "pass"
