"""The arithmetic of --precision against TensorFlow's own Cast kernel: what flushes to zero, what is subnormal,
what overflows, and the loss scale a dynamic loss scaler settles on."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from gradaudit.numeric.precision_math import classify, limits, settled_loss_scale

DTYPES = {"float16": tf.float16, "bfloat16": tf.bfloat16}


def values() -> np.ndarray:
    rng = np.random.default_rng(7)
    magnitudes = 10.0 ** rng.uniform(-45, 38, 4000)
    edges = [2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * 1.0001, 2.0 ** -14, 65504.0, 65519.0, 65520.0, 1e-40, 3.4e38]
    return np.concatenate([magnitudes * rng.choice([-1, 1], 4000), edges, [0.0]]).astype(np.float32)


@pytest.mark.parametrize("target", sorted(DTYPES))
def test_classes_are_those_of_tensorflows_cast(target):
    v = values()
    cast = np.abs(tf.cast(tf.constant(v), DTYPES[target]).numpy().astype(np.float64))
    nonzero = v != 0
    c = classify(v, target)
    assert c.entries == np.count_nonzero(nonzero)
    assert c.underflow == np.count_nonzero((cast == 0) & nonzero) / c.entries
    assert c.overflow == np.count_nonzero(np.isinf(cast)) / c.entries
    assert c.subnormal == np.count_nonzero((cast > 0) & (cast < limits(target).smallest_normal)) / c.entries


def test_float16_limits():
    lim = limits("float16")
    assert (lim.smallest_subnormal, lim.smallest_normal, lim.largest) == (2.0 ** -24, 2.0 ** -14, 65504.0)


@pytest.mark.parametrize("largest", [3e-9, 0.7, 1.0, 65504.0, 1e5])
def test_the_settled_loss_scale_is_the_largest_power_of_two_tensorflow_keeps_finite(largest):
    s = settled_loss_scale(largest, "float16")
    assert s == 2.0 ** round(np.log2(s))

    def finite(scale):
        return bool(np.isfinite(tf.cast(tf.constant(largest * scale, tf.float32), tf.float16).numpy()))

    assert finite(s) and not finite(2 * s)


def test_no_gradient_no_loss_scale():
    assert settled_loss_scale(None, "float16") is None and settled_loss_scale(0.0, "float16") is None
    assert settled_loss_scale(1e-30, "bfloat16") == 2.0 ** 127  # a float32 value: 2**127 at most
