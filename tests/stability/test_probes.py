"""Stability probes over the input-scale ladder: statuses, findings, the op named, and the lints they confirm."""

from __future__ import annotations

import re

import jsonschema
import numpy as np
import pytest

from gradaudit.report import json_report

from .conftest import finding, rules_of, stability

PROBE_RULES = {"unstable-gradient", "nonfinite-forward"}


def test_norm_of_a_zero_vector(audited):
    r = audited("unstable_norm")
    f = finding(r, "unstable-gradient")
    # the lint on the same Sqrt is the error (one cause, one error); this finding carries its evidence
    assert f.severity.value == "info" and f.sources == ("x",) and f.outputs == ("y",)
    assert "That hazard is the error" in f.message
    assert f.op.op_type == "Sqrt" and f.op.op_name == "norm/Sqrt"
    assert "Sqrt received 0" in f.message and "at input scale(s) 0," in f.message
    zero = stability(r, "x", "y", 0.0)
    assert zero.status == "nonfinite_gradient" and zero.op_type == "Sqrt" and "gradient nan" in zero.detail
    assert stability(r, "x", "y", 1.0).status == "ok" and stability(r, "x", "y", 1e4).status == "ok"
    lint = finding(r, "sqrt-at-zero")  # confirmed: raised to an error that says what the probe saw
    assert lint.severity.value == "error" and "Confirmed by the stability probes" in lint.message


def test_where_over_a_log(audited):
    r = audited("where_nan")
    f = finding(r, "unstable-gradient")
    assert f.op.op_type == "Log" and "Log received 0" in f.message
    assert "where-nan" in f.message  # points at the hazard reported on the same op
    assert finding(r, "where-nan").severity.value == "error"
    assert [s.scale for s in r.stability if s.status != "ok"] == [0.0]


def test_reciprocal_ratio_blames_reciprocal_for_b_only(audited):
    r = audited("reciprocal_ratio")
    f = finding(r, "unstable-gradient")
    assert f.op.op_type == "Reciprocal" and f.sources == ("b",)
    # the probe scales the synthesised b, whose sign comes from the seed
    assert re.search(r"Reciprocal received -?1e-20", stability(r, "b", "f", 1e-20).detail)
    assert stability(r, "a", "f", 1e-20).status == "ok"
    assert finding(r, "squared-denominator").severity.value == "error"


def test_seed_000_naive_ratio_is_localised_inside_its_custom_gradient(audited):
    r = audited("ratio_naive")
    lint = finding(r, "squared-denominator")
    f = finding(r, "unstable-gradient")
    assert f.sources == ("b",) and f.op == lint.op  # the RealDiv a / b**2 of the gradient function
    assert f.op.function.startswith("__inference_internal_grad_fn") and "custom gradient" in f.message
    assert "returned inf" in stability(r, "b", "f", 1e-20).detail
    assert lint.severity.value == "error" and "Confirmed" in lint.message


def test_seed_000_stable_ratio_is_clean(audited):
    r = audited("ratio_stable")
    assert not rules_of(r) & (PROBE_RULES | {"squared-denominator"}) and r.verdict() == "pass"
    # b alone at 1e-20: the gradient 1e40 overflows float32 because its true value does: recorded, not a finding
    row = stability(r, "b", "f", 1e-20)
    assert row.status == "nonfinite_gradient" and "beyond float32's range" in row.detail
    # everything at 0: -0/0 is NaN in float64 too, outside the function's domain
    assert "not reported" in stability(r, "a", "f", 0.0).detail


def test_seed_001_naive_log1pexp_overflows_forward(audited):
    r = audited("log1pexp_naive")
    f = finding(r, "nonfinite-forward")
    assert f.severity.value == "info" and f.op.op_type == "Exp"  # the evidence of the log1p-exp lint, the error
    assert "Exp received" in f.message and "returned inf" in f.message
    hundred = stability(r, "x", "y", 100.0)
    assert hundred.status == "nonfinite_forward" and "gradient nan" in hundred.detail
    assert stability(r, "x", "y", 1.0).status == "ok"
    assert finding(r, "log1p-exp").severity.value == "error"


def test_seed_001_custom_log1pexp_gradient_stays_finite(audited):
    r = audited("log1pexp_custom")
    assert "unstable-gradient" not in rules_of(r)
    hundred = stability(r, "x", "y", 100.0)
    assert hundred.status == "nonfinite_forward" and "gradient finite" in hundred.detail
    assert "gradient stays finite" in finding(r, "nonfinite-forward").message


