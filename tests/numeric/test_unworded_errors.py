"""An exception TensorFlow raises without a message (a failed `assert` in its own code) is reported as what it
is and where: its type, TensorFlow's line that raised it and the op whose gradient it was building, never its
type name twice ("AssertionError: AssertionError"). The model: a tf.cond whose true branch holds a saved
custom gradient; tf.GradientTape on the loaded model raises a bare AssertionError in cond_v2's If gradient."""

from __future__ import annotations

import traceback

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.numeric.runner import describe


@tf.custom_gradient
def _exp(x):
    return tf.exp(x), lambda dy: dy * tf.exp(x)


class _CondCustomGradient(tf.Module):
    def __init__(self):
        self.w = tf.Variable([1.0, 2.0, 3.0], name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.cond(tf.reduce_sum(x) > 0, lambda: _exp(x * self.w), lambda: x * self.w)}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return save_module(_CondCustomGradient(), str(tmp_path_factory.mktemp("cond") / "cond_custom_gradient"))


def _tape_error(path):
    """What tf.GradientTape on the loaded model raises (None if it gives the gradients)."""
    loaded = tf.saved_model.load(path)  # kept: the signature's variables live on it
    fn = loaded.signatures["serving_default"]
    x = tf.constant(np.array([[0.5, -1.0, 2.0], [0.1, 0.2, 0.3]], np.float32))
    try:
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(fn(x=x)["y"])
        tape.gradient(loss, [x, *fn.trainable_variables])
    except Exception as exc:  # the truth is whatever TensorFlow raises
        return exc
    return None


def test_the_tape_raises_a_bare_assertion_in_tensorflows_cond_gradient(model):
    exc = _tape_error(model)
    assert type(exc) is AssertionError and str(exc) == ""
    last = traceback.extract_tb(exc.__traceback__)[-1]
    assert last.filename.endswith("cond_v2.py") and last.name == "_resolve_grad_inputs"
    said = describe(exc)
    assert said == (f"AssertionError (without a message) from TensorFlow's cond_v2.py:{last.lineno} "
                    f"_resolve_grad_inputs: {last.line}, building the gradient of op 'cond' (If)")


def test_the_audit_says_what_tensorflow_raised_and_where(model):
    """The tape on the loaded model raises: the model cannot be differentiated once loaded, which is a finding
    (GA204, an error), said once: the probes raising for the same reason at every point are a note, not a GA310."""
    exc = _tape_error(model)
    last = traceback.extract_tb(exc.__traceback__)[-1]
    report = audit_saved_model(model, AuditOptions())
    assert report.verdict() == "fail"
    [missing] = [f for f in report.findings if f.code == "GA204"]
    assert set(missing.sources) == {"x", "w"}
    assert not [f for f in report.findings if f.code == "GA310"], [f.message for f in report.findings]
    assert {r.status for r in report.numeric if r.scale is None} == {"error"}
    texts = [missing.message, *(r.reason or "" for r in report.numeric if r.status == "error"), *report.incomplete]
    for text in texts:
        assert "AssertionError: AssertionError" not in text
        assert (f"AssertionError (without a message) from TensorFlow's cond_v2.py:{last.lineno} _resolve_grad_inputs"
                in text), text
        assert "building the gradient of op 'cond' (If)" in text, text


def test_an_exception_gradaudit_raises_itself_is_not_the_models_fault(model, monkeypatch):
    """Only what TensorFlow raises while differentiating becomes the model's GA204: an `assert` failing in
    gradaudit's own code is gradaudit's failure, said to be one."""
    from gradaudit.errors import InternalError
    from gradaudit.numeric import runner

    def own_bug(self, inputs, u):
        raise AssertionError

    monkeypatch.setattr(runner.Runner, "_gradient_impl", own_bug)
    with pytest.raises(InternalError, match="numeric checks"):
        audit_saved_model(model, AuditOptions())


def test_an_exception_without_a_message_or_traceback_is_named_once():
    assert describe(AssertionError()) == "AssertionError (without a message)"
    assert describe(ValueError("bad shape")) == "ValueError: bad shape"
