"""An audit of one signature says which of the model's other signatures it leaves out (tester 13's m13: a
`quantized` signature cut by tf.round passed a default run, which audits serving_default, without a word)."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from gradaudit.api import AuditOptions, audit_saved_model

SPEC = [tf.TensorSpec([None, 3], tf.float32, name="x")]


class TwoHeads(tf.Module):
    def __init__(self):
        self.w = tf.Variable(np.ones((3, 2), np.float32), name="w")

    @tf.function(input_signature=SPEC)
    def plain(self, x):
        return {"y": x @ self.w}

    @tf.function(input_signature=SPEC)
    def quant(self, x):
        return {"y": tf.round(x @ self.w)}


def _notes(report) -> list[str]:
    return [n.text for n in report.notes if "other signature" in n.text]


def test_the_signatures_an_audit_leaves_out_are_named(tmp_path):
    m = TwoHeads()
    path = str(tmp_path / "two")
    tf.saved_model.save(m, path, signatures={"serving_default": m.plain, "quantized": m.quant})
    assert set(tf.saved_model.load(path).signatures) == {"serving_default", "quantized"}  # what TensorFlow loads
    default = audit_saved_model(path, AuditOptions(static_only=True))
    assert _notes(default) and "quantized" in _notes(default)[0] and "--all-signatures" in _notes(default)[0]
    assert default.verdict() == "pass"
    other = audit_saved_model(path, AuditOptions(static_only=True), signature="quantized")
    assert "'serving_default'" not in _notes(other)[0] and "serving_default" in _notes(other)[0]
    assert other.verdict() == "fail"  # what the note sends the user to: the round cuts it


def test_keras_serve_beside_serving_default_is_the_same_function_and_no_note(tmp_path):
    inputs = keras.Input((3,), name="x")
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    path = str(tmp_path / "k")
    model.export(path, verbose=False)
    assert {"serve", "serving_default"} <= set(tf.saved_model.load(path).signatures)
    assert not _notes(audit_saved_model(path, AuditOptions(static_only=True)))
