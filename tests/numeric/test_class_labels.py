"""Integer labels of a sparse softmax cross-entropy are synthesised as classes in [0, classes), read from the
logits' last dimension: TensorFlow's kernel refuses any other label, and the model could not be checked."""

from __future__ import annotations

import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model


class Classifier(tf.Module):
    def __init__(self):
        self.w = tf.Variable(tf.random.stateless_normal([4, 3], seed=[1, 2]), name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x"),
                                  tf.TensorSpec([None], tf.int32, name="label")])
    def __call__(self, x, label):
        return {"loss": tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=x @ self.w)}


def test_sparse_labels_are_classes_of_the_logits(tmp_path):
    path = save_module(Classifier(), str(tmp_path / "classifier"))
    r = audit_saved_model(path, AuditOptions())
    assert "unrunnable-model" not in {f.rule for f in r.findings}
    base = {n.source: n.status for n in r.numeric if n.scale is None}
    assert base == {"x": "pass", "w": "pass"}, r.numeric
    assert r.verdict() == "pass" and not r.incomplete
