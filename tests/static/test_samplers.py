"""Gradients through random draws are reparameterization estimators: a numeric difference there is expected
(GA111 names the sampler), never a GA201 error telling the user to fix a gradient."""

from __future__ import annotations

import os

import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
THIRDPARTY = os.path.join(ROOT, "sample_models", "thirdparty")


@pytest.mark.slow  # a model's numeric checks, seconds
@pytest.mark.parametrize("name", ["tfp_gamma_rsample", "tfp_beta_rsample"])
def test_tfp_reparameterized_samplers_pass_with_the_sampler_named(name):
    report = audit_saved_model(os.path.join(THIRDPARTY, name), AuditOptions())
    assert report.verdict() == "pass", [(f.code, f.severity.value, f.message) for f in report.findings]
    samplers = [f for f in report.findings if f.rule == "sampler-gradient"]
    assert samplers and all(f.severity.value == "info" for f in samplers)
    # not even a warning: the sampler's own saved gradient is the estimator GA111 names
    assert not [f for f in report.findings if f.rule == "gradient-mismatch" and f.severity.value != "info"]
    assert all(n.status != "fail" for n in report.numeric)


def test_a_sampler_whose_distribution_a_variable_sets(tmp_path):
    class M(tf.Module):
        def __init__(self):
            self.alpha = tf.Variable([2.0, 3.0], name="alpha")

        @tf.function(input_signature=[tf.TensorSpec([2], tf.int32, name="seed"),
                                      tf.TensorSpec([None, 2], tf.float32, name="x")])
        def __call__(self, seed, x):
            z = tf.random.stateless_gamma([4, 2], seed=seed, alpha=self.alpha)
            return {"y": tf.reduce_mean(z, axis=0) * x}

    report = audit_saved_model(save_module(M(), str(tmp_path / "g")), AuditOptions(static_only=True))
    [f] = [f for f in report.findings if f.rule == "sampler-gradient"]
    assert f.sources == ("alpha",) and f.outputs == ("y",)


def test_no_sampler_finding_without_randomness(samples):
    report = audit_saved_model(os.path.join(samples, "log1pexp_custom"), AuditOptions(static_only=True))
    assert not [f for f in report.findings if f.rule == "sampler-gradient"]


@pytest.mark.slow  # a model's numeric checks, seconds
def test_a_wrong_custom_gradient_after_a_random_draw_still_fails(tmp_path):
    """z = mu + exp(log_sigma) * eps(seed) + x, then a custom square whose gradient is 3z instead of 2z: the
    draw happens before the custom gradient, which is an ordinary (wrong) one."""

    @tf.custom_gradient
    def sq(z):
        return z * z, lambda dy: dy * 3.0 * z

    class M(tf.Module):
        def __init__(self):
            self.mu = tf.Variable([0.3, -0.2], name="mu")
            self.log_sigma = tf.Variable([-1.0, -0.5], name="log_sigma")

        @tf.function(input_signature=[tf.TensorSpec([2], tf.int32, name="seed"),
                                      tf.TensorSpec([None, 2], tf.float32, name="x")])
        def __call__(self, seed, x):
            eps = tf.random.stateless_normal(tf.shape(x), seed=seed)
            return {"y": sq(self.mu + tf.exp(self.log_sigma) * eps + x)}

    report = audit_saved_model(save_module(M(), str(tmp_path / "vae")), AuditOptions())
    assert not [f for f in report.findings if f.rule == "sampler-gradient"]
    assert report.verdict() == "fail"
    assert [f for f in report.findings if f.rule == "gradient-mismatch" and f.severity.value == "error"]
