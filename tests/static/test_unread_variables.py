"""GA108: a trainable variable of the saved object that the audited signature never reads gets no gradient from
it (Keras: "Gradients do not exist for variables"). A warning when no other entry point reads it (Keras' own
layer traces aside), info naming the entry points that do."""

from __future__ import annotations

import json
import os

import tensorflow as tf

from gradaudit.api import AuditOptions, audit_saved_model

THIRDPARTY = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          "sample_models", "thirdparty")


def _ga108(report) -> dict[str, str]:
    return {s: f.severity.value for f in report.findings if f.rule == "disconnected-source" for s in f.sources}


def test_variables_the_signature_never_reads(tmp_path):
    m = tf.Module()
    m.w = tf.Variable(tf.ones([4]), name="w")
    m.aux = tf.Variable(tf.ones([4]), name="aux")  # read by another saved function only
    m.dead = tf.Variable(tf.ones([4]), name="dead")  # read by nothing
    spec = [tf.TensorSpec([None, 4], tf.float32, name="x")]
    m.call = tf.function(lambda x: {"y": x * m.w}, input_signature=spec)
    m.pretrain = tf.function(lambda x: {"y": x * m.aux}, input_signature=spec)
    path = str(tmp_path / "unread")
    tf.saved_model.save(m, path, signatures={"serving_default": m.call})

    loaded = tf.saved_model.load(path)
    for var in (loaded.aux, loaded.dead):  # the truth: TensorFlow gives them no gradient through the signature
        with tf.GradientTape() as tape:
            y = loaded.signatures["serving_default"](x=tf.ones([2, 4]))["y"]
        assert tape.gradient(y, var) is None

    report = audit_saved_model(path, AuditOptions(static_only=True))
    assert _ga108(report) == {"dead": "warning", "aux": "info"}
    [info] = [f for f in report.findings if f.sources == ("aux",)]
    assert "pretrain" in info.message


def test_a_keras_training_only_head_is_reported():
    """tf-keras saves its per-layer and training-mode traces, which read the auxiliary head; the serving
    signature does not (truth.json: `none` for both of its variables)."""
    path = os.path.join(THIRDPARTY, "tfkeras_training_head")
    with open(os.path.join(path, "truth.json")) as f:
        pairs = json.load(f)["entry_points"]["serving_default"]["pairs"]
    unread = {p["source"] for p in pairs if p["truth"] == "none"}
    assert unread == {"net/aux/kernel", "net/aux/bias"}
    report = audit_saved_model(path, AuditOptions(static_only=True))
    assert _ga108(report) == dict.fromkeys(unread, "warning")
    assert {e.status for e in report.flow} == {"connected"}
