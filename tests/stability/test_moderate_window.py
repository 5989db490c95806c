"""A hand-written gradient wrong only for moderate inputs (2 < x < 5, or 5 < x < 12): the synthesised point (|x| of
about 1) and the large probe points (x 100, x -600) all miss it; the probe point x -10 is checked too. The truth is
the tape on the loaded model at such an input against float64 central differences of softplus."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model

W = [1.0, -0.5, 0.25, 2.0]


def _window_softplus(lo: float, hi: float, factor: float):
    @tf.custom_gradient
    def softplus(x):
        def grad(dy):
            return dy * tf.sigmoid(x) * tf.where((x > lo) & (x < hi), factor, 1.0)

        return tf.nn.softplus(x), grad

    return softplus


class Windowed(tf.Module):
    def __init__(self, lo: float, hi: float, factor: float):
        self.f = _window_softplus(lo, hi, factor)

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": self.f(x) * tf.constant(W)}


def _off_at(path: str, value: float) -> float:
    loaded = tf.saved_model.load(path)
    x = tf.constant([[value] * 4], tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(loaded.signatures["serving_default"](x=x)["y"])
    g = tape.gradient(y, x).numpy()[0].astype(np.float64)
    h = 1e-6
    true = (np.logaddexp(0, value + h) - np.logaddexp(0, value - h)) / (2 * h) * np.array(W)
    return float(np.max(np.abs(g - true) / np.abs(true)))


@pytest.mark.parametrize(("lo", "hi", "factor", "broken"), [(2.0, 5.0, 1.5, True), (5.0, 12.0, 1.5, True),
                                                             (2.0, 5.0, 1.0, False)])
def test_a_gradient_wrong_for_moderate_inputs_fails(tmp_path, lo, hi, factor, broken):
    path = save_module(Windowed(lo, hi, factor), str(tmp_path / "window"))
    off = _off_at(path, (lo + hi) / 2)
    assert (off > 0.3) if broken else (off < 1e-5), off  # the truth
    for seed in (0, 1):
        r = audit_saved_model(path, AuditOptions(seed=seed))
        found = [f for f in r.findings if f.code == "GA201"]
        if broken:
            assert r.verdict() == "fail" and found, (seed, [f.message for f in r.findings])
        else:
            assert r.verdict() == "pass" and not found, (seed, [f.message for f in r.findings])
