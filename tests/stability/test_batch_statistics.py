"""The stability probes run at one example only when the model treats the examples of a batch apart
(issue 22): a model with in-batch statistics, finite for one example and overflowing for two, was probed "ok"
everywhere; now a forward at the checks' batch tells that its outputs mix the examples, and the probes run at
that batch and find the overflow. A per-example model is still probed at one example."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model


class _BatchVariance(tf.Module):
    def __init__(self):
        self.w = tf.Variable(0.5, name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        var = tf.math.reduce_variance(x * self.w, axis=0)  # across the batch: 0 for one example
        return {"y": tf.reduce_sum(tf.exp(var), axis=-1) + tf.reduce_sum(x, axis=-1)}


class _PerExample(tf.Module):
    def __init__(self):
        self.w = tf.Variable(0.5, name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        var = tf.math.reduce_variance(x * self.w, axis=1, keepdims=True)  # across the features of one example
        return {"y": tf.reduce_sum(tf.exp(var) + x, axis=-1)}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("batchstat")
    return {"batch": save_module(_BatchVariance(), str(root / "batch")),
            "example": save_module(_PerExample(), str(root / "example"))}


def test_truth_the_batch_model_overflows_only_with_two_examples(models):
    fn = (obj := tf.saved_model.load(models["batch"])).signatures["serving_default"]
    x = np.array([[100.0, -100.0, 50.0, 10.0], [-100.0, 100.0, -50.0, 0.0]], np.float32)
    assert obj is not None and not np.isfinite(fn(x=x)["y"].numpy()).all()
    assert np.isfinite(fn(x=x[:1])["y"].numpy()).all()


def test_a_model_with_in_batch_statistics_is_probed_at_the_checks_batch(models):
    report = audit_saved_model(models["batch"], AuditOptions())
    assert any(f.code == "GA311" and f.op is not None and f.op.op_type == "Exp" for f in report.findings)
    assert {r.status for r in report.stability if r.scale >= 100} == {"nonfinite_forward"}
    assert any("Stability probes at a batch of 2" in n.text for n in report.notes)


def test_a_per_example_model_is_probed_at_one_example(models):
    report = audit_saved_model(models["example"], AuditOptions())
    assert not any("Stability probes at a batch of" in n.text for n in report.notes)


class _SeededBatchVariance(tf.Module):
    """_BatchVariance beside an integer input of fixed shape [2] (a stateless seed): it has no batch dimension."""

    def __init__(self):
        self.w = tf.Variable(0.5, name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x"),
                                  tf.TensorSpec([2], tf.int32, name="seed")])
    def __call__(self, x, seed):
        var = tf.math.reduce_variance(x * self.w, axis=0)
        return {"y": tf.reduce_sum(tf.exp(var), axis=-1) + tf.reduce_sum(x, axis=-1)
                + tf.cast(tf.reduce_sum(seed), tf.float32) * 0.0}


class _SeededPerExample(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x"),
                                  tf.TensorSpec([2], tf.int32, name="seed")])
    def __call__(self, x, seed):
        return {"y": tf.reduce_sum(tf.tanh(x), axis=-1) + tf.cast(tf.reduce_sum(seed), tf.float32) * 0.0}


def test_an_input_without_a_batch_dimension_is_kept_whole_when_examples_are_run_alone(tmp_path):
    """The examples are run one by one with the inputs that have a batch dimension cut row by row and the others
    (a fixed-shape seed) whole: before, cutting the seed made the model refuse the call, and the note said "its
    examples could not be run one by one (TypeError)" (tester 17). Truth: the batch model's outputs for one example
    change with the other, the per-example model's do not."""
    batch = save_module(_SeededBatchVariance(), str(tmp_path / "batch"))
    x = np.array([[1.0, -2.0, 0.5, 3.0], [0.0, 1.0, -1.0, 2.0]], np.float32)
    seed = np.array([1, 2], np.int32)
    fn = tf.saved_model.load(batch).signatures["serving_default"]
    assert not np.isclose(fn(x=x, seed=seed)["y"].numpy()[0], fn(x=x[:1], seed=seed)["y"].numpy()[0])
    notes = [n.text for n in audit_saved_model(batch, AuditOptions()).notes]
    assert any("changes with the other examples of the batch" in t for t in notes), notes
    assert not any("could not be run one by one" in t for t in notes), notes
    example = save_module(_SeededPerExample(), str(tmp_path / "example"))
    notes = [n.text for n in audit_saved_model(example, AuditOptions()).notes]
    assert not any("Stability probes at a batch of" in t for t in notes), notes
