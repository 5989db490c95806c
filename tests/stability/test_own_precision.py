"""The gradient a float32 model trains with, against the exact one (GA206). The float64 checks pass on these
models, since in exact arithmetic their gradients are right, while the float32 gradient is far off: TensorFlow's
float32 Polygamma kernel (digamma's gradient) for x < -7.5, and a LayerNormalization after a huge rescaling, whose
float32 backward underflows. The truth is the tape on the loaded model in float32 against float64 central
differences of the same function; the healthy twins (the same ops where float32 is accurate) pass, and a gradient
that is exactly zero by an invariance (a shift before a normalisation), whose float32 value is rounding noise, is
not reported."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model


class Digamma(tf.Module):
    def __init__(self, scale: float):
        self.scale = scale
        self.w = tf.Variable([[0.5], [-0.3], [0.8], [0.2]], name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.matmul(tf.math.digamma(self.scale * x), self.w)}


class Softplus(tf.Module):
    """digamma where float32 is accurate: its argument stays above 1."""

    def __init__(self):
        self.w = tf.Variable([[0.5], [-0.3], [0.8], [0.2]], name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.matmul(tf.math.digamma(1.0 + tf.nn.softplus(x)), self.w)}


class ShiftedNorm(tf.Module):
    """y = layer_norm(x + b) · w: b's true gradient is exactly zero (a shift of every feature), its float32
    gradient is rounding noise."""

    def __init__(self):
        self.b = tf.Variable(0.3, name="b")
        self.w = tf.Variable(tf.random.stateless_normal([6, 2], seed=[1, 2]), name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 6], tf.float32, name="x")])
    def __call__(self, x):
        h = x + self.b
        mean, var = tf.nn.moments(h, axes=[-1], keepdims=True)
        return {"y": ((h - mean) * tf.math.rsqrt(var + 1e-3)) @ self.w}


def _keras_norm(path: str, scale: float):
    """The Keras model exported to `path`, and its float64 twin with the same weights (the truth's function)."""
    def build(dtype):
        inp = keras.Input((8,), name="x", dtype=dtype)
        h = keras.layers.Rescaling(scale, dtype=dtype)(inp)
        h = keras.layers.LayerNormalization(dtype=dtype)(h)
        return keras.Model(inp, keras.layers.Dense(1, dtype=dtype)(h))

    keras.utils.set_random_seed(3)
    model, twin = build("float32"), build("float64")
    twin.set_weights([w.astype(np.float64) for w in model.get_weights()])
    model.export(path, verbose=False)
    return path, twin


def _float32_off(path: str, fn64, x: np.ndarray) -> float:
    """The truth: the float32 tape gradient of sum(f) on the loaded model at x against float64 central
    differences of the same function (`fn64`, written in float64), relative to their norm."""
    loaded = tf.saved_model.load(path)  # kept: the signature refers to its variables
    f = loaded.signatures["serving_default"]
    xt = tf.constant(x, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = sum(tf.reduce_sum(v) for v in f(xt).values())
    g = tape.gradient(y, xt).numpy().astype(np.float64)
    numeric = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        h = 1e-6 * max(abs(x[i]), 1.0)
        e = np.zeros_like(x)
        e[i] = h
        ends = [float(tf.reduce_sum(fn64(tf.constant(x + sign * e)))) for sign in (1, -1)]
        numeric[i] = (ends[0] - ends[1]) / (2 * h)
    return float(np.linalg.norm(g - numeric) / np.linalg.norm(numeric))


W = np.array([[0.5], [-0.3], [0.8], [0.2]])


def _gaps(report):
    return [f for f in report.findings if f.code == "GA206"]


def test_digamma_float32_kernel_is_caught_and_its_twin_passes(tmp_path):
    bad = save_module(Digamma(2.0), str(tmp_path / "digamma"))
    # at x = -20.5 (inputs of -10.25) TensorFlow's float32 gradient of digamma is -0.0476, the truth 9.82
    x = np.array([[-10.25, -4.1, 3.3, -8.7]])  # digamma at -20.5, -8.2: float32's gradient -0.0476 for 9.82
    assert _float32_off(bad, lambda v: tf.math.digamma(2.0 * v) @ W, x) > 0.5
    r = audit_saved_model(bad, AuditOptions())
    found = _gaps(r)
    assert found and "x" in found[0].sources and r.verdict() == "fail", [f.message for f in r.findings]
    assert "float64 finite differences give" in found[0].message
    assert found[0].op is not None and found[0].op.op_type == "Digamma"  # its float32 kernel, checked on its own
    rows = [n for n in r.numeric if n.dtype == "float32" and n.status == "fail"]
    assert rows and rows[0].evidence and rows[0].rel_error > 0.5
    good = save_module(Softplus(), str(tmp_path / "softplus"))
    assert _float32_off(good, lambda v: tf.math.digamma(1.0 + tf.nn.softplus(v)) @ W, x) < 1e-4
    r = audit_saved_model(good, AuditOptions())
    assert not _gaps(r) and r.verdict() == "pass", [f.message for f in r.findings]
    assert any("float32 gradients agree with the float64 copy's" in n for n in (note.text for note in r.notes))


def test_layer_norm_after_a_huge_scale_is_caught_and_its_twin_passes(tmp_path):
    bad, fn64 = _keras_norm(str(tmp_path / "huge"), 1e17)
    x = np.linspace(-1, 1, 8).reshape(1, 8) * 100
    assert _float32_off(bad, fn64, x) > 0.1
    r = audit_saved_model(bad, AuditOptions())
    assert _gaps(r) and r.verdict() == "fail", [f.message for f in r.findings]
    # at × 100 the normalisation's Rsqrt gets a variance near 1e38: its float32 gradient underflows to 0
    assert any(f.op is not None and f.op.op_type == "Rsqrt" for f in _gaps(r)), [f.message for f in _gaps(r)]
    good, fn64 = _keras_norm(str(tmp_path / "plain"), 1.0)
    assert _float32_off(good, fn64, x) < 1e-4
    r = audit_saved_model(good, AuditOptions())
    assert not _gaps(r) and r.verdict() == "pass", [f.message for f in r.findings]


def test_a_gradient_zero_by_invariance_is_not_reported(tmp_path):
    path = save_module(ShiftedNorm(), str(tmp_path / "shift"))
    f = tf.saved_model.load(path)
    x = tf.random.stateless_normal([2, 6], seed=[3, 4])
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(f(x)["y"] * tf.constant([[1.0, -2.0]]))
    gb = tape.gradient(y, f.b).numpy()
    assert np.max(np.abs(gb)) < 1e-5  # the truth: zero, up to float32 rounding
    r = audit_saved_model(path, AuditOptions())
    assert not _gaps(r) and r.verdict() == "pass", [f.message for f in r.findings]


class SaturatedMLP(tf.Module):
    """sigmoid(tanh(x w1) w2): at the probe point × 100 the tanh saturates, its float32 gradient is 0 where the true
    one is about 1e-9, too small to move the float32 output at all."""

    def __init__(self):
        self.w1 = tf.Variable(tf.random.stateless_normal([4, 8], seed=[5, 6]), name="w1")
        self.w2 = tf.Variable(tf.random.stateless_normal([8, 1], seed=[7, 8]), name="w2")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.sigmoid(tf.tanh(x @ self.w1) @ self.w2)}


def test_a_saturated_tanh_is_not_reported(tmp_path):
    path = save_module(SaturatedMLP(), str(tmp_path / "tanh"))
    m = SaturatedMLP()

    def fn64(v):
        return tf.sigmoid(tf.tanh(v @ tf.cast(m.w1, tf.float64)) @ tf.cast(m.w2, tf.float64))

    x = np.array([[0.3, -0.7, 0.5, 0.9]]) * 100
    loaded = tf.saved_model.load(path)
    y = float(loaded(tf.constant(x, tf.float32))["y"][0, 0])
    e = np.eye(4) * 1e-3
    g64 = np.array([(float(fn64(tf.constant(x + e[i]))[0, 0]) - float(fn64(tf.constant(x - e[i]))[0, 0])) / 2e-3
                    for i in range(4)])
    # the truth: moving x by its whole magnitude changes y by less than one float32 rounding unit of it
    assert np.linalg.norm(g64) * np.linalg.norm(x) < np.finfo(np.float32).eps * abs(y)
    r = audit_saved_model(path, AuditOptions())
    assert not _gaps(r) and r.verdict() == "pass", ([f.message for f in r.findings], r.incomplete)


class StatelessNoise(tf.Module):
    """A reparameterised sample and a stateless dropout, seeded: the same function at every call, but its float64 copy
    draws other numbers (another function), so its float32 gradient is not compared with that copy's."""

    def __init__(self):
        self.w = tf.Variable(tf.random.stateless_normal([4, 3], seed=[1, 1]), name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        h = x @ self.w
        z = h + tf.exp(0.5 * tf.tanh(h)) * tf.random.stateless_normal(tf.shape(h), seed=[1, 2], dtype=h.dtype)
        return {"y": tf.nn.experimental.stateless_dropout(tf.tanh(z), 0.3, seed=[3, 4])}


def test_stateless_draws_are_not_compared_with_the_float64_copy(tmp_path):
    path = save_module(StatelessNoise(), str(tmp_path / "noise"))
    loaded = tf.saved_model.load(path)
    f = loaded.signatures["serving_default"]
    x = np.array([[0.3, -0.5, 0.8, 0.1]], np.float32)
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = tf.reduce_sum(f(xt)["y"])
    g = tape.gradient(y, xt).numpy()
    h = 1e-2

    def total(v):
        return float(tf.reduce_sum(f(tf.constant(v))["y"]))

    numeric = [(total(x + h * e) - total(x - h * e)) / (2 * h) for e in np.eye(4, dtype=np.float32)]
    assert np.allclose(g[0], numeric, rtol=1e-2, atol=1e-3)  # the truth: healthy, the same draws at every call
    r = audit_saved_model(path, AuditOptions())
    assert not _gaps(r) and r.verdict() == "pass", [f.message for f in r.findings]


class Cancelling(tf.Module):
    """((s + 1)^2 - s^2) * 1e-6 with s = 1e6 x W: exactly 2 W 1e-6 s + 1e-6, a gradient of order one that float32 can
    hold, but the difference of two values near 1e12 leaves float32 a few percent of it (tester 8's chain_cancel)."""

    def __init__(self):
        self.w = tf.Variable(tf.random.stateless_normal([4, 4], seed=[9, 9]), name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        s = 1e6 * (x @ self.w)
        return {"y": (tf.square(s + 1.0) - tf.square(s)) * 1e-6}


class OffsetDigamma(Digamma):
    """The digamma model plus 1e9 on its output: the gradient is the same, the output's rounding is not (tester 8's
    polygamma_offset hid the wrong gradient behind it)."""

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.matmul(tf.math.digamma(self.scale * x), self.w) + 1e9}


def test_float32_rounding_that_cancels_is_a_warning(tmp_path):
    path = save_module(Cancelling(), str(tmp_path / "cancel"))
    m = Cancelling()
    x = np.array([[0.3, -0.7, 0.5, 0.9]])
    w = m.w.numpy().astype(np.float64)
    # the truth: exactly 2 s 1e-6 + 1e-6 with s = 1e6 x w, so d/dx of the sum is 2e6 * w summed, times 1e-6 * 1e6
    assert _float32_off(path, lambda v: (tf.square(1e6 * (v @ w) + 1.0) - tf.square(1e6 * (v @ w))) * 1e-6, x) > 1e-2
    r = audit_saved_model(path, AuditOptions())
    found = [f for f in _gaps(r) if f.severity.value in ("warning", "info") and "cancellation" in f.message]
    assert found, [f.message for f in r.findings]
    assert not [f for f in _gaps(r) if f.severity.value == "error"]  # no op is at fault: not an error


def test_an_offset_on_the_output_does_not_hide_a_wrong_float32_gradient(tmp_path):
    path = save_module(OffsetDigamma(2.0), str(tmp_path / "offset"))
    x = np.array([[-10.25, -4.1, 3.3, -8.7]])
    assert _float32_off(path, lambda v: tf.math.digamma(2.0 * v) @ W + 1e9, x) > 0.5
    r = audit_saved_model(path, AuditOptions())
    found = [f for f in _gaps(r) if f.severity.value == "error"]
    assert found and found[0].op is not None and found[0].op.op_type == "Digamma", [f.message for f in r.findings]


class DigammaBesideLgamma(tf.Module):
    """Two outputs of one argument: digamma's float32 gradient (TensorFlow's Polygamma kernel) is off below -7.5;
    lgamma's (TensorFlow's Digamma kernel) is not."""

    def __init__(self):
        self.a = tf.Variable(2.0, name="a")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        z = self.a * x
        return {"lgamma": tf.matmul(tf.math.lgamma(z), W.astype(np.float32)),
                "digamma": tf.matmul(tf.math.digamma(z), W.astype(np.float32))}


def test_a_float32_kernel_at_fault_is_said_of_the_outputs_its_paths_reach(tmp_path):
    """Tester 19: GA206 naming digamma's kernel listed lgamma as well."""
    path = save_module(DigammaBesideLgamma(), str(tmp_path / "two"))
    x = np.array([[-10.25, -4.1, 3.3, -8.7]])
    loaded = tf.saved_model.load(path)
    assert _float32_off(path, lambda v: tf.math.digamma(2.0 * v) @ W, x) > 0.5  # the sum's gradient: digamma's off

    def lgamma_off() -> float:  # lgamma's own float32 gradient against float64 differences, alone
        xt = tf.constant(x, tf.float32)
        with tf.GradientTape() as tape:
            tape.watch(xt)
            y = tf.reduce_sum(loaded.signatures["serving_default"](xt)["lgamma"])
        g = tape.gradient(y, xt).numpy().astype(np.float64)
        h = 1e-6
        numeric = [(float(tf.reduce_sum(tf.math.lgamma(2.0 * (x + h * e)) @ W))
                    - float(tf.reduce_sum(tf.math.lgamma(2.0 * (x - h * e)) @ W))) / (2 * h)
                   for e in np.eye(4).reshape(4, 1, 4)]
        return float(np.linalg.norm(g.ravel() - numeric) / np.linalg.norm(numeric))

    assert lgamma_off() < 1e-4
    r = audit_saved_model(path, AuditOptions())
    named = [f for f in _gaps(r) if f.op is not None and f.op.op_type == "Digamma"]
    assert named and r.verdict() == "fail", [f.message for f in r.findings]
    assert all(f.outputs == ("digamma",) for f in named), [(f.outputs, f.message) for f in named]


class EighVectors(tf.Module):
    """y = sum(v * w) + sum(e^2) over eigh(x + x^T): the eigenvectors are defined only up to their signs (and a basis
    where eigenvalues nearly meet), and float32 and float64 eigh pick different ones (tester 21)."""

    def __init__(self):
        self.w = tf.Variable(tf.random.stateless_normal([4, 4], [1, 2]), name="w")

    @tf.function(input_signature=[tf.TensorSpec([4, 4], tf.float32, name="x")])
    def __call__(self, x):
        e, v = tf.linalg.eigh(x + tf.transpose(x))
        return {"y": tf.reduce_sum(v * self.w) + tf.reduce_sum(e * e)}


def test_an_op_whose_float32_outputs_are_another_result_is_not_blamed(tmp_path):
    # the truth: where two eigenvalues nearly meet, float32's eigenvectors are not float64's (another valid basis)
    s = np.diag([1.0, 1.0 + 1e-6, 2.0, 3.0])
    q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(4, 4)))
    a = q @ s @ q.T
    _, v32 = tf.linalg.eigh(tf.constant(a, tf.float32))
    _, v64 = tf.linalg.eigh(tf.constant(a, tf.float64))
    assert np.linalg.norm(v32.numpy() - v64.numpy()) / np.linalg.norm(v64.numpy()) > 1e-2
    r = audit_saved_model(save_module(EighVectors(), str(tmp_path / "eigh")), AuditOptions())
    # the op's two gradients are of different results: no error names it, the gap is information with that evidence
    assert r.verdict() == "pass", [f.message for f in r.findings]
    assert all(f.severity.value == "info" for f in _gaps(r)), [f.message for f in _gaps(r)]
    assert all("not compared" in f.message for f in _gaps(r) if "SelfAdjointEigV2" in f.message)
    rows = [n for n in r.numeric if n.dtype == "float32" and "SelfAdjointEigV2" in (n.reason or "")]
    assert all(n.status == "pass" and n.reason.startswith("the float32 and float64 gradients are of different results")
               for n in rows), rows
