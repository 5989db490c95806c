"""The float64 copy: same function, same custom gradients, in float64; and when it cannot be made."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from gradaudit.numeric.runner import load
from gradaudit.numeric.savedmodel import read_saved_model
from gradaudit.numeric.upcast import float64_blockers


def test_float64_copy_computes_the_same_function_and_custom_gradient(models):
    info = read_saved_model(models("mlp"), (), "serving_default")
    assert float64_blockers(info) == []
    native, copy = load(info, (), False), load(info, (), True)
    try:
        x = np.random.default_rng(0).standard_normal((2, 4))
        x32, x64 = tf.constant(x, tf.float32), tf.constant(x.astype(np.float32), tf.float64)
        with tf.GradientTape() as t32, tf.GradientTape() as t64:
            t32.watch(x32)
            t64.watch(x64)
            y32, y64 = native.fn(x=x32)["y"], copy.fn(x=x64)["y"]
        assert y64.dtype == tf.float64
        np.testing.assert_allclose(y64.numpy(), y32.numpy(), rtol=1e-5, atol=1e-6)
        # The saved custom gradient (seed 001's log1pexp) runs in float64 too.
        g32, g64 = t32.gradient(y32, x32), t64.gradient(y64, x64)
        assert g64.dtype == tf.float64
        np.testing.assert_allclose(g64.numpy(), g32.numpy(), rtol=1e-4, atol=1e-6)
    finally:
        native.close()
        copy.close()


def test_blockers_name_the_op(models):
    assert float64_blockers(read_saved_model(models("fused"), (), "serving_default")) == [
        "FusedBatchNormV3 has no float64 version"]
    assert float64_blockers(read_saved_model(models("fake_quant"), (), "serving_default")) == [
        "FakeQuantWithMinMaxArgs only accepts float32"]
