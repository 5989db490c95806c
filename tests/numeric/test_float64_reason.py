"""Why a check ran in the model's own precision is TensorFlow's reason for the float64 copy only when the copy
fails for a reason of its own: a model whose gradient raises as saved (PreventGradient) fails the same way in
float64, and the report does not blame the copy."""

from __future__ import annotations

import os

import pytest

THIRDPARTY = os.path.join(os.path.dirname(__file__), "..", "..", "sample_models", "thirdparty")


@pytest.fixture(scope="module")
def audit():
    from gradaudit.api import AuditOptions, audit_saved_model

    cache = {}

    def get(name: str):
        if name not in cache:
            cache[name] = audit_saved_model(os.path.join(THIRDPARTY, name), AuditOptions())
        return cache[name]

    return get


def test_a_gradient_that_raises_as_saved_is_not_the_float64_copys_fault(audit):
    r = audit("prevent_gradient")
    base = [n for n in r.numeric if n.scale is None]
    assert base and {n.status for n in base} == {"error"}
    assert all("Gradient explicitly disabled" in n.reason for n in base)  # TensorFlow's own words
    assert all(n.precision_reason is None for n in base)
    assert not any("Float64 evaluation is not possible" in note.text for note in r.notes)
    # the run's raise is what the static pass foresaw: one finding, the static GA110, carrying TensorFlow's reason
    [raises] = [f for f in r.findings if f.rule == "gradient-raises"]
    assert raises.confirmed_by and "Gradient explicitly disabled" in raises.confirmed_by
    assert "missing-gradient" not in {f.rule for f in r.findings}


def test_a_compiled_module_fixed_to_float32_is_the_float64_copys_own_reason(audit):
    r = audit("jax_custom_vjp_ok")
    base = [n for n in r.numeric if n.scale is None]
    assert base and {n.status for n in base} == {"pass"} and {n.dtype for n in base} == {"float32"}
    assert all("float64 copy does not run" in n.precision_reason and "XlaCallModule" in n.precision_reason
               for n in base)
    assert any("Float64 evaluation is not possible" in note.text for note in r.notes)
