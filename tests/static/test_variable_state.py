"""GA113: a value written into a variable and read back in the same call reaches the output without a gradient.

The truth is TensorFlow's tape on the loaded model (the gradient of x and w is None) beside the output's own
change when x moves (it depends on x): the static pass must say the pair is blocked and name the read and the
write, and say nothing where the value is used directly or the read comes before the write."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model

X = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
SPEC = [tf.TensorSpec([2, 4], tf.float32, name="x")]


class _Base(tf.Module):
    def __init__(self):
        rng = np.random.default_rng(1)
        self.w = tf.Variable(rng.standard_normal((4, 3)).astype(np.float32) * 0.5, name="w")
        self.v = tf.Variable(rng.standard_normal((3, 2)).astype(np.float32) * 0.5, name="v")
        self.cache = tf.Variable(tf.zeros([2, 3]), trainable=False, name="cache")


class ReadBack(_Base):  # the tester's m17: a cache written, then read for the output
    @tf.function(input_signature=SPEC)
    def __call__(self, x):
        self.cache.assign(tf.tanh(x @ self.w))
        return {"y": self.cache.read_value() @ self.v}


class AssignValue(_Base):  # `assign`'s own value is a read of the variable after the write
    @tf.function(input_signature=SPEC)
    def __call__(self, x):
        return {"y": self.cache.assign(tf.tanh(x @ self.w)) @ self.v}


class ScatterBack(_Base):  # a scatter write (ResourceScatterNdUpdate), then a gather of the rows
    @tf.function(input_signature=SPEC)
    def __call__(self, x):
        self.cache.scatter_nd_update([[0], [1]], tf.tanh(x @ self.w))
        return {"y": tf.gather(self.cache, [1, 0]) @ self.v}


class PartBack(_Base):  # the read back plus the value itself: one of two paths is cut
    @tf.function(input_signature=SPEC)
    def __call__(self, x):
        h = tf.tanh(x @ self.w)
        self.cache.assign(h)
        return {"y": (self.cache.read_value() + h) @ self.v}


class StraightThrough(_Base):  # tester 14's STEReadBack: the value read back, the gradient through h itself
    @tf.function(input_signature=SPEC)
    def __call__(self, x):
        h = tf.tanh(x @ self.w)
        self.cache.assign(h)
        return {"y": (self.cache.read_value() + h - tf.stop_gradient(h)) @ self.v}


class Direct(_Base):  # the healthy twin: the state is written, the output uses the value
    @tf.function(input_signature=SPEC)
    def __call__(self, x):
        h = tf.tanh(x @ self.w)
        self.cache.assign(h)
        return {"y": h @ self.v}


class ReadBefore(_Base):  # the read comes before the write: it gives the previous call's state, not this value
    @tf.function(input_signature=SPEC)
    def __call__(self, x):
        y = self.cache.read_value() @ self.v + tf.reduce_sum(x)
        self.cache.assign(tf.tanh(x @ self.w))
        return {"y": y}


def _truth(path: str) -> dict[str, bool]:
    """Per source (x, w): does the tape give it a gradient, and (x) does y move when x moves."""
    loaded = tf.saved_model.load(path)
    fn = loaded.signatures["serving_default"]
    w = loaded.w
    x = tf.constant(X)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = fn(x=x)["y"]
        y0 = tf.reduce_sum(y)
    got = {"x": tape.gradient(y0, x) is not None, "w": tape.gradient(y0, w) is not None}
    moved = fn(x=tf.constant(X + 1e-2))["y"].numpy()
    got["x moves y"] = bool(np.abs(moved - fn(x=x)["y"].numpy()).max() > 1e-5)
    return got


def _static(path: str):
    report = audit_saved_model(path, AuditOptions(static_only=True))
    status = {(e.source, e.output): e.status for e in report.flow}
    return report, status


@pytest.mark.parametrize("module", [ReadBack, AssignValue, ScatterBack], ids=lambda m: m.__name__)
def test_a_value_read_back_from_a_variable_is_a_blocked_pair_naming_the_read_and_the_write(tmp_path, module):
    path = save_module(module(), str(tmp_path / module.__name__))
    truth = _truth(path)
    assert truth == {"x": False, "w": False, "x moves y": True}, truth  # TensorFlow: y depends on x, no gradient
    report, status = _static(path)
    assert status[("x", "y")] == "blocked" and status[("w", "y")] == "blocked"
    assert status[("v", "y")] == "connected"
    found = [f for f in report.findings if f.code == "GA113"]
    assert len(found) == 1 and found[0].severity.value == "error", [f.code for f in report.findings]
    assert found[0].op.op_type in ("ReadVariableOp", "ResourceGather")
    assert set(found[0].sources) == {"x", "w"} and found[0].outputs == ("y",)
    assert "written by" in found[0].message and ("AssignVariableOp" in found[0].message
                                                  or "ResourceScatterNdUpdate" in found[0].message)
    assert report.verdict() == "fail"


def test_a_value_read_back_beside_the_value_itself_is_a_partial_cut_and_an_error(tmp_path):
    """The gradient misses the read-back's part (tester 14's StatefulRNN: a warning there let the explained
    mismatch pass the model)."""
    path = save_module(PartBack(), str(tmp_path / "part"))
    assert _truth(path) == {"x": True, "w": True, "x moves y": True}
    report, status = _static(path)
    assert status[("x", "y")] == "connected" and status[("w", "y")] == "connected"
    found = [f for f in report.findings if f.code == "GA113"]
    assert len(found) == 1 and found[0].severity.value == "error" and set(found[0].sources) == {"x", "w"}


@pytest.mark.slow  # a model's numeric checks, seconds
def test_the_default_audit_of_a_partial_read_back_fails(tmp_path):
    """The tape's gradient is half the derivative (y = (cache + h) v after cache = h): the audit fails, on the
    GA113 that explains the numeric difference."""
    path = save_module(PartBack(), str(tmp_path / "part"))
    report = audit_saved_model(path, AuditOptions())
    assert report.verdict() == "fail"
    assert "GA113" in [f.code for f in report.findings if f.severity.value == "error"]


@pytest.mark.parametrize("module", [Direct, ReadBefore], ids=lambda m: m.__name__)
def test_state_written_but_not_read_back_is_no_finding(tmp_path, module):
    path = save_module(module(), str(tmp_path / module.__name__))
    truth = _truth(path)
    report, status = _static(path)
    assert not [f for f in report.findings if f.code == "GA113"], [f.message for f in report.findings]
    assert (status[("x", "y")] == "connected") == truth["x"]
    if module is Direct:
        assert truth == {"x": True, "w": True, "x moves y": True} and status[("w", "y")] == "connected"
    else:  # w reaches only the write, which this call's output does not read
        assert not truth["w"] and status.get(("w", "y")) != "blocked"


@pytest.mark.slow  # a model's numeric checks, seconds
def test_the_default_audit_of_a_value_read_back_fails_on_ga113(tmp_path):
    report = audit_saved_model(save_module(ReadBack(), str(tmp_path / "m")), AuditOptions())
    assert report.verdict() == "fail"
    assert [f.code for f in report.findings if f.severity.value == "error"] == ["GA113"]


@pytest.mark.slow  # a model's numeric checks, seconds
def test_a_read_back_whose_lost_part_the_value_makes_up_passes_on_the_numeric_evidence(tmp_path):
    """value = the read, gradient = dh: right (the tape agrees with the differences), so the partial GA113 is info
    with the numeric checks as its evidence, not an error."""
    path = save_module(StraightThrough(), str(tmp_path / "ste"))
    assert _truth(path) == {"x": True, "w": True, "x moves y": True}
    report = audit_saved_model(path, AuditOptions())
    found = [f for f in report.findings if f.code == "GA113"]
    assert report.verdict() == "pass" and len(found) == 1 and found[0].severity.value == "info"
    assert found[0].probed and "agree with the derivative" in found[0].probed

