"""A wrong custom gradient beside stateful randomness (noise, dropout) in the serving function: two runs differ,
so the whole-model checks cannot decide (GA202), and the audit was `incomplete` although each op checked on its
own at the values one run gave it decides. Now the local checks run on such a model and the custom gradient
fails; its healthy twin stays undecided (incomplete), never a pass it did not earn. The truth: the tape on the
loaded model against central differences with the random stream reset before every evaluation."""

from __future__ import annotations

import tensorflow as tf
from helpers import save_module, scaled_tanh

from gradaudit.api import AuditOptions, audit_saved_model


class Noisy(tf.Module):
    def __init__(self, scale: float, dropout: bool):
        self.w = tf.Variable(tf.random.stateless_normal([3, 2], seed=[1, 2]), name="w")
        self._f, self._dropout = scaled_tanh(scale), dropout

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")], autograph=False)
    def __call__(self, x):
        h = self._f(x @ self.w)
        if self._dropout:
            return {"y": tf.nn.dropout(h, 0.5)}
        return {"y": h + 0.1 * tf.random.normal(tf.shape(h))}


def _relative_error(path: str) -> float:
    """|tape - differences| / |differences| along one direction, the noise made equal in every evaluation."""
    loaded = tf.saved_model.load(path)
    f = loaded.signatures["serving_default"]
    x = tf.random.stateless_normal([2, 3], seed=[3, 4])
    d = tf.random.stateless_normal([2, 3], seed=[5, 6])
    u = tf.random.stateless_normal([2, 2], seed=[7, 8])

    def value(at):
        tf.random.set_seed(11)
        return float(tf.reduce_sum(f(x=at)["y"] * u))

    tf.random.set_seed(11)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(f(x=x)["y"] * u)
    auto = float(tf.reduce_sum(tape.gradient(y, x) * d))
    h = 1e-2
    numeric = (value(x + h * d) - value(x - h * d)) / (2 * h)
    return abs(auto - numeric) / abs(numeric)


def test_a_wrong_custom_gradient_beside_noise_fails(tmp_path):
    for dropout in (False, True):
        wrong = save_module(Noisy(1.3, dropout), str(tmp_path / f"wrong_{dropout}"))
        assert _relative_error(wrong) > 0.1  # the truth: 30% off
        r = audit_saved_model(wrong, AuditOptions())
        assert any(f.code == "GA201" and f.op is not None and f.op.op_type == "IdentityN" for f in r.findings)
        assert r.verdict() == "fail"


def test_its_healthy_twin_is_not_failed(tmp_path):
    ok = save_module(Noisy(1.0, False), str(tmp_path / "ok"))
    assert _relative_error(ok) < 1e-2
    r = audit_saved_model(ok, AuditOptions())
    assert "GA201" not in {f.code for f in r.findings} and r.verdict() == "incomplete"  # GA202: undecided
