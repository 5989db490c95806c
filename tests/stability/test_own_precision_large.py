"""GA206 on a large model (a million trainable parameters or more), decided by its local checks: no float64 copy of
the whole model is made, so each op's own float32 gradient is compared with its float64 kernel's at the values the
model gives it. TensorFlow's float32 gradient of digamma is wrong for arguments below -7.5; the truth is the tape
on the loaded model against the same forward rebuilt in float64 from its variables."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from gradaudit.api import AuditOptions, audit_saved_model

WIDTH = 1024  # a 1024 x 1024 dense layer: above stability.local.LARGE_MODEL


class Big(tf.Module):
    def __init__(self, shift: float):
        rng = np.random.default_rng(0)
        self.shift = shift
        self.w1 = tf.Variable(rng.normal(0, 0.1, (16, WIDTH)).astype("float32"), name="w1")
        self.w2 = tf.Variable(rng.normal(0, 0.03, (WIDTH, WIDTH)).astype("float32"), name="w2")
        self.w3 = tf.Variable(rng.normal(0, 0.03, (WIDTH, 2)).astype("float32"), name="w3")

    @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32, name="x")])
    def __call__(self, x):
        h = tf.tanh(tf.tanh(x @ self.w1) @ self.w2)
        return {"y": tf.math.digamma(self.shift + 0.4 * h) @ self.w3}


def _forward64(loaded, shift: float, x):
    w = [tf.constant(v.numpy().astype(np.float64)) for v in (loaded.w1, loaded.w2, loaded.w3)]
    h = tf.tanh(tf.tanh(x @ w[0]) @ w[1])
    return tf.math.digamma(shift + 0.4 * h) @ w[2]


def _float32_off(path: str, shift: float) -> float:
    loaded = tf.saved_model.load(path)
    x = np.random.default_rng(1).uniform(-1, 1, (2, 16))
    u = np.random.default_rng(2).normal(size=(2, 2))
    xt = tf.constant(x, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        phi = tf.reduce_sum(loaded.signatures["serving_default"](x=xt)["y"] * u.astype("float32"))
    g32 = tape.gradient(phi, xt).numpy().astype(np.float64)
    x64 = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x64)
        phi64 = tf.reduce_sum(_forward64(loaded, shift, x64) * u)
    g64 = tape.gradient(phi64, x64).numpy()
    return float(np.linalg.norm(g32 - g64) / np.linalg.norm(g64))


@pytest.mark.slow
@pytest.mark.parametrize(("shift", "broken"), [(-12.3, True), (10.0, False)])
def test_a_large_models_float32_digamma_is_found_op_by_op(tmp_path, monkeypatch, shift, broken):
    path = str(tmp_path / "big")
    m = Big(shift)
    tf.saved_model.save(m, path, signatures={"serving_default": m.__call__})
    off = _float32_off(path, shift)
    assert (off > 0.1) if broken else (off < 1e-4), off  # the truth, at ordinary inputs
    import gradaudit.numeric.runner as runner

    loaded = []
    real = runner.load
    monkeypatch.setattr(runner, "load", lambda info, tags, float64, **kw: loaded.append(float64)
                        or real(info, tags, float64, **kw))
    report = audit_saved_model(path, AuditOptions())
    assert loaded == [False]  # the model as saved; no float64 copy of it
    found = [f for f in report.findings if f.code == "GA206"]
    if broken:
        assert report.verdict() == "fail" and found and found[0].op.op_type == "Digamma", \
            [f.message for f in report.findings]
    else:
        assert not found and report.verdict() == "pass", [f.message for f in report.findings]
