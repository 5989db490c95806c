"""A source the static pass finds no path from, whose value reaches an output all the same, fails as a missing
gradient (tester 14: a variable written in one nested function and read in another, a buffer in a while loop, a
write in a cond branch all passed with a GA108 'reaches no output'). The truth is the loaded model itself: the
tape gives x and w no gradient while y moves with them. Healthy twins (a counter beside the output, a write that a
later write resets, the previous call's state read before this call writes it) must not get the finding."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model

B, D = 2, 4
SPEC = [tf.TensorSpec([B, D], tf.float32, name="x")]
RNG = np.random.default_rng(0)
W0, V0 = RNG.standard_normal((D, D)).astype(np.float32) * 0.5, RNG.standard_normal((D, 1)).astype(np.float32) * 0.5


class _Base(tf.Module):
    def __init__(self):
        self.w = tf.Variable(W0, name="w")
        self.v = tf.Variable(V0, name="v")
        self.cache = tf.Variable(tf.zeros((B, D)), trainable=False, name="cache")


class CrossFunction(_Base):
    @tf.function
    def _write(self, x):
        self.cache.assign(tf.tanh(x @ self.w))
        return tf.constant(0)

    @tf.function
    def _read(self):
        return self.cache @ self.v

    @tf.function(input_signature=SPEC)
    def __call__(self, x):
        self._write(x)
        return {"y": self._read()}


class WhileBuffer(_Base):
    def _fill(self, x):
        """The buffer written in a while loop's body, three times."""
        self.cache.assign(tf.zeros_like(x))

        def body(i):
            self.cache.assign(tf.tanh(self.cache @ self.w + x))
            return (i + 1,)

        tf.while_loop(lambda i: i < 3, body, [tf.constant(0)])

    @tf.function(input_signature=SPEC)
    def __call__(self, x):
        self._fill(x)
        return {"y": self.cache @ self.v}


class CondWrite(_Base):
    @tf.function(input_signature=SPEC)
    def __call__(self, x):
        def write():
            self.cache.assign(tf.tanh(x @ self.w))
            return tf.constant(1)

        tf.cond(tf.reduce_sum(x) > -1e9, write, lambda: tf.constant(0))
        return {"y": self.cache @ self.v}


class Counter(_Base):  # a step counter beside a healthy output
    def __init__(self):
        super().__init__()
        self.step = tf.Variable(0.0, trainable=False, name="step")

    @tf.function(input_signature=SPEC)
    def __call__(self, x):
        self.step.assign_add(1.0)
        return {"y": tf.tanh(x @ self.w) @ self.v}


class ResetAfterWrite(_Base):  # the last write is a constant: w truly moves nothing
    def __init__(self):
        super().__init__()
        self.u = tf.Variable(V0, name="u")

    @tf.function(input_signature=SPEC)
    def __call__(self, x):
        self.cache.assign(tf.tanh(x @ self.w))
        self.cache.assign(tf.zeros((B, D)))
        return {"y": x @ self.u + self.cache @ self.v}


def _truth(path: str) -> dict[str, tuple[bool, bool]]:
    """Per source (x, w): (the tape gives it a gradient, y moves when it moves), each call from the same state."""
    loaded = tf.saved_model.load(path)
    fn = loaded.signatures["serving_default"]
    state = list(fn.variables)  # every variable the signature holds, the cache and counters too
    kept = [v.numpy() for v in state]

    def y(x):
        out = fn(x=tf.constant(x))["y"].numpy()
        for v, k in zip(state, kept):
            v.assign(k)
        return out

    x0 = RNG.standard_normal((B, D)).astype(np.float32)
    with tf.GradientTape(persistent=True) as tape:
        x = tf.constant(x0)
        tape.watch(x)
        total = tf.reduce_sum(fn(x=x)["y"])
    grads = {"x": tape.gradient(total, x), "w": tape.gradient(total, loaded.w)}
    for v, k in zip(state, kept):
        v.assign(k)
    base = y(x0)
    moved_x = not np.array_equal(y(x0 + 0.01), base)
    loaded.w.assign(W0 * 1.01)
    moved_w = not np.array_equal(y(x0), base)
    loaded.w.assign(W0)
    return {"x": (grads["x"] is not None, moved_x), "w": (grads["w"] is not None, moved_w)}


@pytest.mark.parametrize("module", [CrossFunction, WhileBuffer, CondWrite], ids=lambda m: m.__name__)
def test_a_value_the_static_pass_cannot_follow_fails_as_a_missing_gradient(tmp_path, module):
    path = save_module(module(), str(tmp_path / module.__name__))
    assert _truth(path) == {"x": (False, True), "w": (False, True)}  # no gradient, yet y moves with both
    report = audit_saved_model(path, AuditOptions())
    assert report.verdict() == "fail"
    missing = {s for f in report.findings if f.code == "GA204" and f.severity.value == "error" for s in f.sources}
    assert missing == {"x", "w"}, [(f.code, f.sources, f.message) for f in report.findings]
    assert not [f for f in report.findings if f.code == "GA108" and "w" in f.sources]  # refuted: it does reach y
    rows = [n for n in report.numeric if n.source == "x" and n.status == "fail"]
    assert rows and "bit for bit" in rows[0].reason


@pytest.mark.parametrize("module", [Counter, ResetAfterWrite], ids=lambda m: m.__name__)
def test_state_that_moves_no_output_with_a_source_is_no_missing_gradient(tmp_path, module):
    path = save_module(module(), str(tmp_path / module.__name__))
    truth = _truth(path)
    assert truth["x"] == (True, True) and truth["w"][1] is (module is Counter)
    report = audit_saved_model(path, AuditOptions())
    assert not [f for f in report.findings if f.code == "GA204"], [f.message for f in report.findings]
    assert report.verdict() == "pass"


class WhileBufferPartial(WhileBuffer):  # the buffer beside a direct path: x and w keep part of their gradient
    def __init__(self):
        super().__init__()
        self.u = tf.Variable(V0, name="u")

    @tf.function(input_signature=SPEC)
    def __call__(self, x):
        self._fill(x)
        return {"y": self.cache @ self.v + tf.tanh(x @ self.w) @ self.u}


def test_a_mismatch_in_a_model_that_writes_variables_says_where_to_look(tmp_path):
    """Tester 14's WhileBufferPartial: the GA201 blamed gradients 'registered by imported libraries' only."""
    path = save_module(WhileBufferPartial(), str(tmp_path / "wbp"))
    assert _truth(path) == {"x": (True, True), "w": (True, True)}
    report = audit_saved_model(path, AuditOptions())
    mismatches = [f for f in report.findings if f.code == "GA201" and f.severity.value == "error"]
    assert report.verdict() == "fail" and mismatches
    assert all("The model writes variables (AssignVariableOp)" in f.message for f in mismatches)
