"""A serving signature that writes its trainable weights on every call (GA112): two evaluations at the same point
differ because each starts from the weights the one before wrote, not because of random draws, and the model's
examples do not mix. GA202 says so and its fix is about the writes, not dropout; no note claims that one example's
output changes with the other examples. Truth: two calls at the same input differ, and with the weights put back,
each example alone gives its row of the batch."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model


class AddsToKernel(tf.Module):
    def __init__(self):
        self.kernel = tf.Variable(np.random.default_rng(1).standard_normal((3, 2)).astype(np.float32), name="kernel")

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def __call__(self, x):
        y = tf.tanh(x @ self.kernel)
        self.kernel.assign_add(tf.fill([3, 2], 0.01))
        return {"y": y}


class ScattersIntoTable(tf.Module):
    def __init__(self):
        self.table = tf.Variable(np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32), name="table")

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def __call__(self, x):
        y = tf.reduce_sum(tf.sin(x[:, None, :] * self.table[None]), axis=-1)
        self.table.scatter_nd_add([[0], [2]], tf.fill([2, 3], 0.05))
        return {"y": y}


def _truth(path: str) -> None:
    loaded = tf.saved_model.load(path)
    fn = loaded.signatures["serving_default"]
    (variable,) = fn.variables
    x = np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)
    kept = variable.numpy()
    first, second = fn(x=tf.constant(x))["y"].numpy(), fn(x=tf.constant(x))["y"].numpy()
    assert not np.allclose(first, second)  # every call writes the weights
    rows = []
    for i in range(2):
        variable.assign(kept)
        rows.append(fn(x=tf.constant(x[i:i + 1]))["y"].numpy())
    variable.assign(kept)
    np.testing.assert_allclose(np.concatenate(rows), fn(x=tf.constant(x))["y"].numpy(), rtol=1e-6)  # no mixing


@pytest.mark.parametrize("module", [AddsToKernel, ScattersIntoTable])
def test_weights_written_by_every_call_are_said_to_be_the_cause(tmp_path, module):
    path = save_module(module(), str(tmp_path / module.__name__))
    _truth(path)
    report = audit_saved_model(path, AuditOptions())
    assert report.verdict() == "fail" and [f for f in report.findings if f.code == "GA112"]
    for f in report.findings:
        if f.code == "GA202":
            assert "writes variables when it runs" in f.message and "dropout" not in (f.fix or "")
    assert not [n for n in report.notes if "changes with the other examples" in n.text]
