"""A forward that turns Inf or NaN at a probe point while its true value there is an ordinary float32 number
(an intermediate of the written form overflows: a softmax cross-entropy written out with exp, log(cumsum(exp)))
and its gradient is NaN/Inf there too is an error, with the float64 value as its evidence, also where no static
lint knows the form: training on such an input fails where a stable form would not. A value that itself lies
beyond float32 (exp(x) at x = 100) stays a warning, as does an overflowing value whose written gradient stays
finite (TensorFlow's custom_gradient log1pexp example), and the stable twins pass. Truth: the loaded model in
float32 and the same forward in float64."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.model import Severity

LABELS = np.array([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]], np.float32)


def _hand_ce(z, labels):
    p = tf.exp(z) / tf.reduce_sum(tf.exp(z), axis=-1, keepdims=True)
    return -tf.reduce_sum(labels * tf.math.log(p), axis=-1)


def _log_cumsum_exp(z, labels):
    return tf.reduce_sum(tf.math.log(tf.cumsum(tf.exp(z), axis=-1)) * labels, axis=-1)


@tf.custom_gradient
def _log1pexp(x):
    e = tf.exp(x)
    return tf.math.log(1 + e), lambda dy: dy * (1 - 1 / (1 + e))


FORMS = {
    "hand_ce": (_hand_ce, "error"),
    "builtin_ce": (lambda z, labels: tf.nn.softmax_cross_entropy_with_logits(labels, z), None),
    "log_cumsum_exp": (_log_cumsum_exp, "error"),
    "cumulative_logsumexp": (lambda z, labels: tf.reduce_sum(tf.math.cumulative_logsumexp(z, axis=-1) * labels,
                                                             axis=-1), None),
    "exp_itself": (lambda z, labels: tf.reduce_sum(tf.exp(z), axis=-1), "warning"),
    # TensorFlow's custom_gradient example: the value still overflows, the gradient it writes stays finite
    "custom_log1pexp": (lambda z, labels: tf.reduce_sum(_log1pexp(z), axis=-1), "warning"),
}
W = np.random.default_rng(3).normal(size=(4, 3)).astype(np.float32)


class _Model(tf.Module):
    def __init__(self, form):
        super().__init__()
        self._form = form
        self.w = tf.Variable(W, name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x"),
                                  tf.TensorSpec([None, 3], tf.float32, name="labels")])
    def __call__(self, x, labels):
        return {"loss": self._form(x @ self.w, labels)}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("overflowing_form")
    paths = {}
    for name, (form, _) in FORMS.items():
        m = _Model(form)
        paths[name] = str(root / name)
        tf.saved_model.save(m, paths[name], signatures={"serving_default": m.__call__})
    return paths


def _truth_at_scale(name: str, scale: float) -> tuple[bool, float]:
    """(float32 forward non-finite, largest |float64 forward|) at x of magnitude `scale`."""
    form = FORMS[name][0]
    x = np.random.default_rng(0).normal(size=(2, 4)) * scale
    y32 = form(tf.constant(x, tf.float32) @ tf.constant(W), tf.constant(LABELS)).numpy()
    y64 = form(tf.constant(x) @ tf.constant(W, tf.float64), tf.constant(LABELS, tf.float64)).numpy()
    return bool(not np.all(np.isfinite(y32))), float(np.max(np.abs(y64)))


@pytest.mark.parametrize("name", sorted(FORMS))
def test_an_overflowing_form_of_an_ordinary_value_is_an_error(saved, name):
    broken32, true64 = _truth_at_scale(name, 100.0)
    expected = FORMS[name][1]
    if expected is None:
        assert not broken32
    else:
        assert broken32 and np.isfinite(true64)
        assert bool(true64 <= np.finfo(np.float32).max) is (expected == "error" or name == "custom_log1pexp")
    report = audit_saved_model(saved[name], AuditOptions())
    forward = [f for f in report.findings if f.code == "GA311"]
    if expected is None:
        assert not forward and report.verdict() == "pass", [f.message for f in report.findings]
    elif expected == "error":
        assert any(f.severity is Severity.ERROR and "by the float64 copy" in f.message for f in forward)
        assert report.verdict() == "fail"
    else:
        assert forward and all(f.severity is Severity.WARNING for f in forward)
        assert report.verdict() == "pass", (report.incomplete, [(f.code, f.message) for f in report.findings])
