"""A mask made by comparing a source's values (keys of all-zero rows masked as padding) flips exactly at inputs x 0:
every key is masked there and none a step away, so the forward is piecewise at that point and TensorFlow's gradient
there is the masked piece's. That is no gradient error (tester 24: GA201 "seen at one point ... no op on the path has
a kink"): the comparison is a step on the path, as a ReLU is a kink. Truth: the mask's own value at 0 and a step
away, and the model's tape gradient against float64 central differences away from 0, where it is right."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model

W = [np.random.default_rng(k).normal(size=(4, 4)).astype(np.float32) * 0.5 for k in range(3)]


def _mask(x):
    mask = tf.cast(tf.reduce_any(tf.not_equal(x, 0.0), -1), x.dtype)  # [b, t]: rows of zeros are padding
    return tf.concat([tf.ones_like(mask[:, :1]), mask[:, 1:]], 1)  # key 0 always kept


def _attention(x):
    mask = _mask(x)
    q, k, v = (x @ tf.constant(w, x.dtype) for w in W)
    s = tf.einsum("btd,bsd->bts", q, k) / 2.0 + (1.0 - mask[:, None, :]) * -1e9
    return tf.einsum("bts,bsd->btd", tf.nn.softmax(s, -1), v) + x


def _pooled(x):
    mask = _mask(x)
    return tf.reduce_sum(mask[:, :, None] * tf.tanh(x @ tf.constant(W[0], x.dtype)), axis=1)


class Masked(tf.Module):
    def __init__(self, f):
        self.f = f

    @tf.function(input_signature=[tf.TensorSpec([2, 5, 4], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": self.f(x)}


@pytest.mark.parametrize("f", [_attention, _pooled], ids=["attention", "pooled"])
def test_a_mask_that_flips_exactly_at_zero_is_no_gradient_error(tmp_path, f):
    zero = tf.zeros([2, 5, 4], tf.float64)
    step = 1e-6 * tf.random.stateless_normal([2, 5, 4], [1, 2], dtype=tf.float64)
    assert float(tf.reduce_sum(_mask(zero))) == 2.0 and float(tf.reduce_sum(_mask(step))) == 10.0  # it flips
    path = save_module(Masked(f), str(tmp_path / f.__name__))
    fn = tf.saved_model.load(path).signatures["serving_default"]
    x = tf.random.stateless_normal([2, 5, 4], [3, 4])
    u = tf.random.stateless_normal([2, 5, 4] if f is _attention else [2, 4], [5, 6], dtype=tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(x)
        phi = tf.reduce_sum(tf.cast(fn(x=x)["y"], tf.float64) * u)
    d = tf.random.stateless_normal([2, 5, 4], [7, 8], dtype=tf.float64)
    g = float(tf.reduce_sum(tf.cast(tape.gradient(phi, x), tf.float64) * d))
    x64, h = tf.cast(x, tf.float64), 1e-6
    numeric = float(tf.reduce_sum((f(x64 + h * d) - f(x64 - h * d)) * u)) / (2 * h)
    assert abs(g - numeric) <= 1e-3 * abs(numeric)  # right away from 0

    report = audit_saved_model(path, AuditOptions())
    assert report.verdict() == "pass", [(f.code, f.message) for f in report.findings]
    assert not [f for f in report.findings if f.rule == "gradient-mismatch"]
    assert all(r.status != "fail" for r in report.numeric if r.scale == 0.0)
