"""GA30x hazard lints: each fires on its pattern and not on the stable way of writing it. Static only."""

from __future__ import annotations

import pytest

from gradaudit.rules import get_rule

LINTS = ("log1p-exp", "log-sigmoid", "log-softmax", "sqrt-at-zero", "where-nan", "squared-denominator")


def hazards(report) -> list:
    return [f for f in report.findings if f.rule in LINTS]


@pytest.mark.parametrize("name,rule,op_type", [
    ("log1pexp_naive", "log1p-exp", "Log"),
    ("log_sigmoid_naive", "log-sigmoid", "Log"),
    ("log_softmax_naive", "log-softmax", "Log"),
    ("unstable_norm", "sqrt-at-zero", "Sqrt"),
    ("where_nan", "where-nan", "SelectV2"),
    ("reciprocal_ratio", "squared-denominator", "Mul"),
])
def test_lint_fires_on_its_pattern(static_report, name, rule, op_type):
    found = hazards(static_report(name))
    assert [(f.rule, f.op.op_type) for f in found] == [(rule, op_type)]
    f = found[0]
    assert f.code == get_rule(rule).code and f.code.startswith("GA30")
    assert f.severity.value == "warning"  # not run: a lint on its own is a warning
    assert f.outputs and f.sources
    # where-nan's fix is written for the op it guards (test_the_where_nan_fix_is_for_the_guarded_op_...)
    assert f.fix == get_rule(rule).fix if rule != "where-nan" else "give Log a safe argument" in f.fix


@pytest.mark.parametrize("name", ["softplus", "log1pexp_custom", "safe_norm", "where_safe", "ratio_stable",
                                  "normal_logpdf", "mlp", "cnn", "while_loop", "second_order_stop_gradient"])
def test_no_lint_on_stable_forms(static_report, name):
    assert hazards(static_report(name)) == []


def test_squared_denominator_inside_a_saved_custom_gradient(static_report):
    """Seed 000: the forward -a/b is fine; the hand-written gradient a / b**2 is not."""
    r = static_report("ratio_naive")
    (f,) = hazards(r)
    assert f.rule == "squared-denominator" and f.op.op_type == "RealDiv"
    assert f.op.function.startswith("__inference_internal_grad_fn")  # inside the gradient function
    assert "IdentityN" in f.message and "Pow 'pow'" in f.message
    assert set(f.sources) == {"a", "b"} and f.outputs == ("f",)


def test_log1p_exp_with_the_forward_replaced_by_a_custom_gradient_is_not_a_lint(static_report):
    """log1pexp_custom computes the same log(1 + exp(x)), but no gradient flows through that Log."""
    r = static_report("log1pexp_custom")
    assert "custom-gradient" in {f.rule for f in r.findings} and hazards(r) == []


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """One model, one output per variant of the patterns; a finding names the output it concerns."""
    import tensorflow as tf
    from helpers import save_module

    c = tf.constant([0.5, 1.5])

    class Zoo(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x"),
                                      tf.TensorSpec([None, 2], tf.float32, name="y")])
        def __call__(self, x, y):
            return {
                "log_exp_plus_one": tf.math.log(tf.exp(x) + 1.0),
                "log1p_of_exp": tf.math.log1p(tf.exp(x)),
                "log_two_plus_exp": tf.math.log(2.0 + tf.exp(x)),
                "where_reciprocal": tf.where(x > 0, 1.0 / x, 0.0),
                "where_unrelated": tf.where(x > 0, tf.math.log(y * y + 1.0), 0.0),
                "where_log_times_two": tf.where(x > 0.5, 2.0 * tf.math.log(x), 0.0),
                "where_sqrt": tf.where(x > 0, tf.sqrt(x), 0.0),
                "where_pow_half": tf.where(x > 0, tf.pow(x, 0.5), 0.0),
                "pow_half_of_squares": tf.pow(tf.reduce_sum(x * x, axis=-1), 0.5),
                "sqrt_of_relu": tf.sqrt(tf.nn.relu(x)),
                "sqrt_with_epsilon": tf.sqrt(tf.reduce_sum(tf.square(x), axis=-1) + 1e-6),
                "sqrt_of_input": tf.sqrt(y),
                "div_by_square": y / tf.square(x),
                "div_by_scaled_square": y / (2.0 * x * x),
                "div_by_constant_square": x / (2.0 * c ** 2),
                "div_by_sum_of_squares": y / tf.reduce_sum(x * x, axis=-1, keepdims=True),
                "div_by_sum_of_squares_plus_eps": y / (tf.reduce_sum(x * x, axis=-1, keepdims=True) + 1e-6),
                "log_of_hand_sigmoid": tf.math.log(1.0 / (1.0 + tf.exp(-x))),
                "hand_sigmoid": 1.0 / (1.0 + tf.exp(-y)),
            }

    from gradaudit.api import AuditOptions, audit_saved_model

    path = save_module(Zoo(), str(tmp_path_factory.mktemp("zoo") / "zoo"))
    report = audit_saved_model(path, AuditOptions(static_only=True))
    return {out: f.rule for f in hazards(report) for out in f.outputs}, len(hazards(report))