@pytest.mark.parametrize("name,rule", [("log_sigmoid_naive", "log-sigmoid"), ("log_softmax_naive", "log-softmax")])
def test_log_of_an_underflowing_probability(audited, name, rule):
    r = audited(name)
    assert finding(r, "nonfinite-forward").op.op_type == "Log"
    assert "Log received 0" in stability(r, "x", "y", 100.0).detail
    lint = finding(r, rule)
    assert lint.severity.value == "error" and "Log received 0" in lint.message


@pytest.mark.parametrize("name", ["softplus", "where_safe", "safe_norm", "normal_logpdf", "cnn", "mlp"])
def test_healthy_models_probe_clean(audited, name):
    r = audited(name)
    assert not rules_of(r) & PROBE_RULES, [f.message for f in r.findings]
    assert r.stability and {s.status for s in r.stability} == {"ok"}
    scales = {s.scale for s in r.stability}
    assert scales == {0.0, 1e-30, 1e-20, 1e-10, 1e-3, 1.0, 1e1, 1e2, 3e2, 6e2, 1e4}  # 3e2, 6e2: float32's exp overflow


def test_variables_are_probed_with_the_inputs(audited):
    r = audited("cnn")  # six trainable variables: one row stands for all of them
    assert {s.source for s in r.stability} == {"image", "*"} and len(r.stability) == 22


def test_variables_share_one_row_that_names_the_bad_ones(tmp_path):
    import tensorflow as tf
    from helpers import save_module

    from gradaudit.api import AuditOptions, audit_saved_model

    class ScaledNorm(tf.Module):
        def __init__(self):
            self.w = tf.Variable([1.0, 2.0, 3.0], name="w")
            self.v = tf.Variable(2.0, name="v")

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": tf.norm(x * self.w, axis=-1) * self.v}

    r = audit_saved_model(save_module(ScaledNorm(), str(tmp_path / "scaled_norm")),
                          AuditOptions(probe_scales=(0.0, 1.0)))
    zero = stability(r, "*", "y", 0.0)
    assert zero.status == "nonfinite_gradient" and zero.detail.startswith("w: ") and zero.op_type == "Sqrt"
    assert stability(r, "*", "y", 1.0).status == "ok"
    f = finding(r, "unstable-gradient")
    assert set(f.sources) == {"x", "w"} and f.op.op_type == "Sqrt"  # not v: d y / d v = norm = 0 is fine


def test_lint_the_probes_ran_for_but_could_not_confirm_is_info(audited):
    """The probes scaled x, which feeds the Sqrt, and never reached its bad point (0): info, not a warning."""
    r = audited("unstable_norm", probe_scales=(1.0, 100.0))
    assert "unstable-gradient" not in rules_of(r)
    lint = finding(r, "sqrt-at-zero")
    assert lint.severity.value == "info"
    assert "Not confirmed by the stability probes (x at scales ±1, ±100)" in lint.message
    assert {s.scale for s in r.stability} == {1.0, 100.0}


def test_static_only_runs_no_probe_and_lints_stay_warnings(static_report):
    r = static_report("unstable_norm")
    assert not r.stability and "unstable-gradient" not in rules_of(r)
    assert finding(r, "sqrt-at-zero").severity.value == "warning"


@pytest.mark.parametrize("name", ["unstable_norm", "ratio_stable", "log1pexp_custom"])
def test_stability_list_matches_the_json_schema(audited, name):
    doc = json_report.to_dict(audited(name))
    jsonschema.validate(doc, json_report.schema())
    assert doc["stability"] and all(set(s) == {"source", "output", "scale", "status", "op_type", "op_name",
                                                "detail", "reported"} for s in doc["stability"])
    # a cell is held against the model exactly when it is not ok and the float64 copy does not explain it
    for s in doc["stability"]:
        assert s["reported"] == (s["status"] != "ok" and not (s["detail"] or "").endswith("not reported"))


def test_scales_outside_the_dtype_are_skipped():
    from gradaudit.numeric.probes import valid_scales

    kept, skipped = valid_scales((0.0, 1e-30, 1e-3, 1e4, 1e5), [np.float16])
    assert kept == [0.0, 1e-3, 1e4] and skipped == [1e-30, 1e5]
    assert valid_scales((1e-30, 1e4), [np.float32]) == ([1e-30, 1e4], [])


