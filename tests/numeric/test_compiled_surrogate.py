"""A straight-through estimator inside a compiled module (jax2tf's XlaCallModule, a custom_jvp round) gets the
verdict the same estimator gets outside one: GA203 info and a pass, not a GA201 error. The static pass sees no
cut inside the module, so the evidence is numeric: bisecting the variables' failing check finds the part whose
forward is flat along its direction while its gradient is not, and the rest agreeing.

Truth: each fixture's truth.json `gradient_error`, from JAX's own derivative of the plain function (no custom
rule) in the library's venv (build_jax.py): above 1 the true derivative is zero while the saved gradient is not
(the estimator); between 1e-3 and 1 a wrong gradient (jax_ste_param_wrong_b's b, 1.05 times too large); below
1e-5 right.
"""

from __future__ import annotations

import json
import os

import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model

THIRDPARTY = os.path.join(os.path.dirname(__file__), "..", "..", "sample_models", "thirdparty")


def _truth(name: str) -> dict[str, str]:
    with open(os.path.join(THIRDPARTY, name, "truth.json")) as fh:
        errors = json.load(fh)["gradient_error"]["y"]
    return {s: "estimator" if e > 1 else "wrong" if e > 1e-3 else "right" if e < 1e-5 else "?"
            for s, e in errors.items()}


@pytest.fixture(scope="module")
def reports():
    return {n: audit_saved_model(os.path.join(THIRDPARTY, n), AuditOptions())
            for n in ("jax_ste_param", "jax_ste_param_wrong_b")}


@pytest.mark.parametrize("name", ["jax_ste_param", "jax_ste_param_wrong_b"])
def test_the_estimator_is_a_surrogate_and_only_a_wrong_gradient_fails(reports, name):
    truth = _truth(name)
    r = reports[name]
    surrogate = {s for f in r.findings if f.rule == "surrogate-gradient" for s in f.sources}
    wrong = {s for f in r.findings if f.rule == "gradient-mismatch" and f.severity.value == "error"
             for s in f.sources}
    assert surrogate == {s for s, t in truth.items() if t == "estimator"}
    assert wrong == {s for s, t in truth.items() if t == "wrong"}
    assert r.verdict() == ("fail" if wrong else "pass")


def test_the_variables_row_names_the_estimator_as_its_evidence(reports):
    (row,) = [n for n in reports["jax_ste_param"].numeric if n.source == "*" and n.scale is None]
    assert row.status == "pass" and "surrogate gradient of act/w" in row.reason and "agree" in row.reason


def test_the_same_estimator_outside_a_module_gets_the_same_verdict(tmp_path):
    """tanh(round(4 x @ w) / 4 + b) with tf.stop_gradient's straight-through form in plain TensorFlow."""

    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable(tf.random.stateless_normal([4, 2], seed=[4, 2]) * 0.5, name="w")
            self.b = tf.Variable(tf.zeros([2]), name="b")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def __call__(self, x):
            z = x @ self.w * 4.0
            return {"y": tf.tanh((z + tf.stop_gradient(tf.round(z) - z)) / 4.0 + self.b)}

    r = audit_saved_model(save_module(M(), str(tmp_path / "ste")), AuditOptions())
    assert r.verdict() == "pass"
    assert not [f for f in r.findings if f.rule == "gradient-mismatch" and f.severity.value != "info"]
