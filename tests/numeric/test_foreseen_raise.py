"""One cause, one finding: where the static pass found the op that makes TensorFlow refuse the signature's
backward (a gradient that raises, GA110; an op without a gradient, GA101) and differentiating the loaded model
then raises at the numeric checks' point, the static finding records TensorFlow's error (`confirmed_by`) and no
second error (GA204) says the same thing. Two models of the class; the truth is tf.GradientTape on each loaded
model. A raise the static pass did not foresee stays the checks' own GA204 (test_unworded_errors.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from gradaudit.api import AuditOptions, audit_saved_model

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "sample_models")
CASES = {"thirdparty/prevent_gradient": ("GA110", "PreventGradient"), "no_gradient_op": ("GA101", "AdjustContrastv2")}


def _tape_raises(path: str) -> str:
    """What tf.GradientTape raises differentiating the loaded model's serving signature at a plain input."""
    loaded = tf.saved_model.load(path)  # kept: the signature's variables live on it
    fn = loaded.signatures["serving_default"]
    [(name, spec)] = fn.structured_input_signature[1].items()
    shape = [2 if d is None else d for d in spec.shape]
    x = tf.constant(np.random.default_rng(0).normal(size=shape).astype(spec.dtype.as_numpy_dtype))
    with pytest.raises(LookupError) as raised:  # TensorFlow builds the call's backward while the tape records it
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.add_n([tf.reduce_sum(v) for v in fn(**{name: x}).values()])
        tape.gradient(loss, [x, *fn.trainable_variables])
    return str(raised.value)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_static_finding_records_the_raise_and_no_second_error_repeats_it(name):
    path = os.path.join(ROOT, name)
    truth = _tape_raises(path)
    code, op_type = CASES[name]
    report = audit_saved_model(path, AuditOptions())
    assert report.verdict() == "fail"
    errors = [f for f in report.findings if f.severity.value == "error"]
    assert [(f.code, f.op.op_type if f.op else None) for f in errors] == [(code, op_type)], [f.message for f in errors]
    assert errors[0].confirmed_by is not None
    # TensorFlow's own words, as the tape gave them (describe keeps their first sentence)
    assert truth.split(".")[0].replace(" ", "") in errors[0].confirmed_by.replace(" ", "")
    assert {n.status for n in report.numeric if n.scale is None} == {"error"}
