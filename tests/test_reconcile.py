"""Static cuts explain numeric mismatches: a deliberate stop_gradient on one path is not a wrong gradient."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model

pytestmark = pytest.mark.slow  # every test here runs a model's numeric checks


def test_partial_stop_gradient_mismatch_is_explained(tmp_path):
    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable(1.5, name="w")

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": x * self.w + tf.stop_gradient(tf.sin(x))}

    report = audit_saved_model(save_module(M(), str(tmp_path / "partial")), AuditOptions())
    x_check = next(n for n in report.numeric if n.source == "x")
    # checked again on the float64 copy with the stop_gradient made an identity: there the gradient matches
    assert x_check.status == "pass" and "what StopGradient" in x_check.reason and "matches" in x_check.reason
    assert not [f for f in report.findings if f.rule == "gradient-mismatch"]
    assert report.verdict() == "pass"
    assert next(n for n in report.numeric if n.source == "w").status == "pass"


@pytest.mark.parametrize("wrong", [False, True])
def test_a_cut_on_one_output_explains_only_that_output(tmp_path, wrong):
    """`target = h + stop_gradient(tanh(h))` beside `main`: the cut explains target's difference and is checked
    apart, so it neither fails a healthy main nor excuses a wrong custom gradient on main."""

    @tf.custom_gradient
    def sq(z):
        return z * z, lambda dy: dy * (3.0 if wrong else 2.0) * z

    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable([1.0, 2.0], name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def __call__(self, x):
            h = x * self.w
            return {"main": sq(h), "target": h + tf.stop_gradient(tf.tanh(h))}

    report = audit_saved_model(save_module(M(), str(tmp_path / "m")), AuditOptions())
    main = [n for n in report.numeric if n.outputs.names == ("main",) and n.scale is None]
    target = [n for n in report.numeric if n.outputs.names == ("target",) and n.scale is None]
    assert main and target and all(n.expected_by for n in target if n.status == "fail")
    assert {n.status for n in main} == ({"fail"} if wrong else {"pass"})
    assert report.verdict() == ("fail" if wrong else "pass")


def test_a_signature_that_writes_its_variable_is_named_and_explains_the_difference():
    """tensorflow-model-optimization's pruning wrapper assigns kernel * mask at every call: the gradient with
    respect to the stored kernel is not the derivative of the output, and the op that writes is named."""
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample_models",
                        "thirdparty", "tfmot_pruned_mlp")
    report = audit_saved_model(path, AuditOptions())
    writes = [f for f in report.findings if f.rule == "writes-variable"]
    assert writes and {f.op.op_type for f in writes} == {"AssignVariableOp"}
    assert {s for f in writes for s in f.sources} == {"dense/kernel", "head/kernel"}
    assert not [f for f in report.findings if f.rule == "gradient-mismatch" and f.severity.value == "error"]
    stripped = audit_saved_model(path.replace("tfmot_pruned_mlp", "tfmot_pruned_stripped_mlp"), AuditOptions())
    assert not [f for f in stripped.findings if f.rule == "writes-variable"] and stripped.verdict() == "pass"


@pytest.mark.parametrize("factor", [1.0, 1.01])
def test_a_cut_beside_a_custom_gradient_is_checked_on_a_copy_without_the_cut(tmp_path, factor):
    """`y = act(x) @ v + stop_gradient(x @ u)` with a custom gradient for act: the finite differences see the cut
    branch, the gradient does not. On the float64 copy with the stop_gradient made an identity the gradient is
    the forward's derivative when the custom gradient is right: the cut explains the difference (a pass that
    says so); a custom gradient 1% off still differs there: a gradient-mismatch error, not "explained"."""

    @tf.custom_gradient
    def act(z):
        return tf.tanh(z), lambda dy: dy * (1.0 - tf.tanh(z) ** 2) * factor

    class M(tf.Module):
        def __init__(self):
            self.v = tf.Variable([[1.0], [-2.0]], name="v")
            self.u = tf.Variable([[0.5], [1.5]], name="u")

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": act(x) @ self.v + tf.stop_gradient(x @ self.u)}

    report = audit_saved_model(save_module(M(), str(tmp_path / "m")), AuditOptions())
    rows = [n for n in report.numeric if n.source == "x"]
    mismatches = [f for f in report.findings if f.rule == "gradient-mismatch" and f.sources == ("x",)]
    if factor == 1.0:
        assert not mismatches and report.verdict() == "pass"
        assert any(n.status == "pass" and "what StopGradient" in (n.reason or "") for n in rows)
    else:
        (f,) = mismatches
        assert f.severity.value == "error" and f.confirmed_by and "does not explain it" in f.message
        assert report.verdict() == "fail"
        assert all(not n.expected_by for n in rows)


def test_a_variable_the_cut_blocks_entirely_does_not_explain_the_variables_check(tmp_path):
    """`y = act(x @ w) @ v + stop_gradient(x @ u)` with act's custom gradient 1% off: u is blocked entirely, so
    it is not in the check of the variables together ("*"); that check fails on w and is not "explained" by
    the stop_gradient on u."""
    import numpy as np

    @tf.custom_gradient
    def act(h):
        t = tf.tanh(h)
        return h * t, lambda dy: dy * (t + h * (1 - t * t)) * 1.01

    class M(tf.Module):
        def __init__(self):
            r = np.random.default_rng(14)
            self.w = tf.Variable(r.standard_normal((4, 6)).astype("float32") * 0.5, name="w")
            self.v = tf.Variable(r.standard_normal((6, 2)).astype("float32"), name="v")
            self.u = tf.Variable(r.standard_normal((4, 2)).astype("float32"), name="u")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": act(x @ self.w) @ self.v + tf.stop_gradient(x @ self.u)}

    report = audit_saved_model(save_module(M(), str(tmp_path / "m")), AuditOptions())
    together = [n for n in report.numeric if n.source == "*" and n.scale is None]
    assert together and all(n.status == "fail" and not n.expected_by for n in together)
    assert "w" in {s for f in report.findings if f.rule == "gradient-mismatch" and f.severity.value == "error"
                   for s in f.sources}


PIECEWISE = {"Round": tf.round, "Floor": tf.floor,
             "ArgMax": lambda h: tf.cast(tf.expand_dims(tf.argmax(h, -1), -1), tf.float32)}


@pytest.mark.parametrize("op_type", sorted(PIECEWISE))
def test_a_piecewise_constant_cut_beside_a_stop_gradient_is_named_and_explains_nothing(tmp_path, op_type):
    """`piece(x @ w) + x @ v + stop_gradient(x @ w)`: w reaches y only through the piecewise-constant op and
    the stop_gradient (both name the blocked pair, and the piecewise op's GA103 is not lost behind the
    stop_gradient); x's difference from finite differences is what the stop_gradient leaves out (the piecewise
    op's zero gradient is what finite differences see too), shown by the copy without the stop_gradient."""
    piece = PIECEWISE[op_type]

    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable(tf.random.stateless_normal([4, 3], [1, 2]), name="w")
            self.v = tf.Variable(tf.random.stateless_normal([4, 3], [3, 4]), name="v")

        @tf.function(input_signature=[tf.TensorSpec([2, 4], tf.float32, name="x")])
        def __call__(self, x):
            h = x @ self.w
            return {"y": piece(h) + x @ self.v + tf.stop_gradient(h)}

    path = save_module(M(), str(tmp_path / op_type))
    loaded = tf.saved_model.load(path)
    x = tf.random.stateless_normal([2, 4], [5, 6])
    with tf.GradientTape() as tape:
        y = loaded.signatures["serving_default"](x=x)["y"]
    truth = tape.gradient(y, loaded.w)
    assert truth is None or not tf.reduce_any(truth != 0)  # TensorFlow's own: w gets no gradient

    report = audit_saved_model(path, AuditOptions())
    w_flow = next(f for f in report.flow if f.source.endswith("(w)") or f.source == "w")
    assert w_flow.status == "blocked" and {c.op.op_type for c in w_flow.blocked_by} == {op_type, "StopGradient"}
    assert [c.piecewise for c in w_flow.blocked_by if c.op.op_type == op_type] == [True]
    assert {(f.code, f.op.op_type) for f in report.findings if f.op} >= {("GA103", op_type), ("GA106", "StopGradient")}
    assert not [f for f in report.findings if f.rule == "disconnected-source"]  # not "only through stop_gradient"
    x_rows = [n for n in report.numeric if n.source == "x" and n.scale != 0.0]
    assert x_rows and all(n.status == "pass" and "StopGradient" in n.reason and "made an identity" in n.reason
                          for n in x_rows)
    # at inputs x 0, h = x @ w is exactly 0: floor's jump, argmax's tie, and round's jump at 0.5 within the steps
    # of a point with no magnitude to scale them by: no derivative there to compare with, so not a pass without
    # the stop_gradient's evidence, and not a failure either
    at_zero = [n for n in report.numeric if n.source == "x" and n.scale == 0.0]
    assert len(at_zero) == 1
    zero = at_zero[0]
    assert (zero.status == "inconclusive" and "jumps" in (zero.reason or "")) or (
        zero.status == "pass" and "made an identity" in (zero.reason or "")), at_zero
    assert report.verdict() == "fail"  # w never gets a gradient: GA103


