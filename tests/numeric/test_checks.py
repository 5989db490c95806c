"""Numeric gradient checks on real SavedModels: the verdicts issue 3 asks for."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from gradaudit.model import CheckedOutputs, FlowEntry
from gradaudit.numeric import NumericOptions, NumericTask, run_numeric
from gradaudit.numeric.savedmodel import declared_sources


def audit(path: str, flow: list[FlowEntry] | None = None, **options):
    sources, outputs = declared_sources(path)
    task = NumericTask(sources, outputs, flow or [], NumericOptions(**options))
    return run_numeric(path, (), "serving_default", task)


def status(outcome, source: str) -> str:
    (result,) = [r for r in outcome.results if r.source == source]
    return result.status


def result(outcome, source: str):
    (found,) = [r for r in outcome.results if r.source == source]
    return found


def rules(outcome) -> set[str]:
    return {f.rule for f in outcome.findings}


# -- wrong custom gradients are caught --------------------------------------------------------------

def test_wrong_by_1e4_caught_in_float32(models):
    outcome = audit(models("mlp_1e-4"), upcast=False)
    x = result(outcome, "x")
    assert (x.status, x.dtype) == ("fail", "float32")
    assert 5e-5 < x.rel_error < 2e-4
    mismatches = [f for f in outcome.findings if f.rule == "gradient-mismatch"]
    assert "x" in {s for f in mismatches for s in f.sources}
    assert not {s for f in mismatches for s in f.sources} & {"w2"}  # w2's gradient is right


def test_wrong_by_1e6_caught_with_float64_upcast(models):
    outcome = audit(models("mlp_1e-6"))
    x = result(outcome, "x")
    assert (x.status, x.dtype) == ("fail", "float64")
    assert 5e-7 < x.rel_error < 2e-6
    assert status(outcome, "*") == "fail"
    assert "gradient-mismatch" in rules(outcome)


def test_wrong_by_1e6_is_below_float32_resolution(models):
    # Without the upcast the same model passes: float32 cannot see 1e-6, which is why upcasting matters.
    outcome = audit(models("mlp_1e-6"), upcast=False)
    assert status(outcome, "x") == "pass"


def test_wrong_by_2x_caught_and_pinned(models):
    outcome = audit(models("mlp_2x"))
    assert status(outcome, "x") == "fail"
    group = result(outcome, "*")
    assert group.status == "fail" and "w1" in group.reason and "w2" not in group.reason
    assert status(outcome, "w1") == "fail"
    assert not [r for r in outcome.results if r.source == "w2"]


def test_small_variable_2x_wrong_among_fifty_is_named(models):
    outcome = audit(models("many"))
    failing = {r.source for r in outcome.results if r.status == "fail"}
    assert failing == {"*", "bias_17"}
    assert result(outcome, "bias_17").rel_error == pytest.approx(0.5, rel=1e-3)
    (finding,) = [f for f in outcome.findings if f.rule == "gradient-mismatch"]
    assert finding.sources == ("bias_17",)


def test_fifty_healthy_variables_pass(models):
    outcome = audit(models("many_ok"))
    assert [r.status for r in outcome.results] == ["pass", "pass"]
    assert outcome.findings == []


# -- healthy models pass ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["mlp", "relu", "while", "cnn"])
def test_healthy_models_pass_in_float64(models, name):
    outcome = audit(models(name))
    assert {r.status for r in outcome.results} == {"pass"}
    assert {r.dtype for r in outcome.results} == {"float64"}
    assert outcome.findings == []


@pytest.mark.parametrize("name", ["mlp", "relu", "while", "cnn"])
def test_healthy_models_never_fail_in_float32(models, name):
    # Kinks (ReLU, max-pool, abs) at float32 steps may leave a check inconclusive, never failed.
    outcome = audit(models(name), upcast=False)
    assert {r.dtype for r in outcome.results} == {"float32"}
    assert not {r.status for r in outcome.results} & {"fail", "error"}
    assert outcome.findings == []


def test_smooth_float32_model_passes_in_float32(models):
    outcome = audit(models("mlp"), upcast=False)
    assert {r.status for r in outcome.results} == {"pass"}


def test_integer_inputs_are_not_sources_and_embeddings_pass(models):
    outcome = audit(models("embedding"))
    assert {(r.source, r.status) for r in outcome.results} == {("mask", "pass"), ("*", "pass")}


def test_scalar_variable_is_checked(models):
    outcome = audit(models("scalar"))
    assert {(r.source, r.status) for r in outcome.results} == {("x", "pass"), ("*", "pass")}


def test_fused_batch_norm_is_checked_in_float64(models):
    """FusedBatchNormV3 has float32 kernels only: the float64 copy computes it with float64 primitives."""
    outcome = audit(models("fused"))
    assert {(r.status, r.dtype, r.precision_reason) for r in outcome.results} == {
        ("pass", "float64", "float64 copy of the model")}
    assert not any("FusedBatchNormV3" in note for note in outcome.notes)


def test_fused_batch_norm_model_wrong_by_1e4_caught_in_float64(models):
    outcome = audit(models("fused_1e-4"))
    assert (result(outcome, "x").status, result(outcome, "x").dtype) == ("fail", "float64")
    assert 5e-5 < result(outcome, "x").rel_error < 2e-4
    assert "gradient-mismatch" in rules(outcome)


def test_fused_batch_norm_model_wrong_by_1e4_still_caught_in_float32(models):
    outcome = audit(models("fused_1e-4"), upcast=False)
    assert (result(outcome, "x").status, result(outcome, "x").dtype) == ("fail", "float32")
    assert "gradient-mismatch" in rules(outcome)


# -- surrogates, randomness, models that cannot run --------------------------------------------------

def test_straight_through_estimator_is_a_surrogate_not_a_mismatch(models):
    outcome = audit(models("ste"))
    assert rules(outcome) == {"surrogate-gradient"}
    x = result(outcome, "x")
    assert x.status == "inconclusive" and x.reason.startswith("surrogate gradient")
    assert status(outcome, "w") == "pass"


def test_fake_quant_is_a_surrogate_not_a_mismatch(models):
    outcome = audit(models("fake_quant"))
    assert rules(outcome) == {"surrogate-gradient"}
    assert result(outcome, "x").dtype == "float32"  # FakeQuant* only exists in float32
    assert any("FakeQuantWithMinMaxArgs" in note for note in outcome.notes)


def test_dropout_is_nondeterministic_not_a_mismatch(models):
    outcome = audit(models("dropout"))
    assert rules(outcome) == {"nondeterministic"}
    assert {r.status for r in outcome.results} == {"inconclusive"}
    (finding,) = outcome.findings
    assert "RandomUniform" in finding.message and finding.outputs == ("y",)


@pytest.mark.slow  # starts a process (the confined child)
def test_pyfunc_model_gives_error_with_reason(tmp_path):
    # Saved in another process: in this one the Python callback would still be registered.
    import builders

    path = str(tmp_path / "pyfunc")
    subprocess.run([sys.executable, "-c", builders.PYFUNC_SCRIPT, path, builders.__file__.rsplit("/", 1)[0]],
                   check=True, capture_output=True)
    # Audited in a fresh process too: a py_func made earlier in this one (by another test) takes the token the
    # saved op names, and TensorFlow would call it.
    script = ("import json, sys; sys.path.insert(0, sys.argv[2]); from test_checks import audit; "
              "o = audit(sys.argv[1]); print(json.dumps([[r.status, r.reason] for r in o.results]"
              " + [sorted({f.rule for f in o.findings})]))")
    done = subprocess.run([sys.executable, "-c", script, path, os.path.dirname(__file__)], check=True,
                          capture_output=True, text=True)
    *results, found = json.loads(done.stdout.strip().splitlines()[-1])
    ((status, reason),) = results
    assert status == "error" and "Could not find callback" in reason
    assert found == ["unrunnable-model"]


def test_op_without_gradient_gives_error_and_missing_gradient(models):
    outcome = audit(models("no_gradient"))
    assert {r.status for r in outcome.results} == {"error"}
    assert all("No gradient defined for operation'Mod'" in r.reason for r in outcome.results)
    assert rules(outcome) == {"missing-gradient"}


def test_missing_gradient_where_static_pass_saw_a_path(models):
    path = models("stopped")
    flow = [FlowEntry(s, o, "connected") for s in ("x", "w", "v") for o in ("y", "z")]
    outcome = audit(path, flow=flow)
    missing = [f for f in outcome.findings if f.rule == "missing-gradient"]
    assert {s for f in missing for s in f.sources} == {"x", "w"}
    assert "gradient-mismatch" not in rules(outcome)


def test_blocked_pairs_are_not_checked(models):
    path = models("stopped")
    flow = [FlowEntry("x", o, "blocked") for o in ("y", "z")] + [
        FlowEntry("w", "y", "blocked"), FlowEntry("w", "z", "disconnected"),
        FlowEntry("v", "y", "disconnected"), FlowEntry("v", "z", "connected")]
    outcome = audit(path, flow=flow)
    assert result(outcome, "x").status == "skipped"
    assert result(outcome, "v").status == "pass" and result(outcome, "v").outputs == CheckedOutputs(("z",))
    assert outcome.findings == []


# -- the point where gradients are checked ----------------------------------------------------------

def test_inputs_file_gives_the_point(models, tmp_path):
    path = models("sqrt")
    npz = tmp_path / "inputs.npz"
    np.savez(npz, x=np.array([[0.5, 1.0, 2.0], [3.0, 1.5, 0.7]], dtype=np.float32))
    given = audit(path, inputs_file=str(npz))
    assert status(given, "x") == "pass" and not any("absolute values" in n for n in given.notes)
    # At N(0, 1) inputs, sqrt of negative numbers is NaN: the checks run at their absolute values, and say so.
    synthesised = audit(path)
    assert status(synthesised, "x") == "pass"
    assert any("ran at their absolute values (x)" in n for n in synthesised.notes)


def test_a_point_outside_the_domain_either_way_stays_inconclusive(tmp_path):
    import tensorflow as tf

    class FarDomain(tf.Module):  # finite only for x > 100: neither N(0, 1) nor its absolute values are
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": tf.reduce_sum(tf.sqrt(x - 100.0), axis=-1)}

    path = str(tmp_path / "far_domain")
    tf.saved_model.save(FarDomain(), path)
    outcome = audit(path)
    (x,) = outcome.results
    assert x.status == "inconclusive" and "NaN or Inf at the checked point" in x.reason
    assert not any("absolute values" in n for n in outcome.notes)


def test_unknown_rank_needs_a_shape(models):
    path = models("unknown_rank")
    skipped = audit(path)
    assert [r.status for r in skipped.results] == ["skipped"] and "--shape x=" in skipped.results[0].reason
    assert status(audit(path, shapes={"x": (3, 2)}), "x") == "pass"


def test_seed_is_reproducible(models):
    first = audit(models("relu"), seed=3)
    again = audit(models("relu"), seed=3)
    other = audit(models("relu"), seed=4)
    assert [r.rel_error for r in first.results] == [r.rel_error for r in again.results]
    assert [r.rel_error for r in first.results] != [r.rel_error for r in other.results]


# -- what tf.test.compute_gradient cannot do --------------------------------------------------------

def test_compute_gradient_default_step_cannot_see_1e4_in_float32(models):
    import tensorflow as tf

    x0 = tf.constant(np.random.default_rng(0).standard_normal((2, 4)), tf.float32)
    errors = {}
    for name in ("mlp", "mlp_1e-4"):
        fn = (loaded := tf.saved_model.load(models(name))).signatures["serving_default"]
        (theoretical,), (numerical,) = tf.test.compute_gradient(lambda x, fn=fn: fn(x=x)["y"], [x0])
        errors[name] = float(np.max(np.abs(theoretical - numerical)))
        del loaded
    # The wrong gradient's error is lost in the healthy model's own finite-difference error.
    assert errors["mlp_1e-4"] <= 1.5 * errors["mlp"]
    assert status(audit(models("mlp_1e-4"), upcast=False), "x") == "fail"


# -- traced functions (Python and Keras targets) -----------------------------------------------------

def test_traced_function_checked_in_its_own_precision():
    import builders
    import tensorflow as tf

    from gradaudit.model import Output, Source
    from gradaudit.numeric import run_numeric_function

    act = builders.scaled_log1pexp(1e-4)
    w = tf.Variable(np.random.default_rng(0).standard_normal((4, 3)).astype("float32"), name="w")
    fn = tf.function(lambda x: tf.tanh(act(x) @ w), input_signature=[tf.TensorSpec([None, 4])])
    sources = [Source("x", "input", "float32", (None, 4), True), Source("w", "variable", "float32", (4, 3), True)]
    outcome = run_numeric_function(fn.get_concrete_function(),
                                   NumericTask(sources, [Output("output_0", "float32", None)], [], NumericOptions()))
    assert {(r.source, r.status, r.dtype) for r in outcome.results} == {
        ("x", "fail", "float32"), ("w", "pass", "float32")}  # w's gradient does not go through act
    assert rules(outcome) == {"gradient-mismatch"}


def test_a_failing_check_over_several_outputs_names_the_outputs_that_disagree(tmp_path):
    """x reaches `wrong` (a custom gradient 2% off) and `right` (tanh): the check of x over both outputs fails,
    and the finding names the output whose gradient disagrees on its own, not both."""
    import tensorflow as tf

    @tf.custom_gradient
    def sq(z):
        return z * z, lambda dy: dy * 2.04 * z

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def __call__(self, x):
            return {"wrong": sq(x), "right": tf.tanh(x)}

    path = str(tmp_path / "two_outputs")
    tf.saved_model.save(M(), path, options=tf.saved_model.SaveOptions(experimental_custom_gradients=True))
    outcome = audit(path)
    (f,) = [f for f in outcome.findings if f.rule == "gradient-mismatch"]
    assert f.outputs == ("wrong",) and f.sources == ("x",)
    assert "wrong disagrees" in f.message and "right agrees" in f.message
