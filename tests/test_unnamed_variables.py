"""Two outputs, one reached from x only through tf.stop_gradient, and variables created without a name (each
is 'Variable'): every source is one variable, named by its path where names collide, and a check labelled
with an output differentiates and differences that output alone, at the synthesised point and at the probe
points. A healthy model of this shape once failed: at the probe points the stopped output's change entered
the finite differences of the other, and the two variables' checks were merged under one name."""

from __future__ import annotations

import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model


class TwoHeads(tf.Module):
    def __init__(self):
        self.w1 = tf.Variable(tf.random.stateless_normal([4, 3], seed=[1, 2]))
        self.w2 = tf.Variable(tf.random.stateless_normal([4, 2], seed=[3, 4]))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        return {"a": tf.stop_gradient(x) @ self.w1, "b": x @ self.w2}


def _tape(path: str) -> dict[tuple[str, str], bool]:
    """Which (source, output) pairs carry a gradient on the loaded model, by tf.GradientTape."""
    loaded = tf.saved_model.load(path)
    x = tf.random.stateless_normal([2, 4], seed=[5, 6])
    sources = {"x": x, "Variable (w1)": loaded.w1, "Variable (w2)": loaded.w2}
    truth = {}
    for out in ("a", "b"):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = loaded.signatures["serving_default"](x=x)[out]
        grads = tape.gradient(y, list(sources.values()))
        for name, g in zip(sources, grads):
            truth[name, out] = g is not None and bool(tf.reduce_any(g != 0))
    return truth


def test_stopped_head_and_unnamed_variables(tmp_path):
    path = save_module(TwoHeads(), str(tmp_path / "two_heads"))
    r = audit_saved_model(path, AuditOptions())
    assert {s.name for s in r.sources} == {"x", "Variable (w1)", "Variable (w2)"}
    truth = _tape(path)
    flow = {(f.source, f.output): f.status for f in r.flow}
    for pair, carries in truth.items():
        assert (flow[pair] == "connected") == carries, (pair, flow[pair])
    checked = {(n.source, n.outputs.names, n.scale): n.status for n in r.numeric}
    assert checked[("Variable (w1)", ("a",), None)] == "pass" and checked[("Variable (w2)", ("b",), None)] == "pass"
    assert checked[("x", ("b",), 100.0)] == "pass" and checked[("x", ("b",), -600.0)] == "pass"
    assert "gradient-mismatch" not in {f.rule for f in r.findings} and r.verdict() == "pass"