def test_op_inside_a_frozen_while_loop_is_located(tmp_path):
    """A While loop whose body reads x from outside: differentiating the frozen copy for a second time
    rewrites the loop op (a fresh session runs it), and the one op in its body whose backward can make the
    NaN is named, with the loop that holds it."""
    import tensorflow as tf
    from helpers import save_module

    from gradaudit.api import AuditOptions, audit_saved_model

    class NormInLoop(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def __call__(self, x):
            _, y = tf.while_loop(lambda i, h: i < 1, lambda i, h: (i + 1, tf.norm(x, axis=-1)),
                                 (tf.constant(0), tf.zeros_like(x[:, 0])))
            return {"y": y}

    path = save_module(NormInLoop(), str(tmp_path / "norm_in_loop"))
    r = audit_saved_model(path, AuditOptions(probe_scales=(0.0, 1.0)))
    f = finding(r, "unstable-gradient")
    assert f.op is not None and f.op.op_type == "Sqrt" and f.op.function.startswith("while_body")
    assert "is the only op in its body whose backward can" in f.message and "While" in f.message
    assert stability(r, "x", "y", 0.0).status == "nonfinite_gradient"
    assert not any("could not be located" in n.text for n in r.notes)


class _SoftplusAndLinear:
    """softplus = log(1 + exp(x @ w)) (overflows for x @ w > 88.7 in float32) and linear = x @ v, one signature."""

    @staticmethod
    def save(path: str) -> str:
        import tensorflow as tf
        from helpers import save_module

        class M(tf.Module):
            def __init__(self):
                self.w = tf.Variable([[10.0], [1.0]], name="w")
                self.v = tf.Variable([[0.5], [-0.5]], name="v")

            @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
            def __call__(self, x):
                return {"softplus": tf.math.log(1.0 + tf.exp(x @ self.w)), "linear": tf.tanh(x @ self.v)}

        return save_module(M(), path)


def test_the_inputs_given_with_inputs_are_probed_as_given(tmp_path):
    """The ladder scales the inputs normalised to a largest magnitude of 1; the given point (x @ w = 100, where
    float32's exp overflows) is probed too, and the findings say so."""
    from gradaudit.api import AuditOptions, audit_saved_model

    npz = tmp_path / "big.npz"
    np.savez(npz, x=np.full((2, 2), 50.0, dtype=np.float32))
    r = audit_saved_model(_SoftplusAndLinear.save(str(tmp_path / "m")),
                          AuditOptions(inputs_file=str(npz), probe_scales=(1.0,)))
    assert {s.status for s in r.stability} == {"ok"}  # the ladder's point x/50 is healthy
    forward = finding(r, "nonfinite-forward")
    assert "the inputs given with --inputs" in forward.message and forward.op.op_type == "Exp"
    without = audit_saved_model(_SoftplusAndLinear.save(str(tmp_path / "m2")), AuditOptions(probe_scales=(1.0,)))
    assert "nonfinite-forward" not in rules_of(without)


def test_a_nan_made_in_another_outputs_backward_says_so(tmp_path):
    """At x × 100 softplus overflows: its backward makes 0 × inf = NaN, and TensorFlow runs the whole signature's
    backward for linear's gradient too. linear's own ops are healthy: the finding says where the NaN comes from."""
    from gradaudit.api import AuditOptions, audit_saved_model

    r = audit_saved_model(_SoftplusAndLinear.save(str(tmp_path / "m")), AuditOptions(probe_scales=(1.0, 100.0)))
    (linear,) = [f for f in r.findings if f.rule == "unstable-gradient" and f.outputs == ("linear",)]
    # the op is the one softplus's backward made the NaN in, located by differentiating that output alone
    assert linear.op is not None and linear.op.op_type == "Exp" and "made in softplus's backward" in linear.message


def test_a_division_by_a_sum_of_squares_is_confirmed_and_its_fix_is_about_the_denominator(tmp_path):
    """h / reduce_sum(h * h): at inputs of size 1e-30 the sum underflows to 0 in float32 and the output is inf,
    while the float64 value is representable in float32. The lint is confirmed; the probe's fix names the
    denominator, not the stable forms of exp and log."""
    import tensorflow as tf
    from helpers import save_module

    from gradaudit.api import AuditOptions, audit_saved_model

    class Ratio(tf.Module):
        def __init__(self):
            self.w = tf.Variable(np.random.default_rng(3).standard_normal((4, 4)).astype("float32"), name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def __call__(self, x):
            h = x @ self.w
            return {"ratio": h / tf.reduce_sum(h * h, axis=-1, keepdims=True)}

    r = audit_saved_model(save_module(Ratio(), str(tmp_path / "ratio")), AuditOptions(probe_scales=(1.0, 1e-30)))
    lint = finding(r, "squared-denominator")
    assert lint.severity.value == "error" and "sum of squares" in lint.message and lint.confirmed_by
    forward = finding(r, "nonfinite-forward")
    assert forward.op.op_type == "RealDiv" and "denominator" in forward.fix and "softplus" not in forward.fix
    assert r.verdict() == "fail"
