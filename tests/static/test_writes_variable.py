"""GA112: a serving signature that writes a trainable variable is an error (every call changes the deployed
weights); writes to non-trainable state (counters, moving statistics) are not findings."""

from __future__ import annotations

import os

import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model

THIRDPARTY = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          "sample_models", "thirdparty")
X = tf.TensorSpec([None, 3], tf.float32, name="x")


def _save(tmp_path, name, fn, **variables):
    m = tf.Module()
    for k, v in variables.items():
        setattr(m, k, v)
    m.call = tf.function(lambda x: fn(m, x), input_signature=[X])
    return save_module(m, str(tmp_path / name), m.call)


def _writes(report):
    return [f for f in report.findings if f.rule == "writes-variable"]


def test_a_signature_that_decays_its_kernel_is_an_error(tmp_path):
    def fn(m, x):
        m.w.assign_sub(0.1 * m.w)  # AssignSubVariableOp on a trainable variable at every call
        return {"y": x * m.w}

    path = _save(tmp_path, "decay", fn, w=tf.Variable(tf.ones([3]), name="w"))
    loaded = tf.saved_model.load(path)  # the truth: each call changes the weights, so the answer drifts
    first = loaded.signatures["serving_default"](x=tf.ones([1, 3]))["y"].numpy()
    second = loaded.signatures["serving_default"](x=tf.ones([1, 3]))["y"].numpy()
    assert (first != second).all()

    report = audit_saved_model(path, AuditOptions(static_only=True))
    [f] = _writes(report)
    assert f.code == "GA112" and f.severity.value == "error" and f.sources == ("w",)
    assert f.op.op_type == "AssignSubVariableOp" and "strip_pruning" in f.fix
    assert report.verdict() == "fail"


def test_a_signature_that_counts_calls_is_not_a_finding(tmp_path):
    def fn(m, x):
        m.calls.assign_add(1.0)  # non-trainable state
        return {"y": x * m.w}

    path = _save(tmp_path, "count", fn, w=tf.Variable(tf.ones([3]), name="w"),
                 calls=tf.Variable(0.0, trainable=False, name="calls"))
    report = audit_saved_model(path, AuditOptions(static_only=True))
    assert not _writes(report) and report.verdict() == "pass"


def test_a_pruning_wrapper_exported_without_strip_pruning_fails():
    """tensorflow-model-optimization 0.8.1's prune_low_magnitude, exported wrapped (the fixture's builder:
    build_tfmot.py) assigns kernel * mask to both kernels; strip_pruning's export writes nothing."""
    report = audit_saved_model(os.path.join(THIRDPARTY, "tfmot_pruned_mlp"), AuditOptions(static_only=True))
    writes = _writes(report)
    assert {s for f in writes for s in f.sources} == {"dense/kernel", "head/kernel"}
    assert {f.severity.value for f in writes} == {"error"} and report.verdict() == "fail"
    stripped = audit_saved_model(os.path.join(THIRDPARTY, "tfmot_pruned_stripped_mlp"), AuditOptions(static_only=True))
    assert not _writes(stripped) and stripped.verdict() == "pass"