@pytest.mark.parametrize("output,rule", [
    ("log_exp_plus_one", "log1p-exp"), ("log1p_of_exp", "log1p-exp"), ("log_two_plus_exp", None),
    ("where_reciprocal", "where-nan"), ("where_unrelated", None), ("where_log_times_two", "where-nan"),
    ("where_sqrt", None), ("where_pow_half", "where-nan"),
    ("pow_half_of_squares", "sqrt-at-zero"), ("sqrt_of_relu", "sqrt-at-zero"), ("sqrt_with_epsilon", None),
    ("sqrt_of_input", None),
    ("div_by_square", "squared-denominator"), ("div_by_scaled_square", "squared-denominator"),
    ("div_by_constant_square", None),
    ("div_by_sum_of_squares", "squared-denominator"), ("div_by_sum_of_squares_plus_eps", None),
    ("log_of_hand_sigmoid", "log-sigmoid"), ("hand_sigmoid", None),
])
def test_pattern_variants(zoo, output, rule):
    by_output, _ = zoo
    assert by_output.get(output) == rule


def test_each_variant_is_one_finding(zoo):
    by_output, count = zoo
    assert count == len(by_output) == 11


def test_every_hazard_rule_is_registered_with_its_docs():
    for slug in (*LINTS, "unstable-gradient", "nonfinite-forward", "second-order-mismatch",
                 "second-order-unavailable"):
        r = get_rule(slug)
        assert r.code.startswith("GA3") and "## Use instead" in r.doc
    assert get_rule("unstable-gradient").severity.value == "error"
    assert get_rule("nonfinite-forward").severity.value == "warning"


@pytest.mark.parametrize("op_type,fn", [
    ("Log", "tf.math.log(x)"), ("Log1p", "tf.math.log1p(x - 1.0)"), ("RealDiv", "1.0 / x"),
    ("Div", "tf.raw_ops.Div(x=tf.ones_like(x), y=x)"), ("Pow", "tf.pow(x, 0.5)"), ("Sqrt", "tf.sqrt(x)"),
    ("Rsqrt", "tf.math.rsqrt(x)"), ("Reciprocal", "tf.math.reciprocal(x)"), ("Inv", "tf.raw_ops.Inv(x=x)"),
])
def test_where_nan_matches_the_installed_tensorflow(op_type, fn):
    """GA305 claims a NaN gradient exactly for the ops whose gradient is NaN at 0 under a where."""
    import numpy as np
    import tensorflow as tf

    from gradaudit.static.hazards import _SINGULAR

    x = tf.constant([0.0, 1.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.where(x > 0, eval(fn, {"tf": tf, "x": x}), 0.0)
    assert bool(np.isnan(tape.gradient(y, x).numpy()[0])) == (op_type in _SINGULAR)


class _StableSoftplus:
    """log(1 + exp(.)) of a value that is never positive: exp cannot overflow, the stable forms (tester 7's
    false GA301 on each)."""

    @staticmethod
    def build(path: str) -> str:
        import tensorflow as tf
        from helpers import save_module

        class M(tf.Module):
            @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="z"),
                                          tf.TensorSpec([None, 3], tf.float32, name="labels")])
            def __call__(self, z, labels):
                return {"softplus": tf.nn.relu(z) + tf.math.log1p(tf.exp(-tf.abs(z))),
                        "logistic": tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=z),
                        "clipped": tf.math.log(1.0 + tf.exp(tf.minimum(z, 0.0))),
                        "naive": tf.math.log1p(tf.exp(z))}

        return save_module(M(), path)


