"""A healthy self-attention (plain TensorFlow, no Keras) at the probe points where its softmax saturates (x 100,
x -600): its float32 gradient for the query and key weights is off the exact one (about 0 there), because float32
rounds the saturated softmax's largest entry to 1 - 2**-24 where the exact one is 1 - 1e-81, and TensorFlow's
gradient of a softmax is computed from that output. That is float32's rounding, not a faulty kernel: TensorFlow's
float32 softmax gradient is the same numbers as the formula evaluated in float32 by numpy. So no error, no op
named at fault, and the verdict is pass (the float64 checks pass at every point).

Truth: the tape of the loaded model in float64 (its float64 twin, the same weights) against float64 central
differences, at the synthesised-size point and at x 100; TensorFlow's float32 softmax gradient against numpy's
float32 formula at the logits the model computes at x -600."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.model import Severity

T, D, K = 5, 8, 4


class Attention(tf.Module):
    def __init__(self, dtype=tf.float32, heads: int = 1):
        super().__init__()
        rng = np.random.default_rng(11)
        self.dtype = dtype
        self.wq = tf.Variable(rng.standard_normal((D, heads * K)) * 0.4, dtype=dtype, name="wq")
        self.wk = tf.Variable(rng.standard_normal((D, heads * K)) * 0.4, dtype=dtype, name="wk")
        self.wv = tf.Variable(rng.standard_normal((D, heads * K)) * 0.4, dtype=dtype, name="wv")
        self.wo = tf.Variable(rng.standard_normal((heads * K, 3)) * 0.4, dtype=dtype, name="wo")
        self.heads = heads

    def body(self, x):
        def split(h):
            return tf.transpose(tf.reshape(h, [-1, T, self.heads, K]), [0, 2, 1, 3])

        q, k, v = split(x @ self.wq), split(x @ self.wk), split(x @ self.wv)
        a = tf.nn.softmax(tf.matmul(q, k, transpose_b=True) / K ** 0.5)
        h = tf.reshape(tf.transpose(a @ v, [0, 2, 1, 3]), [-1, T, self.heads * K])
        return tf.reduce_mean(h, axis=1) @ self.wo

    @tf.function(input_signature=[tf.TensorSpec([None, T, D], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": self.body(x)}


def _truth_float64(heads: int, x: np.ndarray) -> float:
    """The worst relative gap between the float64 tape gradient of u·y by every weight and float64 central
    differences along a random direction (healthy: about 1e-9)."""
    twin = Attention(tf.float64, heads)
    u = np.random.default_rng(2).standard_normal((len(x), 3))
    xs = tf.constant(x, tf.float64)
    worst = 0.0
    for w in (twin.wq, twin.wk, twin.wv, twin.wo):
        with tf.GradientTape() as tape:
            phi = tf.reduce_sum(twin.body(xs) * u)
        g = tape.gradient(phi, w).numpy()
        d = np.random.default_rng(3).standard_normal(g.shape)
        base = w.numpy()
        h = 1e-6
        w.assign(base + h * d)
        up = float(tf.reduce_sum(twin.body(xs) * u))
        w.assign(base - h * d)
        down = float(tf.reduce_sum(twin.body(xs) * u))
        w.assign(base)
        numeric, auto = (up - down) / (2 * h), float(np.sum(g * d))
        worst = max(worst, abs(numeric - auto) / max(abs(numeric), 1e-12))
    return worst


def _softmax_kernel_is_the_float32_formula(model: Attention, x: np.ndarray) -> bool:
    """TensorFlow's float32 softmax gradient at the model's own float32 logits equals the formula y (g - sum(g y))
    evaluated in float32 by numpy, to float32's rounding of the largest term."""
    q = tf.reshape(x @ model.wq, [-1, T, model.heads, K])
    k = tf.reshape(x @ model.wk, [-1, T, model.heads, K])
    z = tf.einsum("bthk,bshk->bhts", q, k) / K ** 0.5
    g = tf.constant(np.random.default_rng(4).standard_normal(z.shape).astype(np.float32) * 100)
    with tf.GradientTape() as tape:
        tape.watch(z)
        phi = tf.reduce_sum(tf.nn.softmax(z) * g)
    kernel = tape.gradient(phi, z).numpy()
    y = tf.nn.softmax(z).numpy()
    formula = y * (g.numpy() - np.sum(g.numpy() * y, -1, keepdims=True, dtype=np.float32))
    assert float(np.min(np.sort(z.numpy(), -1)[..., -1] - np.sort(z.numpy(), -1)[..., -2])) > 20  # saturated
    return bool(np.max(np.abs(kernel - formula)) <= 4 * np.finfo(np.float32).eps * np.max(np.abs(g.numpy())))


@pytest.mark.parametrize("heads", [1, 2])
def test_a_saturated_attention_softmax_is_float32_rounding_not_a_faulty_kernel(tmp_path, heads):
    x = np.random.default_rng(5).standard_normal((1, T, D)).astype(np.float32)
    assert _truth_float64(heads, x.astype(np.float64)) < 1e-6  # healthy
    assert _truth_float64(heads, 100 * x.astype(np.float64)) < 1e-6
    model = Attention(tf.float32, heads)
    assert _softmax_kernel_is_the_float32_formula(model, tf.constant(-600 * x / np.max(np.abs(x))))
    path = save_module(model, str(tmp_path / f"attention{heads}"))
    report = audit_saved_model(path, AuditOptions())
    assert report.verdict() == "pass", [(f.code, f.message) for f in report.findings]
    assert not [f for f in report.findings if f.severity is not Severity.INFO], [f.message for f in report.findings]
    assert not [f for f in report.findings if f.code == "GA206" and f.op is not None]
    assert {(n.status, n.dtype) for n in report.numeric if n.dtype == "float64"} == {("pass", "float64")}
    assert not [n for n in report.numeric if n.status == "fail"], report.numeric  # no failed row beside a pass
