"""Examples that meet only in the backward: a norm over the whole batch of a layer that never fires (a ReLU
after a bias of -100) is 0, so the gradient is NaN at every point, while the outputs of each example do not
depend on the others (the clipped or scaled activations are 0 whatever the norm). The probes' batched ladder
stacks the points along the batch: there the norm is not 0 and the gradient finite, and a check of the base
rows' outputs alone took the stack as faithful. Once, such a model was `incomplete` with "pass valid inputs",
although the NaN is at every input. The truth is the tape on the loaded model; finite differences are finite."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model


class _Dead(tf.Module):
    def __init__(self):
        self.w = tf.Variable(tf.random.stateless_normal([4, 3], seed=[1, 2]), name="w")
        self.b = tf.Variable(-100.0 * tf.ones([3]), name="b")


class ClipByGlobalNorm(_Dead):
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        h = tf.nn.relu(x @ self.w + self.b)
        clipped, _ = tf.clip_by_global_norm([h], 1.0)
        return {"y": clipped[0] + 0.1 * (x @ self.w)}


class TwoLayersClippedTogether(_Dead):
    """Two dead layers of different widths clipped by one global norm; the output is the second one's."""

    def __init__(self):
        super().__init__()
        self.v = tf.Variable(tf.random.stateless_normal([3, 5], seed=[5, 6]), name="v")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        h = tf.nn.relu(x @ self.w + self.b)
        g = tf.nn.relu(h @ self.v - 50.0)
        clipped, _ = tf.clip_by_global_norm([h, g], 1.0)
        return {"y": clipped[1] + 0.1 * (x @ self.w @ self.v)}


def _tape_nan(path: str) -> bool:
    loaded = tf.saved_model.load(path)  # kept: the signature refers to its variables
    f = loaded.signatures["serving_default"]
    x = tf.random.stateless_normal([2, 4], seed=[3, 4])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x=x)["y"]
    assert np.all(np.isfinite(y.numpy()))
    return not np.all(np.isfinite(tape.gradient(y, x).numpy()))


def _check(tmp_path, name, module, op_types):
    path = save_module(module, str(tmp_path / name))
    assert _tape_nan(path)  # the truth: NaN at an ordinary input, with a finite output
    r = audit_saved_model(path, AuditOptions())
    found = [f for f in r.findings if f.code == "GA310"]
    assert found and found[0].op is not None and found[0].op.op_type in op_types, [f.message for f in found]
    assert r.verdict() == "fail"


def test_clip_by_global_norm_of_a_dead_layer_fails(tmp_path):
    _check(tmp_path, "clip", ClipByGlobalNorm(), {"RealDiv"})


def test_two_dead_layers_clipped_together_fail(tmp_path):
    _check(tmp_path, "two", TwoLayersClippedTogether(), {"RealDiv"})
