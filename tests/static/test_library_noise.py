"""Library internals the user did not write are not a wall of findings: the patterns of one saved gradient
function are one line (TensorFlow Probability's betainc holds 41), and TensorFlow's own custom gradient inside
tf.nn.silu or tf.nn.ctc_loss is not the user's custom gradient (no GA107 line)."""

from __future__ import annotations

import json
import os

import keras
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model

THIRDPARTY = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          "sample_models", "thirdparty")
X = tf.TensorSpec([None, 3], tf.float32, name="x")


def _rules(report, rule):
    return [f for f in report.findings if f.rule == rule]


def test_tfp_betainc_gradient_code_is_one_line():
    path = os.path.join(THIRDPARTY, "tfp_betainc_grad")
    with open(os.path.join(path, "truth.json")) as f:
        truth = {p["source"]: p["truth"] for p in json.load(f)["entry_points"]["serving_default"]["pairs"]}
    assert truth == {"x": "nonzero", "a": "nonzero", "b": "nonzero"}  # a healthy model
    report = audit_saved_model(path, AuditOptions(static_only=True))
    [f] = _rules(report, "squared-denominator")
    assert "41 squared-denominator patterns in the saved gradient function" in f.message


def test_a_custom_gradient_with_two_patterns_is_one_line(tmp_path):
    @tf.custom_gradient
    def ratio(a, b):
        def grad(dy):
            return dy / b, -0.5 * dy * a / b**2 - 0.5 * dy * a / tf.square(b)  # -a/b^2, written twice

        return a / b, grad

    m = tf.Module()
    m.w = tf.Variable(tf.ones([3]), name="w")
    m.call = tf.function(lambda x: {"y": ratio(x, m.w + 1.0)}, input_signature=[X])
    report = audit_saved_model(save_module(m, str(tmp_path / "two"), m.call), AuditOptions(static_only=True))
    [f] = _rules(report, "squared-denominator")
    assert f.message.startswith("2 squared-denominator patterns")


def test_the_custom_gradient_inside_tf_nn_silu_is_tensorflows(tmp_path):
    m = tf.Module()
    m.w = tf.Variable(tf.ones([3, 3]), name="w")
    m.call = tf.function(lambda x: {"y": tf.nn.silu(x @ m.w)}, input_signature=[X])
    path = save_module(m, str(tmp_path / "silu"), m.call)
    loaded = tf.saved_model.load(path)
    with tf.GradientTape() as tape:  # the truth: TensorFlow gives the gradient through it
        y = loaded.signatures["serving_default"](x=tf.ones([2, 3]))["y"]
    assert tape.gradient(y, loaded.w) is not None
    assert not _rules(audit_saved_model(path, AuditOptions(static_only=True)), "custom-gradient")


def test_the_custom_gradient_inside_tf_nn_ctc_loss_is_tensorflows(tmp_path):
    class Ctc(tf.Module):
        def __init__(self):
            self.w = tf.Variable(tf.random.stateless_normal([4, 5], seed=[1, 2]), name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 6, 4], tf.float32, name="x"),
                                      tf.TensorSpec([None, 3], tf.int32, name="labels")])
        def __call__(self, x, labels):
            logits = tf.einsum("btd,dk->btk", x, self.w)
            n = tf.shape(x)[0]
            loss = tf.nn.ctc_loss(labels, logits, label_length=tf.fill([n], 3), logit_length=tf.fill([n], 6),
                                  logits_time_major=False, blank_index=0)
            return {"loss": loss}

    module = Ctc()
    path = save_module(module, str(tmp_path / "ctc"))
    loaded = tf.saved_model.load(path)
    with tf.GradientTape() as tape:  # the truth: TensorFlow gives the gradient through it
        loss = loaded.signatures["serving_default"](x=tf.ones([2, 6, 4]), labels=tf.constant([[1, 2, 3]] * 2))["loss"]
    assert tape.gradient(loss, loaded.w) is not None
    assert not _rules(audit_saved_model(path, AuditOptions(static_only=True)), "custom-gradient")


def test_a_keras_silu_layer_has_no_custom_gradient_line(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="silu"), keras.layers.Dense(2)])
    path = str(tmp_path / "keras_silu")
    model.export(path, verbose=False)
    assert not _rules(audit_saved_model(path, AuditOptions(static_only=True)), "custom-gradient")


def test_a_users_own_custom_gradient_is_still_listed(static_report):
    assert _rules(static_report("log1pexp_custom"), "custom-gradient")