def test_log1p_exp_of_a_never_positive_value_is_not_a_lint(tmp_path):
    import numpy as np
    import tensorflow as tf

    from gradaudit.api import AuditOptions, audit_saved_model

    path = _StableSoftplus.build(str(tmp_path / "stable"))
    loaded = tf.saved_model.load(path)
    z = tf.constant([[100.0, -100.0, 3.0]])
    out = loaded.signatures["serving_default"](z=z, labels=tf.ones_like(z))
    assert not np.all(np.isfinite(out["naive"].numpy()))
    # the truth: each stable form alone has a finite value and gradient where exp(z) overflows
    for name, form in (("softplus", lambda x: tf.nn.relu(x) + tf.math.log1p(tf.exp(-tf.abs(x)))),
                       ("logistic", lambda x: tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.ones_like(x),
                                                                                      logits=x)),
                       ("clipped", lambda x: tf.math.log(1.0 + tf.exp(tf.minimum(x, 0.0))))):
        with tf.GradientTape() as tape:
            tape.watch(z)
            y = form(z)
        assert np.allclose(y.numpy(), out[name].numpy()) and np.all(np.isfinite(tape.gradient(y, z).numpy()))
    r = audit_saved_model(path, AuditOptions(static_only=True))
    found = [f for f in r.findings if f.rule == "log1p-exp"]
    assert [f.outputs for f in found] == [("naive",)], [f.message for f in found]


def test_a_division_by_the_square_of_a_value_away_from_zero_is_not_a_lint(tmp_path):
    """h / (1 + |h|)**2 (tester 7's sqden_noise): the square is at least 1, it cannot underflow; h / h**2 still is."""
    import tensorflow as tf
    from helpers import save_module

    from gradaudit.api import AuditOptions, audit_saved_model

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="h")])
        def __call__(self, h):
            return {"bounded": h / (1.0 + tf.abs(h)) ** 2, "raw": 1.0 / tf.square(h)}

    r = audit_saved_model(save_module(M(), str(tmp_path / "m")), AuditOptions(static_only=True))
    found = [f for f in r.findings if f.rule == "squared-denominator"]
    assert [f.outputs for f in found] == [("raw",)], [f.message for f in found]


def test_the_root_of_a_mean_of_squares_gets_a_standard_deviations_fix(tmp_path):
    """tf.math.reduce_std and the square root of tf.nn.moments' variance are the root of a mean: their GA304 fix keeps
    the mean (reduce_variance + eps), where a norm's keeps the sum (tester 17: reduce_std was told to compute a
    norm). Truth: at a constant row both have a NaN gradient on the loaded model, and the fix's form is finite."""
    import numpy as np
    import tensorflow as tf
    from helpers import save_module

    from gradaudit.api import AuditOptions, audit_saved_model

    class Spread(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def __call__(self, x):
            _, var = tf.nn.moments(x, axes=[-1])
            return {"std": tf.math.reduce_std(x, axis=-1), "moments_std": tf.sqrt(var),
                    "norm": tf.norm(x, axis=-1)}

    path = save_module(Spread(), str(tmp_path / "spread"))
    fn = tf.saved_model.load(path).signatures["serving_default"]
    x = tf.constant([[2.0, 2.0, 2.0, 2.0]])
    for name in ("std", "moments_std"):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x=x)[name]
        assert not np.any(np.isfinite(tape.gradient(y, x).numpy()))
    with tf.GradientTape() as tape:
        tape.watch(x)
        fixed = tf.sqrt(tf.math.reduce_variance(x, axis=-1) + 1e-12)
    assert np.all(np.isfinite(tape.gradient(fixed, x).numpy()))
    found = {f.outputs: f for f in audit_saved_model(path, AuditOptions(static_only=True)).findings
             if f.rule == "sqrt-at-zero"}
    assert set(found) == {("std",), ("moments_std",), ("norm",)}, [f.message for f in found.values()]
    assert "reduce_variance" in found[("std",)].fix and "reduce_variance" in found[("moments_std",)].fix
    assert "reduce_sum(x * x" in found[("norm",)].fix


