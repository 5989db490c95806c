"""The Python API and assert_differentiable agree with the CLI: the same policy options under the same names,
expected mismatches do not fail the helper, and sources outside `wrt` are not held against the model."""

from __future__ import annotations

import os

import pytest
import tensorflow as tf
from click.testing import CliRunner
from helpers import save_module

from gradaudit import audit
from gradaudit.cli import main
from gradaudit.errors import GradauditError
from gradaudit.testing import assert_differentiable


def test_policy_options_match_the_cli(samples):
    path = os.path.join(samples, "classifier_argmax")
    assert not audit(path, static_only=True).ok
    assert CliRunner().invoke(main, [path, "--static-only"]).exit_code == 1
    for kwargs, args in [({"ignore": ["zero-gradient"]}, ["--ignore", "zero-gradient"]),
                         ({"ignore_ops": ["*ArgMax*"]}, ["--ignore-ops", "*ArgMax*"]),
                         ({"select": "GA3"}, ["--select", "GA3"]),
                         ({"fail_on": "never"}, ["--fail-on", "never"])]:
        report = audit(path, static_only=True, **kwargs)
        assert report.ok, kwargs
        assert CliRunner().invoke(main, [path, "--static-only", *args]).exit_code == 0, args
    suppressed = audit(path, static_only=True, ignore_ops="zero-gradient:*ArgMax*")
    assert [f.suppressed for f in suppressed.findings if f.rule == "zero-gradient"] == [
        "ignore-ops zero-gradient:*ArgMax*"]


def test_policy_from_a_configuration_file(samples, tmp_path):
    path = os.path.join(samples, "classifier_argmax")
    cfg = tmp_path / "pyproject.toml"
    cfg.write_text('[tool.gradaudit]\nstatic-only = true\nignore-ops = {zero-gradient = ["*ArgMax*"]}\n')
    report = audit(path, config=cfg)
    assert report.ok and not report.numeric  # static-only came from the file too
    assert not audit(path, config=cfg, ignore_ops=[]).ok  # arguments win over the file
    cfg.write_text('[tool.gradaudit]\nallow-unsafe-ops = true\n')
    with pytest.raises(GradauditError, match="cannot be set in a configuration file"):
        audit(path, config=cfg)
    with pytest.raises(GradauditError, match="unknown rule"):
        audit(path, static_only=True, select=["GA999"])


def test_assert_differentiable_with_wrt_ignores_other_sources(samples):
    path = os.path.join(samples, "disconnected_variable")  # `unused` reaches no output: a GA108 warning
    with pytest.raises(AssertionError, match="disconnected-source"):
        assert_differentiable(path, static_only=True, fail_on="warning")
    assert_differentiable(path, static_only=True, fail_on="warning", wrt=["x", "w"])
    with pytest.raises(AssertionError, match="unused"):
        assert_differentiable(path, static_only=True, fail_on="warning", wrt=["x", "unused"])


@pytest.mark.slow  # runs the model in a child process
def test_assert_differentiable_accepts_a_mismatch_its_cut_explains(tmp_path):
    """y = x*w + stop_gradient(x*x): the gradient leaves the second term out by design; the numeric difference
    is the StopGradient's (checked on the float64 copy with it made an identity), so the helper passes, as
    the CLI does."""

    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable(tf.ones([3]), name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": x * self.w + tf.stop_gradient(x * x)}

    path = save_module(M(), str(tmp_path / "m"))
    report = assert_differentiable(path)
    [check] = [n for n in report.numeric if n.source == "x" and n.scale is None]
    assert check.status == "pass" and "what StopGradient" in check.reason and "matches" in check.reason
    assert CliRunner().invoke(main, [path]).exit_code == 0