@pytest.mark.parametrize("op_type", ["Round", "Floor", "Sign"])
@pytest.mark.parametrize("factor", [1.0, 1.05])
def test_a_piecewise_constant_path_does_not_excuse_a_wrong_custom_gradient_beside_it(tmp_path, op_type, factor):
    """`piece(3x) + f(x)` with f's custom gradient right or 5% off: the piecewise op's zero gradient is what finite
    differences see too (its derivative is zero almost everywhere), so it explains no mismatch; a wrong f fails,
    a right one passes."""
    piece = {"Round": tf.round, "Floor": tf.floor, "Sign": tf.sign}[op_type]

    @tf.custom_gradient
    def act(h):
        return tf.sin(h), lambda dy: dy * tf.cos(h) * factor

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([2, 4], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": piece(3 * x) + act(x)}

    path = save_module(M(), str(tmp_path / f"{op_type}_{factor}"))
    x = tf.constant(np.random.default_rng(2).standard_normal((2, 4)), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(tf.saved_model.load(path).signatures["serving_default"](x=x)["y"])
    truth = np.cos(x.numpy().astype(np.float64))  # the derivative almost everywhere: the piecewise term adds none
    wrong = not np.allclose(tape.gradient(y, x).numpy(), truth, rtol=1e-3)
    assert wrong is (factor != 1.0)
    report = audit_saved_model(path, AuditOptions())
    errors = [f for f in report.findings if f.rule == "gradient-mismatch" and f.severity.value == "error"]
    assert bool(errors) is wrong, [f.message for f in report.findings]
    assert report.verdict() == ("fail" if wrong else "pass")
    assert not [n for n in report.numeric if n.expected_by and op_type in n.expected_by]


@pytest.mark.parametrize("where", ["behind the cut", "on both paths"])
def test_a_wrong_custom_gradient_behind_a_stop_gradient_is_never_run_and_never_blamed(tmp_path, where):
    """`tanh(z) + stop_gradient(bad(z))`, bad's custom gradient 25% off: the model never runs it (tester 10's m17),
    so its gradient is the tanh path's, which is right; the copy without the cut differentiates bad's forward
    there, not its custom gradient. The twin that also uses bad(z) on the live path runs it, and fails."""

    @tf.custom_gradient
    def bad(h):
        return h * h, lambda dy: dy * 2.5 * h

    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable(tf.random.stateless_normal([3, 3], [2, 9]), name="w")

        @tf.function(input_signature=[tf.TensorSpec([2, 3], tf.float32, name="x")])
        def __call__(self, x):
            z = x @ self.w
            live = tf.tanh(z) + (0.1 * bad(z) if where == "on both paths" else 0.0)
            return {"y": live + tf.stop_gradient(bad(z))}

    path = save_module(M(), str(tmp_path / where.replace(" ", "_")))
    loaded = tf.saved_model.load(path)
    x = tf.constant(np.random.default_rng(4).standard_normal((2, 3)), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(loaded.signatures["serving_default"](x=x)["y"])
    z = x.numpy().astype(np.float64) @ loaded.w.numpy().astype(np.float64)
    live = 1 - np.tanh(z) ** 2 + (0.2 * z if where == "on both paths" else 0.0)  # d(live)/dz, the true derivative
    truth = live @ loaded.w.numpy().astype(np.float64).T
    right = np.allclose(tape.gradient(y, x).numpy(), truth, rtol=1e-4, atol=1e-6)
    assert right is (where == "behind the cut")
    report = audit_saved_model(path, AuditOptions())
    errors = [f for f in report.findings if f.rule == "gradient-mismatch" and f.severity.value == "error"]
    assert bool(errors) is not right, [f.message for f in report.findings]
    assert report.verdict() == ("pass" if right else "fail")