def test_a_where_that_guards_a_shifted_argument_is_a_where_nan(tmp_path):
    """where(x > 1, log(x - 1), 0) is the where-nan pattern with the guarded value shifted: at x = 1 the forward is
    finite and the gradient NaN (tester 17: only the probe caught it, no GA305). The double-where twin is safe and
    not linted. Truth: the loaded models' tapes at x = 1."""
    import numpy as np
    import tensorflow as tf
    from helpers import save_module

    from gradaudit.api import AuditOptions, audit_saved_model

    class Shifted(tf.Module):
        def __init__(self, form):
            self.form = form

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": self.form(x)}

    forms = {"naive": (lambda x: tf.where(x > 1.0, tf.math.log(x - 1.0), 0.0), False),
             "safe": (lambda x: tf.where(x > 1.0, tf.math.log(tf.where(x > 1.0, x - 1.0, 1.0)), 0.0), True)}
    x = tf.constant([[1.0, 2.0, 0.5]])
    for name, (form, finite) in forms.items():
        path = save_module(Shifted(form), str(tmp_path / name))
        fn = tf.saved_model.load(path).signatures["serving_default"]
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(fn(x=x)["y"])
        assert np.all(np.isfinite(y.numpy()))
        assert bool(np.all(np.isfinite(tape.gradient(y, x).numpy()))) == finite
        found = [f for f in audit_saved_model(path, AuditOptions(static_only=True)).findings if f.rule == "where-nan"]
        assert bool(found) == (not finite), (name, [f.message for f in found])


@pytest.mark.parametrize("op_type,form,cond", [
    ("Log", "tf.math.log(x)", "x > 0"), ("Log1p", "tf.math.log1p(x)", "x > -1"),
    ("RealDiv", "1.0 / x", "x > 0"), ("Pow", "tf.pow(x, 0.5)", "x > 0"),
])
@pytest.mark.parametrize("side", ["true", "false"])
def test_the_where_nan_fix_is_for_the_guarded_op_and_its_code_is_safe(tmp_path, op_type, form, cond, side):
    """GA305's fix is written for the op the where guards, on the branch it is in (tester 18: the log template
    was given for a division), and the code it gives, run as written, has a finite gradient where the naive form's
    is NaN. Truth: TensorFlow's tape on the model and on the fix's code."""
    import re

    import numpy as np
    import tensorflow as tf
    from helpers import save_module

    from gradaudit.api import AuditOptions, audit_saved_model

    def naive(x):
        c, f = eval(cond, {"x": x}), eval(form, {"tf": tf, "x": x})
        return tf.where(c, f, 0.0) if side == "true" else tf.where(tf.logical_not(c), 0.0, f)

    class Guarded(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": naive(x)}

    path = save_module(Guarded(), str(tmp_path / "m"))
    found = [f for f in audit_saved_model(path, AuditOptions(static_only=True)).findings if f.rule == "where-nan"]
    assert len(found) == 1, [f.message for f in found]
    fix = found[0].fix
    assert f"give {op_type} a safe argument" in fix, fix
    code = re.search(r"(safe = .*?y = tf\.where\(cond, [^;]*\))", fix).group(1)
    point = tf.constant([[-1.0 if op_type == "Log1p" else 0.0, 2.0]])
    grads = []
    for body in (None, code):
        with tf.GradientTape() as tape:
            tape.watch(point)
            if body is None:
                y = naive(point)
            else:
                tested = eval(cond, {"x": point})
                scope = {"tf": tf, "x": point, "d": point, "n": 1.0, "p": 0.5,
                         "cond": tf.logical_not(tested) if side == "false" else tested}
                exec(body.replace("...", "0.0"), scope)
                y = scope["y"]
            s = tf.reduce_sum(y)
        grads.append(tape.gradient(s, point).numpy())
    assert np.isnan(grads[0]).any() and np.all(np.isfinite(grads[1])), (fix, grads)
