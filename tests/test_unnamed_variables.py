"""Two outputs, one reached from x only through tf.stop_gradient, and variables created without a name (each
is 'Variable'): every source is one variable, named by its path where names collide, and a check labelled
with an output differentiates and differences that output alone, at the synthesised point and at the probe
points. A healthy model of this shape once failed: at the probe points the stopped output's change entered
the finite differences of the other, and the two variables' checks were merged under one name."""

from __future__ import annotations

import pytest
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


@pytest.mark.slow  # a model's numeric checks, seconds
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


class TwoUnnamed(tf.Module):
    """Both variables read by the signature, both created without a name (each saved as 'Variable')."""

    def __init__(self):
        self.w = tf.Variable(2.0)
        self.v = tf.Variable(3.0)

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": x * self.w + x * self.v}


class OneUnread(TwoUnnamed):
    """The same two variables; the signature reads only w."""

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": x * self.w}


def _unread_by_tape(path: str) -> set[str]:
    """The trainable variables of the loaded object that get no gradient through the signature, by the tape."""
    loaded = tf.saved_model.load(path)
    x = tf.ones([2, 3])
    unread = set()
    for attr in ("w", "v"):
        with tf.GradientTape() as tape:
            y = loaded.signatures["serving_default"](x=x)["y"]
        if tape.gradient(y, getattr(loaded, attr)) is None:
            unread.add(f"Variable ({attr})")
    return unread


def test_variables_that_share_a_name_are_told_apart_by_their_object(tmp_path):
    """Once, two unnamed variables both read by the signature got a GA108 'read neither by the audited signature
    nor by any other entry point': the signature's sources were named by their paths ('Variable (w)') and the
    object's variables by their shared name ('Variable'), and the names were compared."""
    for module, name in ((TwoUnnamed(), "both"), (OneUnread(), "one")):
        path = save_module(module, str(tmp_path / name))
        truth = _unread_by_tape(path)
        r = audit_saved_model(path, AuditOptions(static_only=True))
        said = {s for f in r.findings if f.code == "GA108" for s in f.sources}
        assert said == truth, (name, said, truth)
        assert {s.name for s in r.sources if s.kind == "variable"} | truth == {"Variable (w)", "Variable (v)"}


def test_keras_exports_second_copy_of_the_weights_is_not_an_unread_variable(tmp_path):
    """Keras 3's model.export saves every weight twice (`variables`, which the signature captures, and again as
    separate variables in `_all_variables`): the copies are not variables the signature leaves untrained, and a
    weight the model really never reads is reported once."""
    import keras

    class WithSpare(keras.layers.Layer):
        def build(self, shape):
            self.kernel = self.add_weight(shape=(shape[-1], 2), name="kernel")
            self.spare = self.add_weight(shape=(2,), name="spare")  # never read by call

        def call(self, x):
            return x @ self.kernel

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, name="dense"), WithSpare(name="odd")])
    path = str(tmp_path / "keras_spare")
    model.export(path, verbose=False)
    loaded = tf.saved_model.load(path)
    x = tf.ones([2, 3])
    with tf.GradientTape() as tape:
        y = loaded.serve(x)
    grads = tape.gradient(y, loaded.trainable_variables)
    unread = [v.name.split(":")[0] for v, g in zip(loaded.trainable_variables, grads) if g is None]
    assert len(unread) == 1 and unread[0].endswith("odd/spare")  # the tape's truth: only the spare weight
    r = audit_saved_model(path, AuditOptions(static_only=True))
    said = [s for f in r.findings if f.code == "GA108" for s in f.sources]
    assert said == unread
    read = {v.name.split(":")[0] for v, g in zip(loaded.trainable_variables, grads) if g is not None}
    assert {s.name for s in r.sources if s.kind == "variable"} == read
