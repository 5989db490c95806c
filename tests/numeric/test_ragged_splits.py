"""A ragged tensor's row splits given as a signature input (tf.RaggedTensor.from_row_splits): offsets from 0 to the
number of values, never lengths. Synthesised as 0, 1, ..., the batch (one value a row) the model runs and the audit
decides; before, they were synthesised as lengths of 1, which from_row_splits refuses, and the audit was
incomplete. Truth: the loaded model runs at those splits, and its tape gradient agrees with float64 central
differences of a numpy twin at a real ragged batch."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model

W = np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32)


class MeanOfRows(tf.Module):
    def __init__(self):
        self.w = tf.Variable(W, name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="values"),
                                  tf.TensorSpec([None], tf.int64, name="row_splits")])
    def __call__(self, values, row_splits):
        rt = tf.RaggedTensor.from_row_splits(values, row_splits)
        return {"y": tf.matmul(tf.reduce_mean(tf.tanh(rt), axis=1), self.w)}

    @staticmethod
    def twin(values, splits, w):
        return np.stack([np.tanh(values[a:b]).mean(axis=0) for a, b in zip(splits[:-1], splits[1:])]) @ w


class PaddedRows(tf.Module):
    def __init__(self):
        self.w = tf.Variable(W, name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="values"),
                                  tf.TensorSpec([None], tf.int32, name="splits")])
    def __call__(self, values, splits):
        dense = tf.RaggedTensor.from_row_splits(values, splits).to_tensor()  # rows padded with zeros
        return {"y": tf.reduce_sum(tf.sin(dense @ self.w), axis=1)}

    @staticmethod
    def twin(values, splits, w):
        return np.stack([np.sin(values[a:b] @ w).sum(axis=0) for a, b in zip(splits[:-1], splits[1:])])


@pytest.mark.parametrize("module", [MeanOfRows, PaddedRows])
def test_row_splits_are_synthesised_as_offsets_and_the_model_is_decided(tmp_path, module):
    path = save_module(module(), str(tmp_path / module.__name__))
    loaded = tf.saved_model.load(path)  # holds the variables the signature reads
    fn = loaded.signatures["serving_default"]
    names = sorted(fn.structured_input_signature[1])
    split_name = next(n for n in names if n != "values")
    values = np.random.default_rng(1).standard_normal((5, 3))
    splits = np.array([0, 2, 5])
    # the truth at a real ragged batch: the tape against float64 differences of the twin (by the values)
    x = tf.constant(values.astype(np.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(values=x, **{split_name: tf.constant(splits, fn.structured_input_signature[1][split_name].dtype)})["y"]
        phi = tf.reduce_sum(y)
    g = tf.convert_to_tensor(tape.gradient(phi, x)).numpy().astype(np.float64)  # a gather's IndexedSlices
    d = np.random.default_rng(2).standard_normal(values.shape)
    h = 1e-6
    numeric = (module.twin(values + h * d, splits, W.astype(np.float64)).sum()
               - module.twin(values - h * d, splits, W.astype(np.float64)).sum()) / (2 * h)
    assert abs(numeric - float(np.sum(g * d))) < 1e-4 * max(1.0, abs(numeric))
    report = audit_saved_model(path, AuditOptions())
    assert report.verdict() == "pass", (report.incomplete, [f.message for f in report.findings])
    assert any(f"Input {split_name} was synthesised as the row splits 0, 1, 2" in n.text for n in report.notes)
    assert {r.status for r in report.numeric if r.scale is None} == {"pass"}
