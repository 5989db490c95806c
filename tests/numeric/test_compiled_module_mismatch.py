"""A wrong gradient that comes from inside a compiled module (jax2tf's XlaCallModule) says so: it names the
module, and its fix is about the exported program, not a TensorFlow gradient function.

The fixture `jax_stop_gradient_param` computes `x @ lax.stop_gradient(w) + b` inside the module; its
truth.json records, from the library's own environment, the saved gradient's error against the forward's
derivative: 1.0 for `act/w` (the saved gradient is zero), 0 for `x` and `act/b`.
"""

from __future__ import annotations

import json
import math
import os

import pytest

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "sample_models", "thirdparty",
                       "jax_stop_gradient_param")


@pytest.fixture(scope="module")
def report():
    from gradaudit.api import AuditOptions, audit_saved_model

    return audit_saved_model(FIXTURE, AuditOptions())


@pytest.fixture(scope="module")
def truth() -> dict[str, float]:
    with open(os.path.join(FIXTURE, "truth.json")) as fh:
        return json.load(fh)["gradient_error"]["y"]


def test_the_wrong_source_is_found_and_only_it(report, truth):
    """The static pass reads the module's saved gradient (its StableHLO), which gives `act/w` exactly zero: the
    pair is blocked with the error said there, and the numeric checks pass the sources the truth says are right
    (a mismatch the static pass cannot see, a wrong custom VJP, is test_real_inputs' jax2tf case)."""
    wrong = {s for s, err in truth.items() if err > 0.1}
    assert wrong == {"act/w"}
    blocked = {e.source for e in report.flow if e.status == "blocked"}
    assert blocked == wrong
    errors = [f for f in report.findings if f.severity.value == "error"]
    assert {s for f in errors for s in f.sources} == wrong
    checked = {n.source for n in report.numeric if n.scale is None}
    assert checked == set(truth) - wrong and all(n.status == "pass" for n in report.numeric)


def test_the_message_and_fix_point_inside_the_compiled_module(report):
    (f,) = [f for f in report.findings if f.severity.value == "error"]
    assert "compiled module" in f.message and "XlaCallModule" in f.message
    assert "exactly zero" in f.message and "stop_gradient" in f.message
    assert "stop_gradient" in f.fix


def test_a_plain_custom_gradient_keeps_the_fix_that_names_it(models):
    """No compiled module: the wrong tf.custom_gradient is the thing to fix, and the fix says so."""
    from gradaudit.api import AuditOptions, audit_saved_model

    r = audit_saved_model(models("mlp_1e-4"), AuditOptions())
    found = [f for f in r.findings if f.rule == "gradient-mismatch"]
    assert found and all("compiled module" not in f.message for f in found)
    assert all(f.fix.startswith("Fix the gradient function") for f in found)
    assert all(f.op is not None and f.op.op_type == "IdentityN" for f in found)


def test_zero_autodiff_still_has_a_relative_threshold():
    from gradaudit.numeric.sweep import Estimate

    est = Estimate(delta=-2.0, bound=1e-4, step=1e-2, sigma=1e-6, scale=0.0, autodiff=0.0, flat=False,
                   jumpy=False, kinky=False, evaluations=14)
    assert est.rel_bound == math.inf  # relative to the gradient, which is zero
    assert est.rel_threshold(1e-5) == pytest.approx(5e-5)  # relative to the differences, like rel_error
    both_zero = Estimate(delta=0.0, bound=1e-4, step=1e-2, sigma=1e-6, scale=0.0, autodiff=0.0, flat=False,
                         jumpy=False, kinky=False, evaluations=14)
    assert both_zero.rel_threshold(1e-5) == math.inf


def test_one_wrong_gradient_seen_at_several_points_is_one_finding():
    """jax_custom_vjp_wrong's saved gradient is 1% off everywhere: the synthesised point and the probe points
    all fail for x, with the same op at fault; the report has one finding for it and every failing row."""
    from gradaudit.api import AuditOptions, audit_saved_model

    path = os.path.join(os.path.dirname(FIXTURE), "jax_custom_vjp_wrong")
    r = audit_saved_model(path, AuditOptions())
    mismatches = [f for f in r.findings if f.rule == "gradient-mismatch"]
    assert len(mismatches) == 1 and mismatches[0].sources == ("x",)
    assert not mismatches[0].message.startswith("At the probe point")
    failing = [n for n in r.numeric if n.source == "x" and n.status == "fail"]
    assert {n.scale for n in failing} >= {None, 100.0}  # the base point and a probe point both failed
