"""A trainable variable whose value reaches the outputs only through tf.stop_gradient never trains through the
signature: GA108 (a warning) names it and the StopGradient, beside the cut's own GA106 info. The truth is the tape
on the loaded model: no gradient for that variable, a gradient for the others."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model

X = tf.TensorSpec([None, 4], tf.float32, name="x")


class Stopped(tf.Module):
    """An encoder frozen by stop_gradient (`stop_enc`), or a target network's Q-values (`target`), or a
    variable with a stopped path and a live one (`also_live`: it trains)."""

    def __init__(self, kind: str):
        rng = np.random.default_rng(4)
        self.kind = kind
        self.enc = tf.Variable(rng.standard_normal((4, 4)).astype("float32"), name="enc")
        self.head = tf.Variable(rng.standard_normal((4, 1)).astype("float32"), name="head")

    @tf.function(input_signature=[X])
    def __call__(self, x):
        if self.kind == "stop_enc":
            h = tf.stop_gradient(tf.tanh(tf.matmul(x, self.enc)))
            return {"y": tf.matmul(h, self.head)}
        if self.kind == "target":  # TD error: the target network's values are held constant
            q = tf.matmul(x, self.head)
            target = tf.reduce_max(tf.matmul(x, self.enc), -1, keepdims=True)
            return {"y": tf.square(q - 0.9 * tf.stop_gradient(target))}
        h = tf.tanh(tf.matmul(x, self.enc))
        return {"y": tf.matmul(tf.stop_gradient(h) + h, self.head)}


def _tape(path: str) -> dict[str, bool]:
    """Whether the loaded model's tape gives each trainable variable a nonzero gradient."""
    loaded = tf.saved_model.load(path)
    x = tf.constant(np.random.default_rng(0).standard_normal((3, 4)), tf.float32)
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(loaded.signatures["serving_default"](x=x)["y"])
    grads = tape.gradient(y, [loaded.enc, loaded.head])
    return {n: g is not None and bool(np.any(g.numpy() != 0)) for n, g in zip(("enc", "head"), grads)}


def _ga108(report) -> list:
    return [f for f in report.findings if f.code == "GA108"]


def test_a_variable_cut_only_by_stop_gradient_is_a_warning_naming_the_cut(tmp_path):
    for kind in ("stop_enc", "target"):
        path = save_module(Stopped(kind), str(tmp_path / kind))
        assert _tape(path) == {"enc": False, "head": True}
        r = audit_saved_model(path, AuditOptions(static_only=True))
        (found,) = _ga108(r)
        assert found.sources == ("enc",) and found.severity.value == "warning"
        assert found.op is not None and found.op.op_type == "StopGradient", found.message
        assert [f for f in r.findings if f.code == "GA106"]  # the cut itself stays info


def test_a_variable_with_a_live_path_beside_the_stopped_one_gets_no_finding(tmp_path):
    path = save_module(Stopped("also_live"), str(tmp_path / "live"))
    assert _tape(path) == {"enc": True, "head": True}
    assert _ga108(audit_saved_model(path, AuditOptions(static_only=True))) == []


def test_a_keras_layer_frozen_with_trainable_false_is_no_trainable_source(tmp_path):
    """Keras 3 leaves `trainable=True` on a frozen layer's tf.Variables; its export lists the trainable ones
    (`trainable_variables`), which the loaded model's own list agrees with: the frozen encoder behind a
    stop_gradient is no source, so no GA108 says it never trains (tester 9's m5b)."""
    import keras

    keras.utils.set_random_seed(3)
    inp = keras.Input((5,), name="x")
    enc = keras.layers.Dense(6, activation="tanh", name="frozen_enc")
    h = keras.layers.Lambda(keras.ops.stop_gradient, name="sg")(enc(inp))
    model = keras.Model(inp, keras.layers.Dense(2, name="head")(h))
    enc.trainable = False
    path = str(tmp_path / "frozen")
    model.export(path, verbose=False)
    loaded = tf.saved_model.load(path)
    truth = sorted(v.name.split(":")[0] for v in loaded.trainable_variables)
    assert truth == ["head/bias", "head/kernel"] and all(v.trainable for v in loaded.variables)
    r = audit_saved_model(path, AuditOptions(static_only=True))
    assert sorted(s.name for s in r.sources if s.kind == "variable") == truth
    assert _ga108(r) == []


def test_a_variable_that_reaches_only_an_integer_output_names_the_op_that_made_it_integer(tmp_path):
    """A classifier whose only output is the class id (argmax, int32): its variables never get a gradient, and
    GA108 names the ArgMax that turned their value into an integer (tester 12's M4: the warning named no op)."""
    import keras
    import tensorflow as tf

    from gradaudit.api import AuditOptions, audit_saved_model

    keras.utils.set_random_seed(0)
    inp = keras.Input((5,), name="x")
    probs = keras.layers.Dense(3, activation="softmax", name="probs")(inp)
    model = keras.Model(inp, {"cls": keras.ops.cast(keras.ops.argmax(probs, axis=-1), "int32")})
    path = str(tmp_path / "cls")
    model.export(path, verbose=False)
    loaded = tf.saved_model.load(path)
    fn = loaded.signatures["serving_default"]
    x = tf.ones((2, 5))
    with tf.GradientTape() as tape:
        out = next(iter(fn(x=x).values()))
    assert out.dtype == tf.int32 and tape.gradient(out, list(fn.trainable_variables)) == [None, None]
    report = audit_saved_model(path, AuditOptions(static_only=True))
    found = [f for f in report.findings if f.rule == "disconnected-source"]
    assert len(found) == 2 and all("ArgMax" in f.message for f in found), [f.message for f in found]
